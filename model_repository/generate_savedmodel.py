#!/usr/bin/env python3
"""Makes the TensorFlow SavedModels of examples/tensorflow_models/ (the repository of bundled
TensorFlow models that `TENSORFLOW=1 scripts/serve.sh` serves beside model_repository/, and
that tests/test_tensorflow.py serves). The config.pbtxt files are written by hand and live in
git; the `model.savedmodel/` folders are git-ignored and made again by this script.

Runs with the tensorflow-cpu of scripts/install_tensorflow.sh:

    .tensorflow/venv/bin/python model_repository/generate_savedmodel.py          # the missing ones
    .tensorflow/venv/bin/python model_repository/generate_savedmodel.py --force  # all again

Deterministic: every constant comes from a fixed numpy seed, so each model computes the same
thing on every run (the files' bytes differ: TensorFlow writes fingerprints). Each model is
loaded back and checked against numpy before it is kept.
"""

import argparse
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TF_MODELS = os.path.join(ROOT, "examples", "tensorflow_models")

# Triton datatype -> TensorFlow dtype, every type Triton maps for TensorFlow.
TYPES = {
    "BOOL": tf.bool,
    "INT8": tf.int8,
    "INT16": tf.int16,
    "INT32": tf.int32,
    "INT64": tf.int64,
    "UINT8": tf.uint8,
    "UINT16": tf.uint16,
    "UINT32": tf.uint32,
    "UINT64": tf.uint64,
    "FP16": tf.float16,
    "BF16": tf.bfloat16,
    "FP32": tf.float32,
    "FP64": tf.float64,
    "STRING": tf.string,
}

# The scale step of the ensemble (mlp on ONNX -> tf_scale -> torch_mlp on libtorch).
SCALE_SEED = 27


def scale_constants():
    rng = np.random.default_rng(SCALE_SEED)
    gain = rng.uniform(0.5, 1.5, size=256).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, size=256).astype(np.float32)
    return gain, bias


def add_sub():
    class AddSub(tf.Module):
        @tf.function(input_signature=[
            tf.TensorSpec([None, 16], tf.float32, name="INPUT0"),
            tf.TensorSpec([None, 16], tf.float32, name="INPUT1"),
        ])
        def serve(self, INPUT0, INPUT1):  # noqa: N803 (the signature's keys are Triton's names)
            return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}

    def check(fn):
        a = np.arange(32, dtype=np.float32).reshape(2, 16)
        b = np.ones((2, 16), np.float32)
        out = fn(INPUT0=tf.constant(a), INPUT1=tf.constant(b))
        assert np.array_equal(out["OUTPUT0"].numpy(), a + b)
        assert np.array_equal(out["OUTPUT1"].numpy(), a - b)

    module = AddSub()
    return module, module.serve, check


def types():
    """Every datatype in and out unchanged (`<type>_in` -> `<type>_out`), plus the byte length
    of each BYTES element as TensorFlow sees it (`STRING_len`)."""
    specs = [tf.TensorSpec([None], dtype, name=f"{name}_in") for name, dtype in TYPES.items()]

    class Types(tf.Module):
        @tf.function(input_signature=specs)
        def serve(self, *args):
            out = {f"{name}_out": tf.identity(arg) for name, arg in zip(TYPES, args)}
            out["STRING_len"] = tf.strings.length(args[-1], unit="BYTE")
            return out

    def check(fn):
        feeds = {f"{name}_in": tf.zeros([2], dtype) if dtype != tf.string else tf.constant([b"a\0b", b"\xff"])
                 for name, dtype in TYPES.items()}
        out = fn(**feeds)
        assert out["STRING_out"].numpy().tolist() == [b"a\0b", b"\xff"]
        assert out["STRING_len"].numpy().tolist() == [3, 1]

    module = Types()
    return module, module.serve, check


