#!/usr/bin/env bash
# A Python environment with PyTorch and sentence-transformers for loadtests/minilm_torch_check.py
# (not part of CI), in loadtests/.torch-venv/ (git-ignored), idempotently.
#
#   loadtests/minilm_torch_setup.sh
#
# Why these versions: every torch 2.x wheel for Linux x86_64 on PyPI is a CUDA build whose
# libtorch_python.so needs libtorch_cuda.so and with it the CUDA wheels (cuBLAS 421 MB, cuDNN
# 366 MB, NCCL 206 MB, cuSPARSELt 170 MB, ... on top of torch 2.13.0's own 527 MB), so
# `import torch` fails without them ("libcublasLt.so.*[0-9] not found"). torch 1.12.1 (the last
# release before the CUDA libraries moved out of the wheel) carries its CUDA 10.2 libraries
# inside one 776 MB wheel and imports and computes on a machine without a GPU; it has wheels
# for Python <= 3.10 only, hence Python 3.10 (PYTHON310, default `python3.10` or pyenv's 3.10).
# sentence-transformers 2.7.0 / transformers 4.40.2 are recent releases that still support it.
# About 0.8 GB to download, 2.2 GB on disk.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.torch-venv"
REQS=(torch==1.12.1 numpy==1.26.4 sentence-transformers==2.7.0 transformers==4.40.2
      huggingface-hub==0.23.5 "tritonclient[all]==2.73.0" requests)

PY="${PYTHON310:-}"
if [ -z "$PY" ]; then
  for c in python3.10 "$HOME/.pyenv/versions/3.10"*/bin/python; do
    # (a pyenv shim may exist and still refuse to run)
    if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || { echo "minilm_torch_setup.sh: no Python 3.10 found (set PYTHON310)" >&2; exit 1; }

STAMP="$VENV/.minilm-torch"
want="$(printf '%s\n' "${REQS[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${REQS[@]}"
  echo "$want" > "$STAMP"
fi
"$VENV/bin/python" -c "import torch, sentence_transformers; print('torch', torch.__version__, '/ sentence-transformers', sentence_transformers.__version__)"
