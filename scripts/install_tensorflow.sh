#!/usr/bin/env bash
# Installs TensorFlow for the TensorFlow backend (cargo feature `tensorflow`) at .tensorflow/ in the
# repository, from PyPI and nothing else:
#   - .tensorflow/venv: its own venv with tensorflow-cpu==2.21.0 (a 274 MB wheel, about 1.3 GB with
#     its dependencies), used by model_repository/generate_savedmodel.py to write the bundled
#     SavedModels and by the tests and loadtests as TensorFlow's own reference. It is not the shared
#     .venv: TensorFlow's numpy, protobuf and grpcio pins must not move the test venv's.
#   - .tensorflow/lib: the names the Rust build and the binary use for the wheel's C API library,
#     symbolic links into the wheel: libtensorflow.so (what `-ltensorflow` finds; its SONAME is
#     libtensorflow_cc.so.2, so the binary records that name), libtensorflow_cc.so.2 and
#     libtensorflow_framework.so.2 (which libtensorflow_cc.so.2 needs).
#   - .tensorflow/lib/pkgconfig/tensorflow.pc: the tensorflow-sys crate's build script asks
#     pkg-config for `tensorflow` before it would download anything; .cargo/config.toml puts this
#     folder on PKG_CONFIG_PATH, so the crate links the wheel's library and nothing is fetched.
# build.rs gives the binary .tensorflow/lib as a run path when the feature is on.
# Idempotent: when everything is in place it only checks. PYTHON picks the interpreter.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$REPO/.tensorflow"
TF_VERSION=2.21.0
PYTHON="${PYTHON:-python3.11}"
VENV="$DEST/venv"
STAMP="$DEST/.tritium-tensorflow"
want="tensorflow-cpu-$TF_VERSION"

if [ "$(cat "$STAMP" 2>/dev/null || true)" = "$want" ] && [ -e "$DEST/lib/libtensorflow_cc.so.2" ]; then
  exit 0
fi
mkdir -p "$DEST"
if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON" >/dev/null || { echo "install_tensorflow.sh: $PYTHON not found" >&2; exit 1; }
  "$PYTHON" -m venv "$VENV"
fi
echo "install_tensorflow.sh: installing tensorflow-cpu==$TF_VERSION from PyPI into $VENV" >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "tensorflow-cpu==$TF_VERSION"
TF_DIR="$("$VENV/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("tensorflow").origin))')"
for lib in libtensorflow_cc.so.2 libtensorflow_framework.so.2; do
  [ -f "$TF_DIR/$lib" ] || { echo "install_tensorflow.sh: the wheel lacks $TF_DIR/$lib" >&2; exit 1; }
done
rm -rf "$DEST/lib"
mkdir -p "$DEST/lib/pkgconfig"
ln -s "$TF_DIR/libtensorflow_cc.so.2" "$DEST/lib/libtensorflow_cc.so.2"
ln -s "$TF_DIR/libtensorflow_framework.so.2" "$DEST/lib/libtensorflow_framework.so.2"
ln -s libtensorflow_cc.so.2 "$DEST/lib/libtensorflow.so"
ln -s libtensorflow_framework.so.2 "$DEST/lib/libtensorflow_framework.so"
cat > "$DEST/lib/pkgconfig/tensorflow.pc" <<EOF
libdir=$DEST/lib

Name: tensorflow
Description: TensorFlow's C API from PyPI's tensorflow-cpu==$TF_VERSION wheel
Version: $TF_VERSION
Libs: -L\${libdir} -ltensorflow -ltensorflow_framework
EOF
echo "$want" > "$STAMP"
echo "install_tensorflow.sh: TensorFlow $TF_VERSION (CPU) at $DEST" >&2
