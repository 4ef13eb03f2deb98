#!/usr/bin/env bash
# Starts Tritium on the bundled model repository (installing what it needs first).
# Extra arguments go to the server, e.g. `scripts/serve.sh --http-port 9000`.
# TENSORFLOW=1 builds with the TensorFlow backend (cargo feature `tensorflow`) and serves
# examples/tensorflow_models/ beside model_repository/; without it the binary has no TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${TENSORFLOW:-0}" = 1 ]; then
  exec cargo run --release --locked --features tensorflow -- --model-repository model_repository \
    --model-repository examples/tensorflow_models "$@"
fi
exec cargo run --release --locked -- --model-repository model_repository "$@"
