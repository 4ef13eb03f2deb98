#!/usr/bin/env bash
# Starts the reference server (real Triton 2.51 from nvidia-pytriton, installed by setup.sh)
# in the foreground on a model repository, with the python backend prepared by setup.sh.
#
#   loadtests/triton_ref/run.sh REPO [HTTP_PORT [GRPC_PORT [METRICS_PORT]]] [-- extra tritonserver flags]
#
# Environment: TRITON_REF_DIR (default /work/ref), the folder setup.sh installed into.
# Example: run.sh /work/ref/models 8000 8001 8002 -- --model-control-mode=explicit --load-model=add_sub
set -euo pipefail
REF="${TRITON_REF_DIR:-/work/ref}"
REPO="${1:?usage: run.sh REPO [HTTP_PORT [GRPC_PORT [METRICS_PORT]]] [-- flags]}"
shift
HTTP=8000 GRPC=8001 METRICS=8002
for v in HTTP GRPC METRICS; do
  if [ $# -gt 0 ] && [ "$1" != "--" ]; then printf -v "$v" '%s' "$1"; shift; fi
done
[ "${1:-}" = "--" ] && shift

[ -x "$REF/venv/bin/python" ] || "$(dirname "$0")/setup.sh" "$REF"
SP="$("$REF/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export LD_LIBRARY_PATH="$SP/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The python backend stub imports numpy from whichever python is first on PATH.
export PATH="$REF/venv/bin:$PATH"
exec "$SP/pytriton/tritonserver/bin/tritonserver" \
  --model-repository "$(cd "$REPO" && pwd)" \
  --backend-directory "$REF/backends" \
  --http-port "$HTTP" --grpc-port "$GRPC" --metrics-port "$METRICS" \
  "$@"
