#!/usr/bin/env bash
# Starts Tritium on the bundled model repository (installing what it needs first).
# Extra arguments go to the server, e.g. `scripts/serve.sh --http-port 9000`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec cargo run --release --locked -- --model-repository model_repository "$@"
