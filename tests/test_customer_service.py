"""The customer-service example (examples/customer_service/models/), served as it ships by one tritium
process: a TorchScript text classifier (`intent`), a TensorFlow SavedModel keyword spotter
(`keyword_spotter`) and an ONNX sentiment model (`sentiment`), each called with tritonclient over
HTTP and gRPC and checked against its own framework's output:

- intent: libtorch's own output of the archive is checked against numpy by
  tests/customer_service_intent.rs (tch, 1e-5); here the served probabilities are checked
  against the same numpy computation (1e-5) and the numbers generate.py wrote;
- sentiment: against onnxruntime's in-process session of the same file (1e-6) and numpy over
  the VADER lexicon (1e-5);
- keyword_spotter: against TensorFlow's in-process call of the same SavedModel (1e-5).

A binary built without the TensorFlow feature skips this module, except under CI (CI=true),
where it fails, as tests/test_tensorflow.py does."""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import onnxruntime as ort
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import REPO_ROOT, Server
from test_tensorflow import REFERENCE as TF_REFERENCE
from test_tensorflow import settled, skip_without_tensorflow

EXAMPLE = REPO_ROOT / "examples" / "customer_service" / "models"
sys.path.insert(0, str(EXAMPLE.parent))
import generate  # noqa: E402

TEXTS = ["Please refund the double charge on my invoice", "My parcel is late and the tracking is broken!",
         "The app crashes with an error, this is terrible", "I love the new update, thank you so much",
         "reset my password", "", "ÜBER non-ASCII text, naïve café"]
