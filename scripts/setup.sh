#!/usr/bin/env bash
# Prepares what running and testing Tritium need, and nothing else:
#   - the Python venv at .venv with tests/requirements.txt (onnxruntime, numpy, onnx, tokenizers,
#     tritonclient, pytest, requests, moto's S3 server with boto3 for the object-storage
#     repository tests, opentelemetry-proto for the OTLP receiver of the trace tests, selenium
#     for the actor page's browser test);
#   - the ONNX Runtime shared library that the `ort` crate loads, which onnxruntime's wheel carries
#     at .venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1;
#   - the bundled models' .onnx files (model_repository/generate.py writes the missing ones,
#     model_repository/fetch_models.py fetches the real ones, e.g. Silero VAD, from PyPI), and
#     those of the repository for Triton's client examples (examples/triton_client_models/);
#   - libtorch for the PyTorch backend at .libtorch (scripts/install_libtorch.sh: the CPU
#     libraries and headers of PyPI's torch wheel) and the bundled TorchScript files
#     (model_repository/generate_torchscript.py);
#   - TensorFlow for the TensorFlow backend (cargo feature `tensorflow`) at .tensorflow
#     (scripts/install_tensorflow.sh: PyPI's tensorflow-cpu==2.21.0 in its own venv, about
#     1.6 GB, and links to its C API library) and the SavedModels of examples/tensorflow_models/
#     (model_repository/generate_savedmodel.py); TENSORFLOW=0 leaves both out;
#   - the customer-service example (examples/customer_service/generate.py): a TorchScript text
#     classifier trained there on hand-written requests, and an ONNX sentiment model over the
#     VADER lexicon of PyPI's vaderSentiment==3.3.2 wheel (fetched with pip download);
#   - Triton's Python backend for `backend: "python"` models: the PyPI wheel nvidia-pytriton
#     (Triton 2.51's libtriton_python.so, triton_python_backend_utils.py, the stubs and the
#     reference tritonserver) in its own venv at .pytriton/venv, with numpy<2 for the stub (its
#     pybind11 predates numpy 2), and the Python 3.11 stub copied beside libtriton_python.so
#     (scripts/setup.sh prints the backend directory; Tritium uses it by default);
#   - Debian's chromium and chromium-driver for the browser tests of the actor page
#     (scripts/install_chromium.sh; skipped when `chromium` and `chromedriver` are on PATH).
# Idempotent and quiet: when everything is in place it only checks, in well under a second.
# PYTHON picks the interpreter (default python3.11).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$REPO/.venv"
REQ="$REPO/tests/requirements.txt"
ORT_VERSION=1.31.1
LIB="$VENV/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.$ORT_VERSION"
PYTHON="${PYTHON:-python3.11}"

if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup.sh: $PYTHON not found (Python 3.11 with venv and pip is needed)" >&2; exit 1; }
  "$PYTHON" -m venv "$VENV"
fi

# Reinstall only when the requirements changed since the last successful install.
STAMP="$VENV/.tritium-requirements"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ"
  echo "$want" > "$STAMP"
fi

if [ ! -f "$LIB" ]; then
  # A damaged install: put the wheel's files back.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "onnxruntime==$ORT_VERSION"
fi
[ -f "$LIB" ] || { echo "setup.sh: $LIB is still missing after installing onnxruntime==$ORT_VERSION" >&2; exit 1; }

PYTHON="$PYTHON" bash "$REPO/scripts/install_libtorch.sh"
"$VENV/bin/python" "$REPO/model_repository/generate.py"
"$VENV/bin/python" "$REPO/model_repository/tiny_chat.py"
"$VENV/bin/python" "$REPO/model_repository/generate_torchscript.py"
"$VENV/bin/python" "$REPO/model_repository/fetch_models.py"
"$VENV/bin/python" "$REPO/examples/triton_client_models/generate.py"
# The customer-service example's TorchScript and ONNX models (its SavedModel is made below).
"$VENV/bin/python" "$REPO/examples/customer_service/generate.py"

if [ "${TENSORFLOW:-1}" != 0 ]; then
  PYTHON="$PYTHON" bash "$REPO/scripts/install_tensorflow.sh"
  # Importing TensorFlow takes seconds: run the maker only when a SavedModel or GraphDef is missing.
  for version in "$REPO"/examples/tensorflow_models/tf_*/1; do
    if [ ! -f "$version/model.savedmodel/saved_model.pb" ] && [ ! -f "$version/model.graphdef" ]; then
      "$REPO/.tensorflow/venv/bin/python" "$REPO/model_repository/generate_savedmodel.py"
      break
    fi
  done
fi

# Triton's Python backend (see above). The library stays where the wheel puts it: its RPATH
# finds the wheel's bundled libraries from there.
PYTRITON_VERSION=0.7.0
PT_VENV="$REPO/.pytriton/venv"
PT_SITE="$PT_VENV/lib/python3.11/site-packages"
PT_BACKEND="$PT_SITE/pytriton/tritonserver/backends/python"
if [ ! -x "$PT_VENV/bin/python" ]; then
  "$PYTHON" -m venv "$PT_VENV"
fi
if ! "$PT_VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("nvidia-pytriton") == "'"$PYTRITON_VERSION"'"; import numpy; assert numpy.__version__ < "2"' 2>/dev/null; then
  # --no-deps: only the backend's files and the stub's numpy are needed, not pytriton itself.
  "$PT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "nvidia-pytriton==$PYTRITON_VERSION" "numpy==1.26.4"
fi
if [ ! -x "$PT_BACKEND/triton_python_backend_stub" ]; then
  cp "$PT_SITE/pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub" "$PT_BACKEND/"
  chmod +x "$PT_BACKEND/triton_python_backend_stub"
fi
[ -f "$PT_BACKEND/libtriton_python.so" ] || { echo "setup.sh: $PT_BACKEND/libtriton_python.so is missing after installing nvidia-pytriton==$PYTRITON_VERSION" >&2; exit 1; }

# The headless browser and its driver of tests/test_actors_page*.py (skipped when installed).
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || bash "$REPO/scripts/install_chromium.sh"
