#!/usr/bin/env python3
"""Makes model_repository/tiny_chat/1/: a small decoder-only language model in ONNX with its
KV cache as inputs and outputs (model.onnx), and its byte-level tokenizer (tokenizer.json).

    python model_repository/tiny_chat.py            # writes the files when missing
    python model_repository/tiny_chat.py --force    # writes them again

No PyPI package ships a small trained decoder that runs without torch, so this is a decoder
with deterministic weights (numpy, fixed seed): 4 pre-LayerNorm transformer layers, d_model 128,
4 heads, learned positions up to 2048. Its text is not meaningful; a fixed output bias makes it
write mostly lowercase letters and spaces (English letter frequencies) and end a reply with
<|end|> now and then, so finish reasons, stops and UTF-8 handling all get exercised. What it
shows is the serving mechanics: the engine keeps the KV cache between a conversation's turns.

  inputs:  input_ids INT64 [T] (the new tokens), past_kv FP32 [4, 2, 4, P, 32] (keys, values
           of the P tokens before them; P may be 0)
  outputs: logits FP32 [T, 260], present_kv FP32 [4, 2, 4, P+T, 32]

Tokenizer: one token per byte (id = the byte's value, GPT-2's byte-level alphabet, no merges)
and four special tokens: <|system|> 256, <|user|> 257, <|assistant|> 258, <|end|> 259.
The model is checked under onnxruntime against a numpy forward pass before it is kept.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny_chat", "1")
LAYERS, D, HEADS, MAX_POS = 4, 128, 4, 2048
DH = D // HEADS
FFN = 4 * D
SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
VOCAB = 256 + len(SPECIALS)
END = 259
# Relative frequencies of English letters (a..z) and the space, for the output bias.
LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


def weights():
    rng = np.random.default_rng(20261204)
    w = {}

    def normal(name, shape, scale):
        w[name] = (rng.standard_normal(shape) * scale).astype(np.float32)

    normal("tok_emb", (VOCAB, D), 1.0)
    normal("pos_emb", (MAX_POS, D), 0.3)
    for l in range(LAYERS):
        w[f"ln1_g{l}"] = np.ones(D, np.float32)
        w[f"ln1_b{l}"] = np.zeros(D, np.float32)
        normal(f"wqkv{l}", (D, 3 * D), 1.0 / np.sqrt(D))
        normal(f"wo{l}", (D, D), 0.5 / np.sqrt(D))
        w[f"ln2_g{l}"] = np.ones(D, np.float32)
        w[f"ln2_b{l}"] = np.zeros(D, np.float32)
        normal(f"w1{l}", (D, FFN), 1.0 / np.sqrt(D))
        normal(f"w2{l}", (FFN, D), 0.5 / np.sqrt(FFN))
    w["lnf_g"] = np.ones(D, np.float32)
    w["lnf_b"] = np.zeros(D, np.float32)
    normal("w_out", (D, VOCAB), 1.2 / np.sqrt(D))
    bias = np.full(VOCAB, -12.0, np.float32)  # control bytes, non-ASCII bytes, the other specials
    for rank, c in enumerate(LETTERS):
        bias[ord(c)] = 1.5 - 0.22 * rank
    bias[ord(" ")] = 2.0
    for c in ".,'":
        bias[ord(c)] = -1.5
    bias[END] = -0.5
    w["out_bias"] = bias
    return w


def build():
    w = weights()
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]

    def const(name, value, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    nodes = []

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0]

    const("zero", 0)
    const("one", 1)
    const("three", 3)
    const("zero_1", [0])
    const("shape_thd", [0, HEADS, DH])
    const("shape_td", [0, D])
    const("neg_big", -1e9, np.float32)
    const("f_zero", 0.0, np.float32)
    const("scale", 1.0 / np.sqrt(DH), np.float32)
    # P = past length, T = new tokens, positions P .. P+T-1, keys 0 .. P+T-1.
    node("Shape", ["past_kv"], ["past_shape"])
    node("Gather", ["past_shape", "three"], ["P"], axis=0)
    node("Shape", ["input_ids"], ["ids_shape"])
    node("Gather", ["ids_shape", "zero"], ["T"], axis=0)
    node("Add", ["P", "T"], ["S"])
    node("Range", ["P", "S", "one"], ["pos"])
    node("Range", ["zero", "S", "one"], ["kpos"])
    node("Unsqueeze", ["pos", "one_axis"], ["qpos_col"])
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "one_axis"))
    node("LessOrEqual", ["kpos", "qpos_col"], ["allowed"])  # [T, S]
    node("Where", ["allowed", "f_zero", "neg_big"], ["mask"])
    node("Gather", ["tok_emb", "input_ids"], ["x_tok"], axis=0)
    node("Gather", ["pos_emb", "pos"], ["x_pos"], axis=0)
    x = node("Add", ["x_tok", "x_pos"], ["x0"])
    presents = []
    for l in range(LAYERS):
        h = node("LayerNormalization", [x, f"ln1_g{l}", f"ln1_b{l}"], [f"h{l}"], axis=-1, epsilon=1e-5)
        qkv = node("MatMul", [h, f"wqkv{l}"], [f"qkv{l}"])
        node("Split", [qkv], [f"q{l}", f"k{l}", f"v{l}"], axis=1, num_outputs=3)
        heads = {}
        for part in "qkv":
            node("Reshape", [f"{part}{l}", "shape_thd"], [f"{part}r{l}"])
            heads[part] = node("Transpose", [f"{part}r{l}"], [f"{part}h{l}"], perm=[1, 0, 2])  # [H, T, DH]
        node("Gather", ["past_kv", const(f"l{l}", l)], [f"past{l}"], axis=0)  # [2, H, P, DH]
        node("Gather", [f"past{l}", "zero"], [f"pk{l}"], axis=0)
        node("Gather", [f"past{l}", "one"], [f"pv{l}"], axis=0)
        keys = node("Concat", [f"pk{l}", heads["k"]], [f"K{l}"], axis=1)  # [H, S, DH]
        values = node("Concat", [f"pv{l}", heads["v"]], [f"V{l}"], axis=1)
        node("Unsqueeze", [keys, "zero_1"], [f"Ku{l}"])
        node("Unsqueeze", [values, "zero_1"], [f"Vu{l}"])
        node("Concat", [f"Ku{l}", f"Vu{l}"], [f"kv{l}"], axis=0)  # [2, H, S, DH]
        presents.append(node("Unsqueeze", [f"kv{l}", "zero_1"], [f"kvu{l}"]))
        node("Transpose", [keys], [f"Kt{l}"], perm=[0, 2, 1])
        node("MatMul", [heads["q"], f"Kt{l}"], [f"sc{l}"])
        node("Mul", [f"sc{l}", "scale"], [f"scs{l}"])
        node("Add", [f"scs{l}", "mask"], [f"scm{l}"])
        node("Softmax", [f"scm{l}"], [f"pr{l}"], axis=-1)
        node("MatMul", [f"pr{l}", values], [f"at{l}"])  # [H, T, DH]
        node("Transpose", [f"at{l}"], [f"att{l}"], perm=[1, 0, 2])
        node("Reshape", [f"att{l}", "shape_td"], [f"atr{l}"])
        node("MatMul", [f"atr{l}", f"wo{l}"], [f"ao{l}"])
        x = node("Add", [x, f"ao{l}"], [f"xa{l}"])
        h2 = node("LayerNormalization", [x, f"ln2_g{l}", f"ln2_b{l}"], [f"h2{l}"], axis=-1, epsilon=1e-5)
        node("MatMul", [h2, f"w1{l}"], [f"f1{l}"])
        node("Relu", [f"f1{l}"], [f"fr{l}"])
        node("MatMul", [f"fr{l}", f"w2{l}"], [f"f2{l}"])
        x = node("Add", [x, f"f2{l}"], [f"xf{l}"])
    node("Concat", presents, ["present_kv"], axis=0)
    node("LayerNormalization", [x, "lnf_g", "lnf_b"], ["hf"], axis=-1, epsilon=1e-5)
    node("MatMul", ["hf", "w_out"], ["lo"])
    node("Add", ["lo", "out_bias"], ["logits"])
    g = helper.make_graph(
        nodes,
        "tiny_chat",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"]),
            helper.make_tensor_value_info("past_kv", TensorProto.FLOAT, [LAYERS, 2, HEADS, "P", DH]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["T", VOCAB]),
            helper.make_tensor_value_info("present_kv", TensorProto.FLOAT, [LAYERS, 2, HEADS, "S", DH]),
        ],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="tritium")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m, w


def numpy_forward(w, ids, past):
    """The same computation in numpy: (logits [T, V], present [L, 2, H, P+T, DH])."""

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g + b

    p, t = past.shape[3], len(ids)
    pos = np.arange(p, p + t)
    x = w["tok_emb"][ids] + w["pos_emb"][pos]
    mask = np.where(np.arange(p + t)[None, :] <= pos[:, None], 0.0, -1e9)
    presents = []
    for l in range(LAYERS):
        q, k, v = np.split(ln(x, w[f"ln1_g{l}"], w[f"ln1_b{l}"]) @ w[f"wqkv{l}"], 3, axis=1)
        q, k, v = (a.reshape(t, HEADS, DH).transpose(1, 0, 2) for a in (q, k, v))
        keys = np.concatenate([past[l, 0], k], axis=1)
        values = np.concatenate([past[l, 1], v], axis=1)
        presents.append(np.stack([keys, values]))
        s = q @ keys.transpose(0, 2, 1) / np.sqrt(DH) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + (s @ values).transpose(1, 0, 2).reshape(t, D) @ w[f"wo{l}"]
        x = x + np.maximum(ln(x, w[f"ln2_g{l}"], w[f"ln2_b{l}"]) @ w[f"w1{l}"], 0) @ w[f"w2{l}"]
    logits = ln(x, w["lnf_g"], w["lnf_b"]) @ w["w_out"] + w["out_bias"]
    return logits, np.stack(presents)


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def tokenizer_json():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    ids = tok.encode("<|user|>\nhé!<|end|>", add_special_tokens=False).ids
    assert ids == [257, 10, 104, 195, 169, 33, 259], ids
    assert tok.decode(ids[1:-1]) == "\nhé!"
    assert [tok.token_to_id(s) for s in SPECIALS] == [256, 257, 258, 259]
    return tok.to_str(pretty=False)


def check(path, w):
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    ids = rng.integers(0, VOCAB, 9)
    empty = np.zeros((LAYERS, 2, HEADS, 0, DH), np.float32)
    logits, present = sess.run(None, {"input_ids": ids[:6], "past_kv": empty})
    want_logits, want_present = numpy_forward(w, ids[:6], empty)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(present, want_present, rtol=1e-3, atol=1e-3)
    # The cache gives the same logits as the whole sequence at once.
    more, _ = sess.run(None, {"input_ids": ids[6:], "past_kv": present})
    whole, _ = sess.run(None, {"input_ids": ids, "past_kv": empty})
    np.testing.assert_allclose(more, whole[6:], rtol=1e-3, atol=1e-3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    model_path = os.path.join(OUT, "model.onnx")
    tok_path = os.path.join(OUT, "tokenizer.json")
    if not args.force and os.path.isfile(model_path) and os.path.isfile(tok_path):
        return
    os.makedirs(OUT, exist_ok=True)
    m, w = build()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_model = os.path.join(tmp, "model.onnx")
        onnx.save(m, tmp_model)
        check(tmp_model, w)
        os.replace(tmp_model, model_path)
    with open(tok_path, "w") as f:
        f.write(tokenizer_json())
    print(f"tiny_chat.py: wrote {model_path} and {tok_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
