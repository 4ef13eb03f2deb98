#!/usr/bin/env bash
# Installs the reference server, real Triton 2.51 (CPU only) as carried by the PyPI wheel
# nvidia-pytriton==0.7.0, into a separate virtual environment, idempotently.
#
#   loadtests/triton_ref/setup.sh [DIR]      (default DIR: /work/ref)
#
# Leaves DIR/venv (python 3.11 with nvidia-pytriton, numpy and onnxruntime 1.31.1, which the
# python model triton_ref/mlp_onnx/model.py imports) and DIR/backends/python
# (the python backend, with the 3.11 stub beside libtriton_python.so), which run.sh uses.
set -euo pipefail
DIR="${1:-/work/ref}"
PY="${PYTHON:-python3.11}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

if [ ! -x "$DIR/venv/bin/python" ]; then
  "$PY" -m venv "$DIR/venv"
fi
if ! "$DIR/venv/bin/python" -c 'import importlib.metadata as m; assert m.version("nvidia-pytriton") == "0.7.0"; import numpy' 2>/dev/null; then
  "$DIR/venv/bin/pip" install --quiet --upgrade pip
  "$DIR/venv/bin/pip" install --quiet "nvidia-pytriton==0.7.0" numpy
fi
if ! "$DIR/venv/bin/python" -c 'import importlib.metadata as m; assert m.version("onnxruntime") == "1.31.1"' 2>/dev/null; then
  "$DIR/venv/bin/pip" install --quiet "onnxruntime==1.31.1"
fi

SP="$("$DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
TS="$SP/pytriton/tritonserver"
if [ ! -f "$DIR/backends/python/libtriton_python.so" ] || [ ! -x "$DIR/backends/python/triton_python_backend_stub" ]; then
  rm -rf "$DIR/backends/python"
  mkdir -p "$DIR/backends"
  cp -r "$TS/backends/python" "$DIR/backends/python"
  cp "$TS/python_backend_stubs/3.11/triton_python_backend_stub" "$DIR/backends/python/"
  chmod +x "$DIR/backends/python/triton_python_backend_stub"
fi
echo "reference Triton ready: $TS/bin/tritonserver (backends in $DIR/backends)"