def checked():
    """sqrt(x), refusing a negative x: TensorFlow's own InvalidArgument at run time."""

    class Checked(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            tf.debugging.assert_non_negative(x, message="x must be non-negative")
            return {"y": tf.sqrt(x)}

    def check(fn):
        out = fn(x=tf.constant([[1.0, 4.0, 9.0, 16.0]]))
        assert np.allclose(out["y"].numpy(), [[1, 2, 3, 4]])
        try:
            fn(x=tf.constant([[-1.0, 0, 0, 0]]))
        except tf.errors.InvalidArgumentError:
            return
        raise AssertionError("a negative input was not refused")

    module = Checked()
    return module, module.serve, check


def scale():
    gain, bias = scale_constants()

    class Scale(tf.Module):
        def __init__(self):
            super().__init__()
            self.gain = tf.Variable(gain, trainable=False)
            self.bias = tf.Variable(bias, trainable=False)

        @tf.function(input_signature=[tf.TensorSpec([None, 256], tf.float32, name="INPUT0")])
        def serve(self, INPUT0):  # noqa: N803
            return {"OUTPUT0": tf.nn.relu(INPUT0 * self.gain + self.bias)}

    def check(fn):
        x = np.linspace(-1, 1, 512, dtype=np.float32).reshape(2, 256)
        want = np.maximum(x * gain + bias, 0)
        assert np.allclose(fn(INPUT0=tf.constant(x))["OUTPUT0"].numpy(), want, atol=1e-6)

    module = Scale()
    return module, module.serve, check


MLP_DIMS = [256, 2048, 2048, 256]


def mlp_weights():
    """The ONNX mlp's weights (model_repository/generate.py draws them the same way from seed 7)."""
    rng = np.random.default_rng(7)
    layers = []
    for d_in, d_out in zip(MLP_DIMS, MLP_DIMS[1:]):
        w = (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(np.float32)
        b = (rng.standard_normal(d_out) * 0.01).astype(np.float32)
        layers.append((w, b))
    return layers


def mlp():
    """The ONNX mlp's network and weights (256 -> 2048 -> 2048 -> 256, Relu), for the figures of
    loadtests/tf_backend.py and a check against the ONNX and TorchScript ones."""
    layers = mlp_weights()

    class Mlp(tf.Module):
        def __init__(self):
            super().__init__()
            self.layers = [(tf.Variable(w, trainable=False), tf.Variable(b, trainable=False)) for w, b in layers]

        @tf.function(input_signature=[tf.TensorSpec([None, 256], tf.float32, name="INPUT0")])
        def serve(self, INPUT0):  # noqa: N803
            x = INPUT0
            for i, (w, b) in enumerate(self.layers):
                x = tf.matmul(x, w) + b
                if i < len(self.layers) - 1:
                    x = tf.nn.relu(x)
            return {"OUTPUT0": x}

    def check(fn):
        x = np.random.default_rng(8).standard_normal((4, 256)).astype(np.float32)
        h = x
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = np.maximum(h, 0)
        np.testing.assert_allclose(fn(INPUT0=tf.constant(x))["OUTPUT0"].numpy(), h, rtol=1e-3, atol=1e-4)

    module = Mlp()
    return module, module.serve, check


KWS_LABELS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "_silence_", "_unknown_"]
KWS_SEED = 2027


def keyword_spotter():
    """A small keyword-spotting network (the speech part of the seed's customer-service example):
    one second of 16 kHz audio -> log-mel features (40 ms frames every 20 ms, 40 mel bins
    between 20 Hz and 7.6 kHz: 49 x 40) computed in the graph with tf.signal -> two 3x3
    convolutions -> global average pooling -> 12 keyword logits. Its weights are synthetic
    (He-initialised from numpy seed 2027; no registry package carries trained ones), so the
    labels it picks mean nothing: it exercises the serving path with a real speech front end."""
    rng = np.random.default_rng(KWS_SEED)

    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    w1, b1 = he((3, 3, 1, 8), 9), np.zeros(8, np.float32)
    w2, b2 = he((3, 3, 8, 16), 72), np.zeros(16, np.float32)
    w3, b3 = he((16, len(KWS_LABELS)), 16), (rng.standard_normal(len(KWS_LABELS)) * 0.01).astype(np.float32)
    mel = tf.signal.linear_to_mel_weight_matrix(40, 513, 16000, 20.0, 7600.0)

    class Kws(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = [tf.Variable(v, trainable=False) for v in (w1, b1, w2, b2, w3, b3)]
            self.mel = tf.Variable(mel, trainable=False)

        @tf.function(input_signature=[tf.TensorSpec([None, 16000], tf.float32, name="AUDIO")])
        def serve(self, AUDIO):  # noqa: N803
            spec = tf.abs(tf.signal.stft(AUDIO, frame_length=640, frame_step=320, fft_length=1024))
            logmel = tf.math.log(tf.tensordot(spec, self.mel, 1) + 1e-6)  # [B, 49, 40]
            x = tf.expand_dims(logmel, -1)
            w1_, b1_, w2_, b2_, w3_, b3_ = self.w
            x = tf.nn.relu(tf.nn.conv2d(x, w1_, 1, "SAME") + b1_)
            x = tf.nn.max_pool2d(x, 2, 2, "SAME")
            x = tf.nn.relu(tf.nn.conv2d(x, w2_, 1, "SAME") + b2_)
            x = tf.reduce_mean(x, axis=[1, 2])
            logits = tf.matmul(x, w3_) + b3_
            return {"LOGMEL": logmel, "LOGITS": logits, "KEYWORD": tf.expand_dims(tf.argmax(logits, axis=1), 1)}

    def check(fn):
        audio = kws_audio(2)
        out = fn(AUDIO=tf.constant(audio))
        assert out["LOGMEL"].shape == (2, 49, 40) and out["LOGITS"].shape == (2, len(KWS_LABELS))
        assert np.all(np.isfinite(out["LOGITS"].numpy()))

    module = Kws()
    return module, module.serve, check


def kws_audio(n, seed=5):
    """n deterministic one-second clips: a tone per clip with a little noise (tests use it too)."""
    rng = np.random.default_rng(seed)
    t = np.arange(16000, dtype=np.float32) / 16000
    clips = [0.5 * np.sin(2 * np.pi * (220 + 110 * i) * t) + 0.01 * rng.standard_normal(16000) for i in range(n)]
    return np.stack(clips).astype(np.float32)


def init_ops_graph(dest):
    """A TF1-style SavedModel (graph, variable, named ops) for TF_INIT_OPS_FILE: OUTPUT0 =
    INPUT0 * scale, where the variable `scale` is saved as 1; the graph's ops `set_scale_3` and
    `set_scale_5` assign 3 and 5 to it. Only a server that runs the init ops it is told to
    answers with another scale than 1. Written whole to `dest`, then loaded back and checked."""
    tf.get_logger().setLevel("ERROR")  # the TF1 calls below warn that they are TF1
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="INPUT0")
        scale = tf.compat.v1.Variable(np.ones(4, np.float32), name="scale")
        y = tf.multiply(x, scale, name="OUTPUT0")
        tf.compat.v1.assign(scale, np.full(4, 3.0, np.float32), name="set_scale_3")
        tf.compat.v1.assign(scale, np.full(4, 5.0, np.float32), name="set_scale_5")
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(dest)
            sig = tf.compat.v1.saved_model.predict_signature_def({"INPUT0": x}, {"OUTPUT0": y})
            builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
            builder.save()
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = tf.compat.v1.saved_model.load(sess, ["serve"], dest)
        sig = meta.signature_def["serving_default"]
        feed = {sig.inputs["INPUT0"].name: np.arange(8, dtype=np.float32).reshape(2, 4)}
        out = sess.run(sig.outputs["OUTPUT0"].name, feed)
        assert np.array_equal(out, feed[sig.inputs["INPUT0"].name]), out
        sess.run("set_scale_3")
        assert np.array_equal(sess.run(sig.outputs["OUTPUT0"].name, feed), 3 * out)


def graphdef_add_sub():
    """A frozen GraphDef (no variables): nodes INPUT0, INPUT1 (FP32 [-1, 16]) -> OUTPUT0 (sum),
    OUTPUT1 (difference). Returns (GraphDef bytes, check(session, graph))."""
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [None, 16], name="INPUT0")
        b = tf.compat.v1.placeholder(tf.float32, [None, 16], name="INPUT1")
        tf.add(a, b, name="OUTPUT0")
        tf.subtract(a, b, name="OUTPUT1")

    def check(sess):
        x = np.arange(32, dtype=np.float32).reshape(2, 16)
        out = sess.run(["OUTPUT0:0", "OUTPUT1:0"], {"INPUT0:0": x, "INPUT1:0": np.ones_like(x)})
        assert np.array_equal(out[0], x + 1) and np.array_equal(out[1], x - 1)

    return graph.as_graph_def().SerializeToString(), check


