#!/usr/bin/env bash
# Installs Triton's perf_analyzer for this machine into loadtests/.tools/, idempotently, without
# root and without touching any Python environment.
#
#   loadtests/setup.sh
#
# What it fetches:
#   - the PyPI wheel tritonclient==2.50.0 (manylinux1_x86_64), which carries
#     tritonclient-2.50.0.data/data/bin/perf_analyzer (newer wheels need glibc 2.38; this is 2.36)
#   - Debian's libb64-0d (apt-get download + dpkg -x, so no install as root is needed)
#   - libcudart.so.12 from the PyPI wheel nvidia-cuda-runtime-cu12 (nvidia/cuda_runtime/lib/);
#     perf_analyzer links it but runs without a GPU
# Then loadtests/perf_analyzer (a wrapper that sets LD_LIBRARY_PATH) runs it.
# Also loadtests/.baselines-venv (python3.11): Flask, gunicorn, FastAPI, uvicorn and onnxruntime
# at the versions pinned in loadtests/requirements-baselines.txt, for targets.py's baselines
# (CI does not run this script).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="$HERE/.tools"
PIP="${PIP:-}"
if [ -z "$PIP" ]; then
  if [ -x "$HERE/../.venv/bin/pip" ]; then PIP="$HERE/../.venv/bin/pip"; else PIP="python3 -m pip"; fi
fi
TC_VERSION=2.50.0
mkdir -p "$TOOLS/dl" "$TOOLS/bin" "$TOOLS/lib"

# 1. perf_analyzer from the tritonclient 2.50.0 wheel (download only, never installed).
if [ ! -x "$TOOLS/bin/perf_analyzer" ]; then
  $PIP download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    --python-version 3.11 -d "$TOOLS/dl" "tritonclient==$TC_VERSION"
  WHL="$(ls "$TOOLS/dl"/tritonclient-$TC_VERSION-*manylinux1_x86_64*.whl | head -1)"
  rm -rf "$TOOLS/dl/tc"
  unzip -q -o "$WHL" "tritonclient-$TC_VERSION.data/data/bin/*" -d "$TOOLS/dl/tc"
  cp "$TOOLS/dl/tc/tritonclient-$TC_VERSION.data/data/bin/perf_analyzer" "$TOOLS/bin/"
  chmod +x "$TOOLS/bin/perf_analyzer"
  rm -rf "$TOOLS/dl/tc"
fi

# 2. libb64.so.0d from Debian's libb64-0d, unpacked locally.
if ! ls "$TOOLS/lib"/libb64.so.0* >/dev/null 2>&1; then
  if ! ls "$TOOLS/dl"/libb64-0d_*.deb >/dev/null 2>&1; then
    (cd "$TOOLS/dl" && apt-get download libb64-0d) || {
      echo "apt-get download libb64-0d failed; run 'apt-get update' first" >&2; exit 1; }
  fi
  rm -rf "$TOOLS/dl/b64"
  dpkg -x "$(ls "$TOOLS/dl"/libb64-0d_*.deb | head -1)" "$TOOLS/dl/b64"
  cp -P "$TOOLS/dl/b64"/usr/lib/x86_64-linux-gnu/libb64.so.0* "$TOOLS/lib/"
  rm -rf "$TOOLS/dl/b64"
fi

# 3. libcudart.so.12 from nvidia-cuda-runtime-cu12.
if [ ! -e "$TOOLS/lib/libcudart.so.12" ]; then
  $PIP download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.11 -d "$TOOLS/dl" "nvidia-cuda-runtime-cu12<13"
  WHL="$(ls "$TOOLS/dl"/nvidia_cuda_runtime_cu12-*.whl | head -1)"
  rm -rf "$TOOLS/dl/cudart"
  unzip -q -o "$WHL" 'nvidia/cuda_runtime/lib/*' -d "$TOOLS/dl/cudart"
  cp "$TOOLS/dl/cudart/nvidia/cuda_runtime/lib"/libcudart.so.12* "$TOOLS/lib/"
  rm -rf "$TOOLS/dl/cudart"
fi

# 4. loadtests/perf_analyzer (tracked) is the wrapper that sets LD_LIBRARY_PATH.
chmod +x "$HERE/perf_analyzer"

# 5. The Flask / FastAPI baselines' virtual environment (loadtests/baselines/).
BV="$HERE/.baselines-venv"
REQ="$HERE/requirements-baselines.txt"
if [ ! -f "$BV/.installed" ] || ! cmp -s "$REQ" "$BV/.installed"; then
  [ -x "$BV/bin/python" ] || "${PYTHON:-python3.11}" -m venv "$BV"
  "$BV/bin/pip" install --quiet -r "$REQ"
  cp "$REQ" "$BV/.installed"
fi

# Check that every library resolves.
if LD_LIBRARY_PATH="$TOOLS/lib" ldd "$TOOLS/bin/perf_analyzer" | grep -q 'not found'; then
  LD_LIBRARY_PATH="$TOOLS/lib" ldd "$TOOLS/bin/perf_analyzer" | grep 'not found' >&2
  exit 1
fi
echo "perf_analyzer ready: $HERE/perf_analyzer"
