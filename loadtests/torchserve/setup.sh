#!/usr/bin/env bash
# Installs TorchServe, the PyTorch serving peer of loadtests/torchserve.py, idempotently:
#   - loadtests/.torchserve-venv (python3.11): torch==2.11.0 (the libtorch Tritium's PyTorch
#     backend runs; a full install with its CUDA wheels, about 4.8 GB, since PyPI's torch imports
#     only with them), torchserve==0.12.0 and torch-model-archiver==0.12.0;
#   - Debian's openjdk-17-jre-headless (TorchServe's frontend is Java) and wrk (the HTTP load
#     generator both servers are measured with).
# CI does not run this script.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/../.torchserve-venv"
if ! command -v java >/dev/null || ! command -v wrk >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless wrk >/dev/null
fi
if ! "$VENV/bin/python" -c "import ts, yaml, psutil" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check torch==2.11.0 torchserve==0.12.0 \
    torch-model-archiver==0.12.0 numpy pyyaml psutil packaging
fi
"$VENV/bin/python" -c "import torch, ts; print('torch', torch.__version__, 'torchserve ok')"