def graphdef_init():
    """A GraphDef with a variable, as TF1 training code wrote them: OUTPUT0 = INPUT0 * weight
    (FP32 [-1, 4]), the variable `weight` given its value (2) only by the op `init` (the
    global-variables initializer). Without TF_INIT_OPS_FILE naming `init` a run fails
    (uninitialized variable)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="INPUT0")
        weight = tf.compat.v1.Variable(np.full(4, 2.0, np.float32), name="weight", use_resource=False)
        tf.multiply(x, weight, name="OUTPUT0")
        tf.compat.v1.global_variables_initializer()  # its op is named "init"

    def check(sess):
        sess.run("init")
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        assert np.array_equal(sess.run("OUTPUT0:0", {"INPUT0:0": x}), 2 * x)

    return graph.as_graph_def().SerializeToString(), check


# GraphDef models: folder -> maker of (bytes, check); written to <folder>/1/model.graphdef.
GRAPHDEFS = {"tf_graphdef_add_sub": graphdef_add_sub, "tf_graphdef_init": graphdef_init}


def save_graphdef(make, dest):
    data, check = make()
    graph = tf.Graph()
    with graph.as_default():
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(data)
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as sess:
            check(sess)
    part = dest + ".tmp"
    with open(part, "wb") as f:
        f.write(data)
    os.replace(part, dest)


# Models written by a function of their own (TF1 graphs), rather than saved from a tf.Module.
WRITERS = {"tf_init_ops": init_ops_graph}

# (model folder, maker); the same SavedModel may serve several configs (tf_autocomplete).
MODELS = [
    ("tf_add_sub", add_sub),
    ("tf_autocomplete", add_sub),
    ("tf_types", types),
    ("tf_checked", checked),
    ("tf_scale", scale),
    ("tf_mlp", mlp),
    ("keyword_spotter", keyword_spotter),
    ("tf_init_ops", None),
]


def save(name, make, dest):
    tmp = tempfile.mkdtemp(prefix="savedmodel-", dir=os.path.dirname(dest))
    path = os.path.join(tmp, "model.savedmodel")
    try:
        if name in WRITERS:
            WRITERS[name](path)
        else:
            module, fn, check = make()
            tf.saved_model.save(module, path, signatures={"serving_default": fn})
            loaded = tf.saved_model.load(path)
            check(loaded.signatures["serving_default"])
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.replace(path, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="write every model again")
    args = parser.parse_args()
    tf.random.set_seed(SCALE_SEED)
    made = []
    for name, make in MODELS:
        dest = os.path.join(TF_MODELS, name, "1", "model.savedmodel")
        if not args.force and os.path.isfile(os.path.join(dest, "saved_model.pb")):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        save(name, make, dest)
        made.append(name)
    for name, make in GRAPHDEFS.items():
        dest = os.path.join(TF_MODELS, name, "1", "model.graphdef")
        if not args.force and os.path.isfile(dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        save_graphdef(make, dest)
        made.append(name)
    if made:
        print(f"generate_savedmodel.py: wrote {', '.join(made)}", file=sys.stderr)


if __name__ == "__main__":
    main()
