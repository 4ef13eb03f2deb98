#!/usr/bin/env bash
# The GPU checks and figures of the PyTorch backend, run on a machine with an NVIDIA GPU whose
# python3 has torch (with CUDA) and transformers, from the repository root:
#
#   bash loadtests/gpu/run.sh [OUT_DIR]
#
# It needs loadtests/gpu/.carry/ (made on a CPU machine by loadtests/gpu/prepare.sh): Tritium and
# torch_ceiling built there run here with this machine's libtorch (its libtorch_cuda.so loaded at
# start). Writes OUT_DIR/RESULTS.md, OUT_DIR/results.json and the logs; runs in about 4 minutes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-${OUT:-/tmp/tritium-gpu}}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
SITE="$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
NVLIBS="$(ls -d "$SITE"/nvidia/*/lib "$SITE"/nvidia/cu*/lib 2>/dev/null | sort -u | tr '\n' ':')"
export LD_LIBRARY_PATH="$SITE/torch/lib:${NVLIBS}${LD_LIBRARY_PATH:-}"
chmod +x "$ROOT"/loadtests/gpu/.carry/bin/* "$ROOT"/loadtests/gpu/.carry/pa/perf_analyzer
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
"$PY" "$ROOT/loadtests/gpu/gpu_bench.py" --out "$OUT" 2>&1 | tee "$OUT/run.log"
