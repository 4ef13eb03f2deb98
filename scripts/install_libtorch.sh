#!/usr/bin/env bash
# Installs the libtorch that the PyTorch backend (the `tch` crate) builds against and loads, at
# .libtorch/ in the repository, from PyPI wheels and nothing else:
#   - torch==2.11.0 (the version tch 0.24 binds): its C++ headers (torch/include) and the CPU
#     libraries libtorch_cpu.so, libtorch.so, libc10.so and libgomp.so.1 (about 460 MB). The
#     wheel's CUDA libraries (libtorch_cuda.so and friends, about 520 MB) are left out: this
#     build runs libtorch on the CPU.
#   - libcudart.so.13 and libcupti.so.13 (under 5 MB together, from nvidia-cuda-runtime==13.0.96
#     and nvidia-cuda-cupti==13.0.85), because libtorch_cpu.so is linked against them even when
#     no GPU is used. Python's `torch` package is not installed: importing it needs the whole
#     multi-GB CUDA stack.
# The build finds .libtorch through LIBTORCH (set in .cargo/config.toml); the binary finds its
# libraries through an rpath (build.rs). Idempotent: when .libtorch is complete it only checks.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$REPO/.libtorch"
TORCH_VERSION=2.11.0
STAMP="$DEST/.tritium-libtorch"
want="torch-$TORCH_VERSION cudart-13.0.96 cupti-13.0.85"
PYTHON="${PYTHON:-python3.11}"

# The CUDA runtime headers (nvidia-cuda-runtime==13.0.96 and nvidia-cuda-crt==13.0.88, about
# 1 MB unpacked) at .libtorch/cuda/include: the build compiles Tritium's small CUDA shim
# (ffi/cuda/shim.cpp) against them and libtorch's headers. No CUDA library is installed or
# linked; the shim is loaded only on machines whose own libtorch has CUDA.
install_cuda_headers() {
  local cuda_want="cuda-headers-13.0.96-crt-13.0.88" cuda_stamp="$DEST/cuda/.tritium-cuda-headers"
  if [ "$(cat "$cuda_stamp" 2>/dev/null || true)" = "$cuda_want" ]; then
    return 0
  fi
  local wheels
  wheels="$(mktemp -d)"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$wheels" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-crt==13.0.88"
  rm -rf "$DEST/cuda"
  mkdir -p "$DEST/cuda/include"
  "$PYTHON" - "$wheels" "$DEST/cuda/include" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
prefix = "nvidia/cu13/include/"
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir() or not info.filename.startswith(prefix):
                continue
            target = dest / info.filename[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
for needed in ("cuda_runtime_api.h", "crt/host_defines.h"):
    if not (dest / needed).is_file():
        sys.exit(f"install_libtorch.sh: the CUDA header wheels lack {needed}")
PY
  rm -rf "$wheels"
  echo "$cuda_want" > "$cuda_stamp"
  echo "install_libtorch.sh: CUDA runtime headers at $DEST/cuda/include" >&2
}

if [ "$(cat "$STAMP" 2>/dev/null || true)" = "$want" ]; then
  install_cuda_headers
  exit 0
fi
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
echo "install_libtorch.sh: fetching torch==$TORCH_VERSION and the two CUDA runtime wheels from PyPI" >&2
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$WHEELS" \
  "torch==$TORCH_VERSION" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cupti==13.0.85"
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial/lib"
"$PYTHON" - "$WHEELS" "$DEST.partial" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
libs = {"libtorch_cpu.so", "libtorch.so", "libc10.so", "libgomp.so.1", "libcudart.so.13", "libcupti.so.13"}
found = set()
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir():
                continue
            if name.startswith("torch/include/"):
                target = dest / "include" / name[len("torch/include/"):]
            elif name.rsplit("/", 1)[-1] in libs and "/lib/" in name:
                target = dest / "lib" / name.rsplit("/", 1)[-1]
                found.add(target.name)
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
missing = libs - found
if missing:
    sys.exit(f"install_libtorch.sh: the wheels lack {sorted(missing)}")
PY
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
echo "$want" > "$STAMP"
install_cuda_headers
echo "install_libtorch.sh: libtorch $TORCH_VERSION (CPU) at $DEST" >&2
