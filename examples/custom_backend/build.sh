#!/usr/bin/env bash
# Builds the vecop example backend into a Triton backend directory, where Tritium (and Triton)
# find it for models with `backend: "vecop"`:
#
#   bash examples/custom_backend/build.sh <backend-directory>
#   -> <backend-directory>/vecop/libtriton_vecop.so
#
# Nothing is linked against Tritium: the TRITONSERVER_*/TRITONBACKEND_* functions the backend
# calls stay undefined here and resolve to the server's when it loads the library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh <backend-directory>}
mkdir -p "$dir/vecop"
"${CC:-cc}" -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden \
  -I"$here" -o "$dir/vecop/libtriton_vecop.so" "$here/vecop.c"
echo "built $dir/vecop/libtriton_vecop.so"
