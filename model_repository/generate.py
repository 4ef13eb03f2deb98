#!/usr/bin/env python3
"""Makes the ONNX files of the bundled model repository (the config.pbtxt files are written by
hand and live in git; the .onnx files are git-ignored and made again by this script).

    python model_repository/generate.py            # writes the files that are missing
    python model_repository/generate.py --force    # writes all of them again

Every model is built with onnx.helper and numpy from fixed seeds, so the bytes are the same on
every run, and is checked under onnxruntime against a numpy reference before it is kept: a model
that does not load or computes the wrong thing is never written.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
HERE = os.path.dirname(os.path.abspath(__file__))

# Triton datatype name -> (ONNX element type, numpy dtype or None for BF16 / strings).
TYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_),
    "UINT8": (TensorProto.UINT8, np.uint8),
    "UINT16": (TensorProto.UINT16, np.uint16),
    "UINT32": (TensorProto.UINT32, np.uint32),
    "UINT64": (TensorProto.UINT64, np.uint64),
    "INT8": (TensorProto.INT8, np.int8),
    "INT16": (TensorProto.INT16, np.int16),
    "INT32": (TensorProto.INT32, np.int32),
    "INT64": (TensorProto.INT64, np.int64),
    "FP16": (TensorProto.FLOAT16, np.float16),
    "BF16": (TensorProto.BFLOAT16, None),
    "FP32": (TensorProto.FLOAT, np.float32),
    "FP64": (TensorProto.DOUBLE, np.float64),
    "BYTES": (TensorProto.STRING, np.object_),
}


def vi(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritium")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m


# --- the models ------------------------------------------------------------------------------


def add_sub(batch=True, size=16):
    shape = ["batch", size] if batch else [size]
    g = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]), helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "add_sub",
        [vi("INPUT0", TensorProto.FLOAT, shape), vi("INPUT1", TensorProto.FLOAT, shape)],
        [vi("OUTPUT0", TensorProto.FLOAT, shape), vi("OUTPUT1", TensorProto.FLOAT, shape)],
    )

    def check(run):
        rng = np.random.default_rng(1)
        lead = (3,) if batch else ()
        a = rng.standard_normal(lead + (size,)).astype(np.float32)
        b = rng.standard_normal(lead + (size,)).astype(np.float32)
        o0, o1 = run({"INPUT0": a, "INPUT1": b})
        np.testing.assert_allclose(o0, a + b, rtol=1e-6)
        np.testing.assert_allclose(o1, a - b, rtol=1e-6)

    return model(g), check


def identity(batch, elem_type=TensorProto.FLOAT, name="identity"):
    shape = ["batch", "n"] if batch else ["n"]
    g = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [vi("INPUT0", elem_type, shape)],
        [vi("OUTPUT0", elem_type, shape)],
    )

    def check(run):
        if elem_type == TensorProto.STRING:
            x = np.array([["hello", "", "wörld"], ["a", "bc", "def"]], dtype=np.object_)
            (y,) = run({"INPUT0": x})
            assert y.shape == x.shape and [str(v) for v in y.flatten()] == list(x.flatten()), y
        else:
            x = np.arange(6, dtype=np.float32).reshape((2, 3) if batch else (6,))
            (y,) = run({"INPUT0": x})
            np.testing.assert_array_equal(y, x)

    return model(g), check


def identity_types():
    """One Identity pair per Triton datatype: INPUT_<TYPE> -> OUTPUT_<TYPE>, dims [batch, n]."""
    nodes, inputs, outputs = [], [], []
    for tname, (elem, _) in TYPES.items():
        nodes.append(helper.make_node("Identity", [f"INPUT_{tname}"], [f"OUTPUT_{tname}"]))
        inputs.append(vi(f"INPUT_{tname}", elem, ["batch", "n"]))
        outputs.append(vi(f"OUTPUT_{tname}", elem, ["batch", "n"]))
    g = helper.make_graph(nodes, "identity_types", inputs, outputs)

    def check(run_session):
        import onnxruntime as ort

        feeds, wants = {}, {}
        for tname, (elem, dt) in TYPES.items():
            if tname == "BF16":  # numpy has no bfloat16: pass the raw 16-bit patterns
                bits = np.array([[0x3F80, 0xC000]], dtype=np.uint16)  # 1.0, -2.0
                feeds[f"INPUT_{tname}"] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, elem)
            elif dt is np.object_:
                feeds[f"INPUT_{tname}"] = wants[tname] = np.array([["x", "yz"]], dtype=np.object_)
            else:
                feeds[f"INPUT_{tname}"] = wants[tname] = np.array([[1, 0]], dtype=dt)
        names = [t for t in TYPES if t != "BF16"]
        outs = run_session(feeds, [f"OUTPUT_{t}" for t in names])
        for tname, got in zip(names, outs):
            assert got.shape == wants[tname].shape and (got == wants[tname]).all(), tname

    return model(g), check


def classify():
    """Scores for four classes (cat, dog, bird, fish): OUTPUT0 = softmax(INPUT0), OUTPUT1 = INPUT0."""
    g = helper.make_graph(
        [helper.make_node("Softmax", ["INPUT0"], ["OUTPUT0"], axis=-1), helper.make_node("Identity", ["INPUT0"], ["OUTPUT1"])],
        "classify",
        [vi("INPUT0", TensorProto.FLOAT, [4])],
        [vi("OUTPUT0", TensorProto.FLOAT, [4]), vi("OUTPUT1", TensorProto.FLOAT, [4])],
    )

    def check(run):
        x = np.array([0.5, 3.0, -1.0, 1.0], dtype=np.float32)
        o0, o1 = run({"INPUT0": x})
        e = np.exp(x - x.max())
        np.testing.assert_allclose(o0, e / e.sum(), rtol=1e-5)
        np.testing.assert_array_equal(o1, x)

    return model(g), check


MLP_DIMS = [256, 2048, 2048, 256]


def mlp():
    """A dense network with real compute: 256 -> 2048 -> 2048 -> 256, Relu between layers
    (about 0.6 ms for one item and 1.4 ms for eight on one core of this machine)."""
    rng = np.random.default_rng(7)
    weights, nodes = [], []
    x = "INPUT0"
    for i, (d_in, d_out) in enumerate(zip(MLP_DIMS, MLP_DIMS[1:])):
        w = (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(np.float32)
        b = (rng.standard_normal(d_out) * 0.01).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        last = i == len(MLP_DIMS) - 2
        nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"B{i}"], ["OUTPUT0" if last else f"G{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"G{i}"], [f"H{i}"]))
            x = f"H{i}"
    g = helper.make_graph(
        nodes,
        "mlp",
        [vi("INPUT0", TensorProto.FLOAT, ["batch", MLP_DIMS[0]])],
        [vi("OUTPUT0", TensorProto.FLOAT, ["batch", MLP_DIMS[-1]])],
        initializer=weights,
    )

    def check(run):
        inp = np.random.default_rng(8).standard_normal((4, MLP_DIMS[0])).astype(np.float32)
        h = inp
        ws = {t.name: numpy_helper.to_array(t) for t in weights}
        for i in range(len(MLP_DIMS) - 1):
            h = h @ ws[f"W{i}"] + ws[f"B{i}"]
            if i < len(MLP_DIMS) - 2:
                h = np.maximum(h, 0)
        (out,) = run({"INPUT0": inp})
        np.testing.assert_allclose(out, h, rtol=1e-3, atol=1e-4)

    return model(g), check


def autocomplete_add():
    """No config.pbtxt: everything comes from the file. A [batch, 4] + B [batch, 4] -> SUM."""
    shape = ["batch", 4]
    g = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"])],
        "autocomplete_add",
        [vi("A", TensorProto.FLOAT, shape), vi("B", TensorProto.FLOAT, shape)],
        [vi("SUM", TensorProto.FLOAT, shape)],
    )

    def check(run):
        a = np.ones((2, 4), dtype=np.float32)
        (s,) = run({"A": a, "B": a * 2})
        np.testing.assert_array_equal(s, a * 3)

    return model(g), check


def accumulate():
    """Triton's accumulator as a stateful model with implicit state: OUTPUT = INPUT on the first
    request of a sequence (START = 1), else ACC_IN + INPUT; the running sum goes out as ACC_OUT
    and the engine feeds it back as ACC_IN. INT32, dims [batch, 1]."""
    shape = ["batch", 1]
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["START"], ["is_start"], to=TensorProto.BOOL),
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["sum"]),
            helper.make_node("Where", ["is_start", "INPUT", "sum"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        ],
        "accumulate",
        [vi("INPUT", TensorProto.INT32, shape), vi("START", TensorProto.INT32, shape), vi("ACC_IN", TensorProto.INT32, shape)],
        [vi("OUTPUT", TensorProto.INT32, shape), vi("ACC_OUT", TensorProto.INT32, shape)],
    )

    def check(run):
        x = np.array([[3], [4]], dtype=np.int32)
        acc = np.array([[10], [10]], dtype=np.int32)
        start = np.array([[1], [0]], dtype=np.int32)
        out, acc_out = run({"INPUT": x, "START": start, "ACC_IN": acc})
        np.testing.assert_array_equal(out, [[3], [14]])
        np.testing.assert_array_equal(acc_out, out)

    return model(g), check


MODELS = {
    "add_sub": lambda: add_sub(batch=True),
    "add_sub_nobatch": lambda: add_sub(batch=False),
    "identity": lambda: identity(batch=False),
    "identity_fp32": lambda: identity(batch=True, name="identity_fp32"),
    "identity_bytes": lambda: identity(batch=True, elem_type=TensorProto.STRING, name="identity_bytes"),
    "identity_types": identity_types,
    "classify": classify,
    "mlp": mlp,
    "autocomplete_add": autocomplete_add,
    "accumulate": accumulate,
    "accumulate_oldest": accumulate,
}


# --- checking and writing --------------------------------------------------------------------


def self_check(name, m, check):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    if name == "identity_types":
        # onnxruntime's Python API cannot hand back a bfloat16 output; loading the session already
        # proved that the bfloat16 Identity kernel exists, and the Rust tests check its values.
        check(lambda feeds, names: sess.run(names, feeds))
    else:
        check(lambda feeds: sess.run(None, feeds))


def write_model(path, name, make, force, tool="generate.py"):
    """Builds model `name` with `make()` -> (model, check), checks it under onnxruntime and writes
    it to `path` whole (a temporary file renamed); a broken model is never written. False when
    the file exists and `force` is not set."""
    if os.path.exists(path) and not force:
        return False
    m, check = make()
    try:
        self_check(name, m, check)
    except Exception as e:  # a broken model must never ship
        sys.exit(f"{tool}: model '{name}' failed its onnxruntime self-check: {e!r}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(m.SerializeToString())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


def write(name, force):
    return write_model(os.path.join(HERE, name, "1", "model.onnx"), name, MODELS[name], force)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="write every model again")
    ap.add_argument("models", nargs="*", help="only these models (default: all)")
    args = ap.parse_args()
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"generate.py: unknown model(s) {unknown}; known: {sorted(MODELS)}")
    written = [n for n in names if write(n, args.force)]
    if written:
        print(f"generate.py: wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
