"""A real stateful model: Silero VAD with its recurrent state as implicit sequence state.
Many interleaved conversations stream audio chunks; every probability must equal what the
model gives when run chunk by chunk in-process with onnxruntime."""
import threading

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import BUNDLED_REPO

CHUNK = 512
SR = 16000


def audio(seed, chunks):
    """Speech-like bursts (harmonic tones with an envelope) over noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(chunks * CHUNK) / SR
    f0 = 120 + 80 * rng.random()
    voiced = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    envelope = (np.sin(2 * np.pi * (0.5 + rng.random()) * t) > 0).astype(np.float32)
    x = 0.3 * voiced * envelope + 0.02 * rng.standard_normal(t.shape)
    return x.astype(np.float32).reshape(chunks, 1, CHUNK)


def reference(chunks, carry_state=True):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(BUNDLED_REPO / "silero_vad" / "1" / "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), dtype=np.float32)
    probs = []
    for c in chunks:
        out, next_state = sess.run(None, {"input": c, "state": state, "sr": np.array(SR, dtype=np.int64)})
        if carry_state:
            state = next_state
        probs.append(float(out[0][0]))
    return probs


def inputs(proto, chunk):
    x = proto.InferInput("input", [1, CHUNK], "FP32")
    x.set_data_from_numpy(chunk)
    sr = proto.InferInput("sr", [1], "INT64")
    sr.set_data_from_numpy(np.array([SR], dtype=np.int64))
    return [x, sr]


@pytest.fixture(scope="module")
def conversations():
    if not (BUNDLED_REPO / "silero_vad" / "1" / "model.onnx").is_file():
        pytest.fail("model_repository/silero_vad has no model.onnx: run scripts/setup.sh")
    convs = {f"conv-{k}": audio(k, 12) for k in range(8)}
    return convs, {k: reference(v) for k, v in convs.items()}


def test_interleaved_conversations_over_http_match_onnxruntime(server, conversations):
    convs, expected = conversations
    got = {k: [] for k in convs}
    errors = []

    def talk(cid):
        c = httpclient.InferenceServerClient(server.http_url)
        try:
            chunks = convs[cid]
            for i, chunk in enumerate(chunks):
                res = c.infer("silero_vad", inputs(httpclient, chunk), sequence_id=cid,
                              sequence_start=i == 0, sequence_end=i == len(chunks) - 1)
                got[cid].append(float(res.as_numpy("output")[0][0]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=talk, args=(cid,)) for cid in convs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for cid in convs:
        np.testing.assert_allclose(got[cid], expected[cid], rtol=1e-5, atol=1e-6, err_msg=cid)
    # The state matters: without it the model gives other probabilities, so matching the
    # reference above shows each conversation got its own state back every time.
    stateless = reference(convs["conv-0"], carry_state=False)
    assert not np.allclose(stateless[1:], expected["conv-0"][1:], rtol=1e-3), "state changes the answers"


def test_interleaved_conversations_on_one_grpc_stream(server, conversations):
    convs, expected = conversations
    import queue
    answers = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        n = len(next(iter(convs.values())))
        for i in range(n):  # chunk i of every conversation, then chunk i + 1, ...
            for cid, chunks in convs.items():
                c.async_stream_infer("silero_vad", inputs(grpcclient, chunks[i]), request_id=f"{cid}/{i}",
                                     sequence_id=cid, sequence_start=i == 0, sequence_end=i == n - 1)
        got = {}
        for _ in range(n * len(convs)):
            r, e = answers.get(timeout=60)
            assert e is None, e.message()
            got[r.get_response().id] = float(r.as_numpy("output")[0][0])
    finally:
        c.stop_stream()
        c.close()
    for cid in convs:
        np.testing.assert_allclose([got[f"{cid}/{i}"] for i in range(len(convs[cid]))], expected[cid],
                                   rtol=1e-5, atol=1e-6, err_msg=cid)
