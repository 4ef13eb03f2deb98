#!/usr/bin/env bash
# Serves the bundled repository for Triton's client examples (examples/triton_client_models/)
# in one of the three launch configurations the examples assume, on Triton's ports (HTTP 8000,
# gRPC 8001, metrics 8002). Installs what it needs and generates the model files first.
#
#   scripts/serve_examples.sh all            # every model, --model-control-mode none (9 models)
#   scripts/serve_examples.sh http-control   # explicit mode, 7 models in the index, none loaded
#                                            #   (for simple_http_model_control.py)
#   scripts/serve_examples.sh grpc-control   # explicit mode, 8 models in the index, none loaded
#                                            #   (for simple_grpc_model_control.py)
#
# Extra arguments go to the server, e.g. `scripts/serve_examples.sh all --http-port 9000`.
# TRITIUM_BIN runs a binary already built instead of `cargo run --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=examples/triton_client_models
config="${1:-}"
[ $# -gt 0 ] && shift
case "$config" in
  all) args=(--model-repository "$MODELS/core" --model-repository "$MODELS/decoupled"
             --model-repository "$MODELS/densenet" --model-control-mode none) ;;
  http-control) args=(--model-repository "$MODELS/core" --model-control-mode explicit) ;;
  grpc-control) args=(--model-repository "$MODELS/core" --model-repository "$MODELS/decoupled"
                      --model-control-mode explicit) ;;
  *) echo "usage: $0 all|http-control|grpc-control [server flags...]" >&2; exit 2 ;;
esac
bash scripts/setup.sh
if [ -n "${TRITIUM_BIN:-}" ]; then
  exec "$TRITIUM_BIN" "${args[@]}" "$@"
fi
exec cargo run --release --locked -- "${args[@]}" "$@"
