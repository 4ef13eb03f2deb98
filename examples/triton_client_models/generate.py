#!/usr/bin/env python3
"""Makes the ONNX files of the bundled repository for Triton's client examples
(examples/triton_client_models/; the config.pbtxt files live in git, the .onnx files are
git-ignored and made again by this script, as model_repository/generate.py does for the main
repository).

    python examples/triton_client_models/generate.py            # writes the missing files
    python examples/triton_client_models/generate.py --force    # writes all of them again

The models follow the specifications Triton's examples are written against (names, datatypes,
shapes and the arithmetic the examples check); each is built here with onnx.helper and numpy and
checked under onnxruntime against a numpy reference before it is written.

The repository is split in three folders so that each launch configuration of
scripts/serve_examples.sh can show the number of models the examples count:
  core/       simple, simple_int8, simple_string, simple_identity, simple_sequence,
              simple_dyna_sequence, simple_string_dyna_sequence
  decoupled/  repeat_int32 (Tritium's built-in `repeat` backend; no model file)
  densenet/   densenet_onnx (a tiny stand-in with densenet's tensor names, types and shapes)
"""

import argparse
import importlib.util
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "tritium_generate", os.path.join(HERE, "..", "..", "model_repository", "generate.py")
)
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
vi, model = base.vi, base.model


def add_sub(elem_type, np_type, name):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over [batch, 16]; INT8 wraps as
    Triton's model does (it computes in INT32 and casts back)."""
    shape = ["batch", 16]
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
        helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Sub", ["a", "b"], ["diff"]),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=elem_type),
        helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=elem_type),
    ]
    g = helper.make_graph(
        nodes,
        name,
        [vi("INPUT0", elem_type, shape), vi("INPUT1", elem_type, shape)],
        [vi("OUTPUT0", elem_type, shape), vi("OUTPUT1", elem_type, shape)],
    )

    def check(run):
        if np_type is None:
            a = np.array([[str(i) for i in range(16)]] * 2, dtype=object)
            b = np.array([["1"] * 16] * 2, dtype=object)
            o0, o1 = run({"INPUT0": a, "INPUT1": b})
            assert [int(x) for x in o0[1]] == [i + 1 for i in range(16)], o0
            assert [int(x) for x in o1[1]] == [i - 1 for i in range(16)], o1
        else:
            a = np.arange(32, dtype=np_type).reshape(2, 16)
            b = np.ones((2, 16), dtype=np_type)
            o0, o1 = run({"INPUT0": a, "INPUT1": b})
            np.testing.assert_array_equal(o0, a + b)
            np.testing.assert_array_equal(o1, a - b)

    return model(g), check


def simple_identity():
    """BYTES in, the same elements out, [batch, -1]."""
    shape = ["batch", "n"]
    g = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "simple_identity",
        [vi("INPUT0", TensorProto.STRING, shape)],
        [vi("OUTPUT0", TensorProto.STRING, shape)],
    )

    def check(run):
        x = np.array([["he", "llo", "1"]], dtype=object)
        (out,) = run({"INPUT0": x})
        np.testing.assert_array_equal(out, x)

    return model(g), check


def simple_sequence():
    """Triton's simple_sequence arithmetic: OUTPUT = READY * (INPUT + START) over [batch, 1]
    (the first request of a sequence answers its value plus one, the others their value)."""
    shape = ["batch", 1]
    i32 = TensorProto.INT32
    g = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["plus"]),
            helper.make_node("Mul", ["READY", "plus"], ["OUTPUT"]),
        ],
        "simple_sequence",
        [vi("INPUT", i32, shape), vi("START", i32, shape), vi("READY", i32, shape)],
        [vi("OUTPUT", i32, shape)],
    )

    def check(run):
        x = np.array([[0], [11], [5]], dtype=np.int32)
        start = np.array([[1], [0], [0]], dtype=np.int32)
        ready = np.array([[1], [1], [0]], dtype=np.int32)
        (out,) = run({"INPUT": x, "START": start, "READY": ready})
        np.testing.assert_array_equal(out, [[1], [11], [0]])

    return model(g), check


def simple_dyna_sequence():
    """Triton's simple_dyna_sequence arithmetic: OUTPUT = READY * (INPUT + START + END * CORRID)
    (CORRID is UINT64, added on the last request of a sequence)."""
    shape = ["batch", 1]
    i32 = TensorProto.INT32
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["CORRID"], ["corrid"], to=i32),
            helper.make_node("Mul", ["END", "corrid"], ["end_id"]),
            helper.make_node("Add", ["INPUT", "START"], ["plus"]),
            helper.make_node("Add", ["plus", "end_id"], ["sum"]),
            helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
        ],
        "simple_dyna_sequence",
        [
            vi("INPUT", i32, shape),
            vi("START", i32, shape),
            vi("END", i32, shape),
            vi("READY", i32, shape),
            vi("CORRID", TensorProto.UINT64, shape),
        ],
        [vi("OUTPUT", i32, shape)],
    )

    def check(run):
        col = lambda *v, t=np.int32: np.array([[x] for x in v], dtype=t)  # noqa: E731
        (out,) = run(
            {
                "INPUT": col(0, 7, 1),
                "START": col(1, 0, 0),
                "END": col(0, 0, 1),
                "READY": col(1, 1, 1),
                "CORRID": col(1000, 1000, 1001, t=np.uint64),
            }
        )
        np.testing.assert_array_equal(out, [[1], [7], [1002]])

    return model(g), check


