#!/usr/bin/env bash
# Gathers, on a CPU machine, everything loadtests/gpu/run.sh needs on the lent GPU machine, which
# reaches no registry: loadtests/gpu/.carry/ (gitignored, under 64 MiB) holds
#   bin/tritium, bin/torch_ceiling  stripped release builds (linked against the CPU libtorch; on
#                                   the GPU machine they run with that machine's own libtorch)
#   pa/perf_analyzer, pa/lib/       Triton's perf_analyzer (loadtests/setup.sh) and its libraries
#   py/                             protobuf (cp312 wheel, unpacked) and tritonclient's generated
#                                   gRPC modules, for the gRPC checks with the machine's grpcio
#   models/torch_add_sub/           the bundled TorchScript add_sub (the server's own round trip)
# The GPU machine's python makes the encoder models itself (torch + transformers are there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARRY="$ROOT/loadtests/gpu/.carry"
TARGET="${CARGO_TARGET_DIR:-/tmp/tritium-bench-target}"
cd "$ROOT"
CARGO_TARGET_DIR="$TARGET" cargo build --release --locked -p tritium -p tritium-ceiling
bash loadtests/setup.sh >/dev/null
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/pa/lib" "$CARRY/py/tritonclient/grpc" "$CARRY/models"
strip -o "$CARRY/bin/tritium" "$TARGET/release/tritium"
strip -o "$CARRY/bin/torch_ceiling" "$TARGET/release/torch_ceiling"
strip -o "$CARRY/pa/perf_analyzer" loadtests/.tools/bin/perf_analyzer
cp loadtests/.tools/lib/* "$CARRY/pa/lib/"
PY=.venv/bin/python
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --platform manylinux2014_x86_64 -d "$WHEELS" "protobuf==$("$PY" -c 'import google.protobuf as p; print(p.__version__)')"
"$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$WHEELS"/protobuf-*.whl "$CARRY/py"
TC="$("$PY" -c 'import os, tritonclient; print(os.path.dirname(tritonclient.__file__))')"
cp "$TC/grpc/service_pb2.py" "$TC/grpc/service_pb2_grpc.py" "$TC/grpc/model_config_pb2.py" "$CARRY/py/tritonclient/grpc/"
: > "$CARRY/py/tritonclient/__init__.py"
: > "$CARRY/py/tritonclient/grpc/__init__.py"
cp -r model_repository/torch_add_sub "$CARRY/models/"
du -sh "$CARRY"
