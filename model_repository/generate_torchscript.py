#!/usr/bin/env python3
"""Makes the TorchScript files (`model.pt`) of the bundled PyTorch models, without PyTorch: each
is written as TorchScript source in an archive (torchscript.py) that libtorch compiles when
Tritium loads it. The config.pbtxt files live in git; the .pt files are git-ignored and made
again by this script (scripts/setup.sh runs it).

    python model_repository/generate_torchscript.py           # writes the files that are missing
    python model_repository/generate_torchscript.py --force   # writes all of them again

- torch_add_sub: Triton's naming convention, INPUT__0/INPUT__1 -> OUTPUT__0 (sum), OUTPUT__1
  (difference), FP32 [batch, 16], dynamic batching over 2 instances.
- torch_mixed: inputs named after forward's arguments, one of every datatype libtorch has plus
  BYTES as List[str], outputs in config order.
- torch_accumulate: Triton's accumulator as a sequence model with implicit state: the running
  sum travels in and out as ACC__2 -> ACC_OUT__1, and the engine keeps it between requests.
- torch_checked: forward raises for a negative input (a request error, the model keeps serving).
- torch_mlp: the ONNX mlp's network with its very weights (read from mlp/1/model.onnx, which
  generate.py writes first), for benchmarks of the two backends on the same compute.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript import module_source, write_archive  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# TorchScript's ScalarType numbers (c10/core/ScalarType.h), as serialized code writes them.
FLOAT, DOUBLE, INT64 = 6, 7, 4

MODELS = {
    "torch_add_sub": ("AddSub", module_source(
        "AddSub", "INPUT__0: Tensor,\n    INPUT__1: Tensor) -> Tuple[Tensor, Tensor]",
        "    return (torch.add(INPUT__0, INPUT__1), torch.sub(INPUT__0, INPUT__1))\n")),
    "torch_mixed": ("Mixed", module_source(
        "Mixed",
        "IMAGE: Tensor,\n    SCALE: Tensor,\n    MASK: Tensor,\n    IDS: Tensor,\n    SMALL: Tensor,\n"
        "    SHORT: Tensor,\n    COUNT: Tensor,\n    WIDE: Tensor,\n    BRAIN: Tensor,\n    TEXT: List[str])"
        " -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, List[str]]",
        f"    scaled = torch.mul(torch.to(IMAGE, {FLOAT}), torch.to(SCALE, {FLOAT}))\n"
        f"    masked = torch.mul(scaled, torch.to(MASK, {FLOAT}))\n"
        f"    total = torch.add(torch.add(torch.add(IDS, torch.to(SMALL, {INT64})), torch.to(SHORT, {INT64})),"
        f" torch.to(COUNT, {INT64}))\n"
        "    shouted = annotate(List[str], [])\n"
        "    for s in TEXT:\n"
        "      _0 = torch.append(shouted, torch.add(s.upper(), \"!\"))\n"
        "    return (masked, total, torch.mul(WIDE, 2.), torch.add(BRAIN, 1.), torch.logical_not(MASK),"
        " torch.add(IMAGE, 1), torch.neg(SMALL), shouted)\n")),
    "torch_accumulate": ("Accumulate", module_source(
        "Accumulate",
        "INPUT__0: Tensor,\n    START__1: Tensor,\n    ACC__2: Tensor) -> Tuple[Tensor, Tensor]",
        "    kept = torch.mul(ACC__2, torch.sub(torch.ones_like(START__1), START__1))\n"
        "    acc = torch.add(kept, INPUT__0)\n"
        "    return (acc, acc)\n")),
    "torch_checked": ("Checked", module_source(
        "Checked", "INPUT__0: Tensor) -> Tensor",
        "    if bool(torch.any(torch.lt(INPUT__0, 0))):\n"
        "      ops.prim.RaiseException(\"torch_checked: negative input\", \"builtins.ValueError\")\n"
        "    else:\n"
        "      pass\n"
        "    return torch.mul(INPUT__0, 2.)\n")),
}


def torch_mlp():
    """(class, source, tensors) of the mlp: Gemm + Relu layers with the ONNX file's weights."""
    import onnx
    from onnx import numpy_helper
    graph = onnx.load(os.path.join(HERE, "mlp", "1", "model.onnx")).graph
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    layers = len([n for n in weights if n.startswith("W")])
    lines = ["class Mlp(Module):", "  __parameters__ = []", "  __buffers__ = []", "  training : bool"]
    lines += [f"  {n} : Tensor" for n in sorted(weights)]
    lines += ["  def forward(self: __torch__.Mlp,", "    INPUT__0: Tensor) -> Tensor:", "    x = INPUT__0"]
    for i in range(layers):
        lines.append(f"    x = torch.addmm(self.B{i}, x, self.W{i})")
        if i < layers - 1:
            lines.append("    x = torch.relu(x)")
    lines.append("    return x")
    return "Mlp", "\n".join(lines) + "\n", {n: weights[n] for n in sorted(weights)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="write every file again")
    args = parser.parse_args()
    wrote = []
    models = {name: (lambda c=c, s=s: (c, s, None)) for name, (c, s) in MODELS.items()}
    models["torch_mlp"] = torch_mlp
    for name, make in models.items():
        path = os.path.join(HERE, name, "1", "model.pt")
        if os.path.exists(path) and not args.force:
            continue
        class_name, source, tensors = make()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_archive(path, class_name, source, root=name, tensors=tensors)
        wrote.append(name)
    if wrote:
        print("generate_torchscript.py: wrote " + ", ".join(wrote))


if __name__ == "__main__":
    main()