def simple_string_dyna_sequence():
    """An accumulator keyed by a string correlation ID holding a decimal number, as the dyna
    examples use with a string sequence ID: START sets the sum to INPUT, later requests add
    INPUT, and END adds the correlation ID. The sum is implicit state (ACC_OUT -> ACC_IN) that
    the engine keeps per sequence; OUTPUT = READY * sum."""
    shape = ["batch", 1]
    i32 = TensorProto.INT32
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["CORRID"], ["corrid"], to=i32),
            helper.make_node("Cast", ["START"], ["is_start"], to=TensorProto.BOOL),
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["acc_plus"]),
            helper.make_node("Where", ["is_start", "INPUT", "acc_plus"], ["acc"]),
            helper.make_node("Mul", ["END", "corrid"], ["end_id"]),
            helper.make_node("Add", ["acc", "end_id"], ["ACC_OUT"]),
            helper.make_node("Mul", ["READY", "ACC_OUT"], ["OUTPUT"]),
        ],
        "simple_string_dyna_sequence",
        [
            vi("INPUT", i32, shape),
            vi("START", i32, shape),
            vi("END", i32, shape),
            vi("READY", i32, shape),
            vi("CORRID", TensorProto.STRING, shape),
            vi("ACC_IN", i32, shape),
        ],
        [vi("OUTPUT", i32, shape), vi("ACC_OUT", i32, shape)],
    )

    def check(run):
        col = lambda *v, t=np.int32: np.array([[x] for x in v], dtype=t)  # noqa: E731
        out, acc = run(
            {
                "INPUT": col(20, -11, -1),
                "START": col(1, 0, 0),
                "END": col(0, 0, 1),
                "READY": col(1, 1, 1),
                "CORRID": col("1002", "1002", "1002", t=object),
                "ACC_IN": col(99, 20, 5),
            }
        )
        np.testing.assert_array_equal(out, [[20], [9], [1006]])
        np.testing.assert_array_equal(acc, out)

    return model(g), check


def densenet_onnx():
    """A tiny stand-in with densenet's interface: data_0 FP32 [1, 3, 224, 224] (the config's
    reshape of [3, 224, 224]) -> fc6_1 FP32 [1000]: the mean of each colour plane, mixed into
    1000 scores by fixed weights (seeded). It answers what densenet's clients ask of the
    protocol, not which class an image shows."""
    rng = np.random.default_rng(24)
    w = numpy_helper.from_array(rng.standard_normal((3, 1000)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(1000).astype(np.float32), "bias")
    axes = numpy_helper.from_array(np.array([0, 2, 3], dtype=np.int64), "axes")
    g = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["data_0", "axes"], ["means"], keepdims=0),
            helper.make_node("MatMul", ["means", "w"], ["scores"]),
            helper.make_node("Add", ["scores", "bias"], ["fc6_1"]),
        ],
        "densenet_onnx",
        [vi("data_0", TensorProto.FLOAT, [1, 3, 224, 224])],
        [vi("fc6_1", TensorProto.FLOAT, [1000])],
        initializer=[w, bias, axes],
    )
    # ReduceMean takes its axes as an input from opset 18 on.
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="tritium")
    m.ir_version = base.IR_VERSION
    import onnx

    onnx.checker.check_model(m, full_check=True)

    def check(run):
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        (out,) = run({"data_0": x})
        want = x.mean(axis=(0, 2, 3)) @ numpy_helper.to_array(w) + numpy_helper.to_array(bias)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

    return m, check


MODELS = {
    "core/simple": lambda: add_sub(TensorProto.INT32, np.int32, "simple"),
    "core/simple_int8": lambda: add_sub(TensorProto.INT8, np.int8, "simple_int8"),
    "core/simple_string": lambda: add_sub(TensorProto.STRING, None, "simple_string"),
    "core/simple_identity": simple_identity,
    "core/simple_sequence": simple_sequence,
    "core/simple_dyna_sequence": simple_dyna_sequence,
    "core/simple_string_dyna_sequence": simple_string_dyna_sequence,
    "densenet/densenet_onnx": densenet_onnx,
}


def write(name, force):
    return base.write_model(os.path.join(HERE, name, "1", "model.onnx"), name, MODELS[name], force,
                            tool="examples/triton_client_models/generate.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="write every model again")
    args = ap.parse_args()
    written = [n for n in MODELS if write(n, args.force)]
    if written:
        print(f"examples/triton_client_models/generate.py: wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
