#!/usr/bin/env bash
# Builds the example backends into a Triton backend directory, where Tritium (and Triton) find
# them for models with `backend: "vecop"` and `backend: "iterate"`:
#
#   bash examples/custom_backend/build.sh <backend-directory>
#   -> <backend-directory>/vecop/libtriton_vecop.so
#   -> <backend-directory>/iterate/libtriton_iterate.so
#
# Nothing is linked against Tritium: the TRITONSERVER_*/TRITONBACKEND_* functions the backend
# calls stay undefined here and resolve to the server's when it loads the library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh <backend-directory>}
for backend in vecop iterate; do
  mkdir -p "$dir/$backend"
  "${CC:-cc}" -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -pthread \
    -I"$here" -o "$dir/$backend/libtriton_$backend.so" "$here/$backend.c"
  echo "built $dir/$backend/libtriton_$backend.so"
done
