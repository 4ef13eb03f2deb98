#!/usr/bin/env python3
"""Makes the models of the customer-service example (examples/customer_service/models/): one Tritium
process serving a text classifier in TorchScript, a keyword-spotting speech model as a
TensorFlow SavedModel and a sentiment model in ONNX. The config.pbtxt files live in git; the
model files are git-ignored and made again by this script (scripts/setup.sh runs it).

    .venv/bin/python examples/customer_service/generate.py           # writes what is missing
    .venv/bin/python examples/customer_service/generate.py --force   # writes everything again

- models/intent/1/model.pt (TorchScript, PyTorch backend): TEXT (BYTES) -> PROBS over billing,
  shipping, technical, account. The text's ASCII words (lower-cased, split on anything else)
  are hashed (FNV-1a, 32 bit) into 512 buckets, the bucket counts L2-normalised, then a linear
  layer and a softmax. The weights are **trained here** by plain softmax regression (numpy,
  fixed steps, zero start: deterministic) on the few dozen hand-written requests of
  TRAINING below: a toy model, not a real one (no registry package carries intent weights). The
  archive holds TorchScript source that libtorch compiles on load (model_repository/torchscript.py),
  so no PyTorch is needed to make it.
- models/sentiment/1/model.onnx (ONNX Runtime): TEXT (BYTES) -> COMPOUND (-1..1) and SCORES
  (negative, neutral, positive shares). The weights are **real**: the 7,500-entry VADER
  sentiment lexicon (Hutto & Gilbert 2014, MIT) from PyPI's vaderSentiment==3.3.2 wheel,
  fetched with `pip download` (nothing is installed). The graph lower-cases
  (StringNormalizer), splits into words (com.microsoft Tokenizer), counts lexicon words
  (TfIdfVectorizer) and sums their valences as VADER does, without VADER's rules for negation,
  boosters, capitals and punctuation (so "not good" scores as "good").
- models/keyword_spotter: a symbolic link to examples/tensorflow_models/keyword_spotter, whose
  SavedModel model_repository/generate_savedmodel.py makes with tensorflow-cpu (synthetic
  weights from a fixed seed; see its config.pbtxt).

The functions intent_probs() and sentiment_scores() compute the same numbers in numpy: the
tests use them as references beside each framework's own output.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(HERE, "models")
sys.path.insert(0, os.path.join(ROOT, "model_repository"))
from torchscript import write_archive  # noqa: E402

INTENTS = ["billing", "shipping", "technical", "account"]
BUCKETS = 512
FNV_OFFSET, FNV_PRIME = 2166136261, 16777619

# A few hand-written requests per intent: the whole training set of the toy classifier.
TRAINING = {
    "billing": [
        "I was charged twice for my order", "please refund my payment", "why is my invoice so high",
        "the bill shows a fee I do not understand", "can I get a refund for the last charge",
        "my credit card was billed the wrong amount", "I want my money back", "update my payment method",
        "the price on the invoice is wrong", "cancel the subscription charge", "how much does the plan cost",
        "there is an unexpected charge on my statement",
    ],
    "shipping": [
        "where is my package", "my parcel has not arrived yet", "the delivery is late",
        "when will my order ship", "track my shipment please", "the courier lost my box",
        "can you deliver to a different address", "the package arrived damaged", "how long does shipping take",
        "my order is stuck in transit", "I need express delivery", "the tracking number does not work",
    ],
    "technical": [
        "the app crashes when I open it", "I get an error message on login page", "the website is not loading",
        "my device will not connect to wifi", "the software keeps freezing", "there is a bug in the latest update",
        "the screen goes black after the update", "the installation fails with an error",
        "the feature stopped working", "sync is broken on my phone", "the download never finishes",
        "the printer does not respond",
    ],
    "account": [
        "I forgot my password", "how do I change my email address", "please delete my account",
        "I cannot sign in to my profile", "reset my password please", "change the username on my account",
        "someone else is using my account", "how do I enable two factor authentication",
        "update my personal details", "close my account", "my account was locked", "verify my identity",
    ],
}

VADER = ("vaderSentiment==3.3.2", "vaderSentiment/vader_lexicon.txt")
LEXICON_CACHE = os.path.join(ROOT, ".cache", "vader", "vader_lexicon.txt")
SENTIMENTS = ["negative", "neutral", "positive"]
# VADER's normalisation of the summed valence into -1..1: s / sqrt(s^2 + alpha).
VADER_ALPHA = 15.0


# ---------------------------------------------------------------------------------------------
# The intent classifier (TorchScript)

def words(text: str):
    """ASCII letters and digits, lower-cased; everything else separates words (also every
    non-ASCII character, so TorchScript's byte-wise strings and Python agree)."""
    out, word = [], []
    for ch in text:
        o = ord(ch)
        if 65 <= o <= 90:
            o += 32
        if 97 <= o <= 122 or 48 <= o <= 57:
            word.append(o)
        elif word:
            out.append(word)
            word = []
    if word:
        out.append(word)
    return out


def bucket(word_codes) -> int:
    h = FNV_OFFSET
    for o in word_codes:
        h = ((h ^ o) * FNV_PRIME) & 0xFFFFFFFF
    return h % BUCKETS


def intent_features(texts):
    x = np.zeros((len(texts), BUCKETS), dtype=np.float64)
    for i, text in enumerate(texts):
        for w in words(text):
            x[i, bucket(w)] += 1.0
    norm = np.sqrt((x * x).sum(axis=1, keepdims=True))
    return x / np.maximum(norm, 1.0)


def train_intent():
    """Softmax regression by full-batch gradient descent: (W [512, 4], b [4]) as float32."""
    texts = [t for intent in INTENTS for t in TRAINING[intent]]
    labels = np.array([INTENTS.index(intent) for intent in INTENTS for _ in TRAINING[intent]])
    x = intent_features(texts)
    y = np.eye(len(INTENTS))[labels]
    w = np.zeros((BUCKETS, len(INTENTS)))
    b = np.zeros(len(INTENTS))
    for _ in range(600):
        logits = x @ w + b
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        grad = p - y
        w -= 2.0 * (x.T @ grad / len(texts) + 1e-3 * w)
        b -= 2.0 * grad.mean(axis=0)
    return w.astype(np.float32), b.astype(np.float32)


def intent_probs(texts, w, b):
    """The model's computation in numpy (float64 features, float32 weights)."""
    logits = intent_features(texts) @ w.astype(np.float64) + b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


INTENT_SOURCE = f"""class Intent(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  B : Tensor
  W : Tensor
  def forward(self: __torch__.Intent,
    TEXT: List[str]) -> Tensor:
    rows = annotate(List[Tensor], [])
    for text in TEXT:
      hashes = annotate(List[int], [])
      h = {FNV_OFFSET}
      n = 0
      for ch in text:
        o = ord(ch)
        if o >= 65 and o <= 90:
          o = o + 32
        if (o >= 97 and o <= 122) or (o >= 48 and o <= 57):
          h = ((h ^ o) * {FNV_PRIME}) & {0xFFFFFFFF}
          n = n + 1
        else:
          if n > 0:
            hashes.append(h % {BUCKETS})
          h = {FNV_OFFSET}
          n = 0
      if n > 0:
        hashes.append(h % {BUCKETS})
      counts = torch.zeros([{BUCKETS}], dtype=7)
      if len(hashes) > 0:
        counts = torch.to(torch.bincount(torch.tensor(hashes, dtype=4), None, {BUCKETS}), 7)
      norm = torch.clamp_min(torch.sqrt(torch.sum(torch.mul(counts, counts))), 1.)
      rows.append(torch.div(counts, norm))
    x = torch.to(torch.stack(rows), 6)
    return torch.softmax(torch.addmm(self.B, x, self.W), 1)
"""


# Texts whose numpy probabilities generate.py writes beside the model (models/intent/reference.json):
# tests/customer_service_intent.rs checks libtorch's own output of the archive against them.
REFERENCE_TEXTS = [
    "I was double charged on my card", "my package never arrived", "the app shows an error on start",
    "I forgot my password", "", "Hello!!! ÜBER-fast 123 shipping, please", "refund refund refund",
]


def write_intent(path):
    import json
    w, b = train_intent()
    write_archive(path, "Intent", INTENT_SOURCE, root="intent", tensors={"B": b, "W": w})
    reference = {"texts": REFERENCE_TEXTS, "probs": intent_probs(REFERENCE_TEXTS, w, b).tolist()}
    with open(os.path.join(MODELS, "intent", "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


def intent_weights(path=None):
    """(W, B) as stored in the archive (the tests' numpy reference reads them back)."""
    path = path or os.path.join(MODELS, "intent", "1", "model.pt")
    with zipfile.ZipFile(path) as z:
        b = np.frombuffer(z.read("intent/data/0"), dtype="<f4")
        w = np.frombuffer(z.read("intent/data/1"), dtype="<f4").reshape(BUCKETS, len(INTENTS))
    return w, b


# ---------------------------------------------------------------------------------------------
# The sentiment model (ONNX)

def vader_lexicon():
    """{word: mean valence} from the vaderSentiment wheel (cached under .cache/vader/)."""
    if not os.path.exists(LEXICON_CACHE):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                            "--no-deps", VADER[0], "-d", tmp], check=True)
            wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
            if len(wheels) != 1:
                sys.exit(f"generate.py: expected one wheel for {VADER[0]}, got {wheels}")
            with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
                data = z.read(VADER[1])
        os.makedirs(os.path.dirname(LEXICON_CACHE), exist_ok=True)
        with open(LEXICON_CACHE + ".tmp", "wb") as f:
            f.write(data)
        os.replace(LEXICON_CACHE + ".tmp", LEXICON_CACHE)
    lexicon = {}
    with open(LEXICON_CACHE, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0] and parts[0] == parts[0].lower():
                lexicon.setdefault(parts[0], float(parts[1]))
    return lexicon


SEPARATORS = "[^a-z0-9']+"


def sentiment_tokens(text: str):
    import re
    return [t for t in re.split(SEPARATORS, text.lower()) if t]


def sentiment_scores(texts, lexicon):
    """(COMPOUND [n, 1], SCORES [n, 3]) in numpy: VADER's sums over the lexicon words of each
    text (pos += v + 1 for v > 0, neg += v - 1 for v < 0, neutral += 1 for every other word)."""
    compound, scores = [], []
    for text in texts:
        vals = [lexicon.get(t, 0.0) for t in sentiment_tokens(text)]
        s = sum(vals)
        pos = sum(v + 1 for v in vals if v > 0)
        neg = -sum(v - 1 for v in vals if v < 0)
        neu = sum(1 for v in vals if v == 0)
        total = max(pos + neg + neu, 1.0)
        compound.append([s / np.sqrt(s * s + VADER_ALPHA)])
        scores.append([neg / total, neu / total, pos / total])
    return np.array(compound, dtype=np.float32), np.array(scores, dtype=np.float32)


def sentiment_model(lexicon):
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper
    vocab = sorted(lexicon)
    v = np.array([lexicon[w] for w in vocab], dtype=np.float32)
    # Columns: summed valence, |negative sum|, lexicon words that are not neutral, positive sum.
    weights = np.stack([v, np.where(v < 0, 1 - v, 0), (v != 0).astype(np.float32), np.where(v > 0, v + 1, 0)], axis=1)
    init = [
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(weights.astype(np.float32), "weights"),
        h.make_tensor("pad", T.STRING, [], [b""]),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([1, 1, 1, 1], dtype=np.int64), "splits"),
        numpy_helper.from_array(np.array(VADER_ALPHA, dtype=np.float32), "alpha"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]
    nodes = [
        h.make_node("Reshape", ["TEXT", "flat_shape"], ["flat"]),
        h.make_node("StringNormalizer", ["flat"], ["lower"], case_change_action="LOWER", locale="C.UTF-8"),
        h.make_node("Tokenizer", ["lower"], ["tokens"], domain="com.microsoft", mark=0, pad_value="",
                    mincharnum=1, separators=[SEPARATORS]),
        h.make_node("TfIdfVectorizer", ["tokens"], ["counts"], mode="TF", min_gram_length=1, max_gram_length=1,
                    max_skip_count=0, ngram_counts=[0], ngram_indexes=list(range(len(vocab))), pool_strings=vocab),
        h.make_node("MatMul", ["counts", "weights"], ["sums"]),
        h.make_node("Split", ["sums", "splits"], ["s", "neg", "lexical", "pos"], axis=1),
        # Every word (the padding excluded) that is not a non-neutral lexicon word is neutral.
        h.make_node("Equal", ["tokens", "pad"], ["is_pad"]),
        h.make_node("Not", ["is_pad"], ["is_word"]),
        h.make_node("Cast", ["is_word"], ["word"], to=T.FLOAT),
        h.make_node("ReduceSum", ["word", "axis1"], ["n_words"], keepdims=1),
        h.make_node("Sub", ["n_words", "lexical"], ["neu"]),
        h.make_node("Sum", ["pos", "neg", "neu"], ["total_raw"]),
        h.make_node("Max", ["total_raw", "one"], ["total"]),
        h.make_node("Concat", ["neg", "neu", "pos"], ["parts"], axis=1),
        h.make_node("Div", ["parts", "total"], ["SCORES"]),
        h.make_node("Mul", ["s", "s"], ["s2"]),
        h.make_node("Add", ["s2", "alpha"], ["s2a"]),
        h.make_node("Sqrt", ["s2a"], ["root"]),
        h.make_node("Div", ["s", "root"], ["COMPOUND"]),
    ]
    graph = h.make_graph(nodes, "sentiment", [h.make_tensor_value_info("TEXT", T.STRING, ["batch", 1])],
                         [h.make_tensor_value_info("COMPOUND", T.FLOAT, ["batch", 1]),
                          h.make_tensor_value_info("SCORES", T.FLOAT, ["batch", 3])], initializer=init)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19), h.make_opsetid("com.microsoft", 1)],
                         ir_version=9, producer_name="tritium customer_service/generate.py")
    return model


def write_sentiment(path):
    import onnx
    model = sentiment_model(vader_lexicon())
    onnx.checker.check_model(model)
    onnx.save(model, path)


def atomically(path, run):
    """Runs `run(path)` into a temporary file beside `path`; the file appears whole or not at all."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = path + ".tmp"
    run(part)
    os.replace(part, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="write every file again")
    args = parser.parse_args()
    wrote = []
    for name, file, make in [("intent", "model.pt", write_intent), ("sentiment", "model.onnx", write_sentiment)]:
        path = os.path.join(MODELS, name, "1", file)
        made = [path] + ([os.path.join(MODELS, "intent", "reference.json")] if name == "intent" else [])
        if all(os.path.exists(p) for p in made) and not args.force:
            continue
        atomically(path, make)
        wrote.append(name)
    if wrote:
        print("customer_service/generate.py: wrote " + ", ".join(wrote))


if __name__ == "__main__":
    main()