PLATFORMS = {"intent": "pytorch_libtorch", "keyword_spotter": "tensorflow_savedmodel", "sentiment": "onnxruntime_onnx"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    missing = [p for p in (EXAMPLE / "intent" / "1" / "model.pt", EXAMPLE / "sentiment" / "1" / "model.onnx",
                           EXAMPLE / "keyword_spotter" / "1" / "model.savedmodel" / "saved_model.pb") if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{missing} missing: run scripts/setup.sh first")
    base = tmp_path_factory.mktemp("customer_service")
    srv = Server(EXAMPLE, args=["--exit-on-error=false"], log_dir=base).start(wait_for="live", timeout=120)
    try:
        index = settled(srv, EXAMPLE)
        skip_without_tensorflow(index, "keyword_spotter")
        assert {m["name"]: m["state"] for m in index.values()} == dict.fromkeys(PLATFORMS, "READY"), \
            f"{index}\n{srv.log_tail()}"
        yield srv
    finally:
        assert srv.stop() == 0, srv.log_tail()


def clients(srv):
    yield httpclient, srv.client
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        yield grpcclient, grpc
    finally:
        grpc.close()


def text_input(proto, texts):
    t = proto.InferInput("TEXT", [len(texts), 1], "BYTES")
    t.set_data_from_numpy(np.array([[s.encode()] for s in texts], dtype=object))
    return t


def test_one_process_serves_the_three_frameworks(service):
    for proto, client in clients(service):
        for name, platform in PLATFORMS.items():
            meta = client.get_model_metadata(name)
            got = meta["platform"] if isinstance(meta, dict) else meta.platform
            assert got == platform, (name, got)


def test_intent_matches_numpy_and_the_generated_reference(service):
    w, b = generate.intent_weights()
    want = generate.intent_probs(TEXTS, w, b)
    reference = json.loads((EXAMPLE / "intent" / "reference.json").read_text())
    for proto, client in clients(service):
        res = client.infer("intent", [text_input(proto, TEXTS)])
        np.testing.assert_allclose(res.as_numpy("PROBS"), want, rtol=0, atol=1e-5)
        res = client.infer("intent", [text_input(proto, reference["texts"])])
        np.testing.assert_allclose(res.as_numpy("PROBS"), np.array(reference["probs"]), rtol=0, atol=1e-5)
        # The classification extension names the intent from labels.txt.
        top = proto.InferRequestedOutput("PROBS", class_count=1)
        asks = [TEXTS[i] for i in (0, 1, 2, 4)]
        res = client.infer("intent", [text_input(proto, asks)], outputs=[top])
        named = [row[0].decode().split(":")[-1] for row in res.as_numpy("PROBS")]
        assert named == [generate.INTENTS[k] for k in want[[0, 1, 2, 4]].argmax(axis=1)], named
        # The toy model gets these four right: the trained weights, not an accident, are served.
        assert named == ["billing", "shipping", "technical", "account"], named


def test_sentiment_matches_onnxruntime_and_the_vader_lexicon(service):
    session = ort.InferenceSession(str(EXAMPLE / "sentiment" / "1" / "model.onnx"))
    compound, scores = session.run(["COMPOUND", "SCORES"], {"TEXT": np.array([[s] for s in TEXTS], dtype=object)})
    want_compound, want_scores = generate.sentiment_scores(TEXTS, generate.vader_lexicon())
    np.testing.assert_allclose(compound, want_compound, rtol=0, atol=1e-5)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-5)
    for proto, client in clients(service):
        res = client.infer("sentiment", [text_input(proto, TEXTS)])
        np.testing.assert_allclose(res.as_numpy("COMPOUND"), compound, rtol=0, atol=1e-6)
        np.testing.assert_allclose(res.as_numpy("SCORES"), scores, rtol=0, atol=1e-6)
    # Real lexicon weights: clear praise and clear complaint land on their sides.
    assert compound[3, 0] > 0.5 and compound[2, 0] < -0.3, compound


def test_keyword_spotter_matches_tensorflow_in_process(service, tmp_path):
    ref = tmp_path / "ref.npz"
    subprocess.run([str(REPO_ROOT / ".tensorflow" / "venv" / "bin" / "python"), "-c", TF_REFERENCE,
                    str(REPO_ROOT / "model_repository"),
                    str(EXAMPLE / "keyword_spotter" / "1" / "model.savedmodel"), str(ref)],
                   check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True)
    want = np.load(ref)
    for proto, client in clients(service):
        t = proto.InferInput("AUDIO", list(want["audio"].shape), "FP32")
        t.set_data_from_numpy(want["audio"])
        res = client.infer("keyword_spotter", [t])
        np.testing.assert_allclose(res.as_numpy("LOGITS"), want["LOGITS"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(res.as_numpy("KEYWORD"), want["KEYWORD"])


def test_the_readme_calls_over_plain_json(service):
    """The README's three curl calls (the same JSON bodies) give the answers the README shows."""
    url = f"{service.base}/v2/models/{{}}/infer"
    res = requests.post(url.format("intent"), json={
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["I was charged twice"]}],
        "outputs": [{"name": "PROBS", "parameters": {"classification": 1}}]}, timeout=30)
    assert res.status_code == 200, res.text
    assert res.json()["outputs"][0]["data"][0].endswith(":0:billing"), res.text
    res = requests.post(url.format("sentiment"), json={
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["thank you, great service"]}]},
        timeout=30)
    assert res.status_code == 200, res.text
    outputs = {o["name"]: o["data"] for o in res.json()["outputs"]}
    want_compound, want_scores = generate.sentiment_scores(["thank you, great service"], generate.vader_lexicon())
    np.testing.assert_allclose(outputs["COMPOUND"], want_compound[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(outputs["SCORES"], want_scores[0], rtol=0, atol=1e-6)
    res = requests.post(url.format("keyword_spotter"), json={
        "inputs": [{"name": "AUDIO", "shape": [1, 16000], "datatype": "FP32", "data": [0.0] * 16000}],
        "outputs": [{"name": "KEYWORD"}]}, timeout=30)
    assert res.status_code == 200, res.text
    assert res.json()["outputs"][0] == {"name": "KEYWORD", "datatype": "INT64", "shape": [1, 1], "data": [3]}, res.text
    # A wrong request to one model is that request's 400; the others serve on.
    res = requests.post(url.format("sentiment"), json={
        "inputs": [{"name": "AUDIO", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}, timeout=30)
    assert res.status_code == 400 and "error" in res.json(), res.text


def generate_audio(n):
    # generate_savedmodel imports TensorFlow; the clip maker is plain numpy, so it is copied here.
    rng = np.random.default_rng(5)
    t = np.arange(16000, dtype=np.float32) / 16000
    return np.stack([0.5 * np.sin(2 * np.pi * (220 + 110 * i) * t) + 0.01 * rng.standard_normal(16000)
                     for i in range(n)]).astype(np.float32)


def test_the_three_models_under_concurrent_load_in_one_process(service):
    """Threads calling the three models at once over gRPC (the engine batches each model's
    requests); every answer is checked against its reference."""
    w, b = generate.intent_weights()
    want_intent = generate.intent_probs(TEXTS, w, b)
    want_sentiment, _ = generate.sentiment_scores(TEXTS, generate.vader_lexicon())
    audio = generate_audio(2)
    t = httpclient.InferInput("AUDIO", [2, 16000], "FP32")
    t.set_data_from_numpy(audio)
    want_kws = service.client.infer("keyword_spotter", [t]).as_numpy("LOGITS")
    errors = []

    def worker(k):
        client = grpcclient.InferenceServerClient(service.grpc_url)
        try:
            for i in range(12):
                j = (k + i) % len(TEXTS)
                if (k + i) % 3 == 0:
                    got = client.infer("intent", [text_input(grpcclient, [TEXTS[j]])]).as_numpy("PROBS")
                    np.testing.assert_allclose(got[0], want_intent[j], rtol=0, atol=1e-5)
                elif (k + i) % 3 == 1:
                    got = client.infer("sentiment", [text_input(grpcclient, [TEXTS[j]])]).as_numpy("COMPOUND")
                    np.testing.assert_allclose(got[0], want_sentiment[j], rtol=0, atol=1e-5)
                else:
                    t = grpcclient.InferInput("AUDIO", [1, 16000], "FP32")
                    t.set_data_from_numpy(audio[j % 2: j % 2 + 1])
                    got = client.infer("keyword_spotter", [t]).as_numpy("LOGITS")
                    np.testing.assert_allclose(got[0], want_kws[j % 2], rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported below with the worker's number
            errors.append(f"worker {k}: {e!r}")
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
