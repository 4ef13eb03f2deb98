#!/usr/bin/env bash
# Serves the customer-service example from one Tritium process: the TorchScript text classifier
# `intent`, the TensorFlow SavedModel `keyword_spotter` and the ONNX sentiment model `sentiment`
# (examples/customer_service/models/). Installs and generates what it needs first (scripts/setup.sh,
# with TensorFlow) and builds with the TensorFlow backend. Extra arguments go to the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
TENSORFLOW=1 bash scripts/setup.sh
exec cargo run --release --locked --features tensorflow -- --model-repository examples/customer_service/models "$@"
