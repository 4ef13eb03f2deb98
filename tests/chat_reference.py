"""The reference decoding loop for model_repository/tiny_chat, in Python (onnxruntime, numpy,
tokenizers): the same steps as Tritium's `llm` backend (src/backends/llm/), so a test can say
what the server must answer, token for token.

A conversation's cache is (token ids, KV of those ids). A turn reuses the longest common prefix
of the cached ids and its prompt's ids (all but the last prompt token at most, whose logits are
needed), runs the rest of the prompt in one call, then one call per sampled token; the last
sampled token is not run (the next turn runs it if it is still there).
"""

import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "..", "model_repository", "tiny_chat", "1")
END = 259
MASK64 = (1 << 64) - 1


def render(messages, generation=True):
    """The chat template of tiny_chat's config (chat_template_message / _generation)."""
    text = "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)
    return text + ("<|assistant|>\n" if generation else "")


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def next_f64(self):
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))


def sample(logits, temperature, top_p, rng):
    """Greedy at temperature 0; otherwise softmax at the temperature, nucleus `top_p`, one draw."""
    values = [float(v) for v in logits]
    if temperature <= 0.0:
        best = 0
        for i, v in enumerate(values):
            if v > values[best]:
                best = i
        return best
    m = max(values)
    weights = [math.exp((v - m) / temperature) for v in values]
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    total = 0.0
    for i in order:
        total += weights[i]
    kept, kept_total = order, total
    if top_p < 1.0:
        kept, acc = [], 0.0
        for i in order:
            acc += weights[i]
            kept.append(i)
            if acc >= top_p * total:
                break
        kept_total = acc
    u = rng.next_f64() * kept_total
    acc = 0.0
    for i in kept:
        acc += weights[i]
        if u < acc:
            return i
    return kept[-1]


class Reference:
    def __init__(self):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.session = ort.InferenceSession(os.path.join(MODEL_DIR, "model.onnx"), providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))

    def empty(self):
        return ([], np.zeros((4, 2, 4, 0, 32), np.float32))

    def run(self, ids, past):
        logits, present = self.session.run(None, {"input_ids": np.array(ids, np.int64), "past_kv": past})
        return logits[-1], present

    def generate(self, text, cache=None, max_tokens=64, temperature=1.0, top_p=1.0, seed=0, stop=()):
        """One turn: (text, finish_reason, prompt_tokens, completion_tokens, cached_tokens, cache)."""
        # The server reads both as FP32 inputs.
        temperature, top_p = float(np.float32(temperature)), float(np.float32(top_p))
        cached_ids, past = cache if cache is not None else self.empty()
        prompt = self.tokenizer.encode(text, add_special_tokens=False).ids
        common = 0
        while common < min(len(cached_ids), len(prompt) - 1) and cached_ids[common] == prompt[common]:
            common += 1
        past = np.ascontiguousarray(past[:, :, :, :common, :])
        fed = prompt[:common]
        logits, past = self.run(prompt[common:], past)
        fed = fed + prompt[common:]
        rng = SplitMix64(seed)
        generated, finish, out_text = [], "length", ""
        while True:
            token = sample(logits, temperature, top_p, rng)
            generated.append(token)
            if token == END:
                finish = "stop"
                break
            out_text = self.tokenizer.decode([t for t in generated if t < 256], skip_special_tokens=True)
            hit = [out_text.find(s) for s in stop if s and s in out_text]
            if hit:
                out_text = out_text[: min(hit)]
                finish = "stop"
                break
            if len(generated) >= max_tokens:
                break
            logits, past = self.run([token], past)
            fed = fed + [token]
        return out_text, finish, len(prompt), len(generated), common, (fed, past)
