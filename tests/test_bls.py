"""BLS (business logic scripting): a model.py calls other models through Triton's in-process
inference API (`pb_utils.InferenceRequest(...).exec()`, `async_exec()`, `exec(decoupled=True)`),
which Tritium's backend API host serves through its own schedulers. The BLS models are in
tests/fixtures/bls_models/; the models they call are the Python-backend fixtures (add_sub,
repeat, sequence, errors) and, in Tritium only, the bundled ONNX add_sub and the ensemble
text_classify (real Triton 2.51 from the wheel has no ONNX Runtime backend). Every answer is
compared with real Triton's over HTTP and gRPC where Triton can serve the models: outputs bit for
bit, error texts as Triton words them.
"""
import shutil

import numpy as np
import pytest
import requests

from helpers import Server, copy_bundled_repo, wait_until
from test_python_backend import MODELS, Triton, both, infer, stub_env

BLS_MODELS = MODELS.parent / "bls_models"
CALLEES = ("add_sub", "repeat", "sequence", "errors")
CALLERS = ("bls_add_sub", "bls_decoupled", "bls_errors", "bls_sequence")
PROTOCOLS = ["http", "grpc"]
# A dozen stubs start at once: on a busy machine each may take longer than the Python
# backend's default 30 s to come up.
STUB_TIMEOUT = ["--backend-config=python,stub-timeout-seconds=180"]
# The bundled ensemble (a Python model feeding an ONNX model) and its steps.
ENSEMBLE = ["text_classify", "animal_words", "classify"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("bls")
    repo = base / "models"
    for m in CALLEES:
        shutil.copytree(MODELS / m, repo / m)
    for m in CALLERS + ("bls_onnx", "bls_ensemble"):
        shutil.copytree(BLS_MODELS / m, repo / m)
    copy_bundled_repo(base / "bundled", ["add_sub"])
    copy_bundled_repo(repo, ENSEMBLE)
    onnx = repo / "add_sub_onnx"
    shutil.copytree(base / "bundled" / "add_sub", onnx)
    config = onnx / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', 'name: "add_sub_onnx"'))
    tritium = Server(repo, args=STUB_TIMEOUT, log_dir=base, env=stub_env()).start(timeout=300)
    # The same folder (model.py tracebacks name their path): Triton, without ONNX Runtime,
    # serves all but the ONNX models and what uses them.
    triton = Triton(repo, base, args=["--exit-on-error=false", "--strict-readiness=false", *STUB_TIMEOUT], timeout=300)
    yield tritium, triton
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def f32(*v):
    return np.array(v, dtype=np.float32)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sync_and_async_calls_answer_as_triton(servers, protocol):
    a, b = f32(1.5, 2, 3, 4), f32(10, 20, 30, -40)
    out, err = both(servers, protocol, "bls_add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")])
    assert err is None, err
    np.testing.assert_array_equal(out["SUM"], a + b)
    np.testing.assert_array_equal(out["DIFF"], a - b)
    np.testing.assert_array_equal(out["ASYNC_SUM"], 2 * a + b)
    np.testing.assert_array_equal(out["ASYNC_DIFF"], 2 * a - b)


def stats(server, model):
    body = requests.get(f"{server.base}/v2/models/{model}/stats", timeout=5).json()
    return body["model_stats"][0]["inference_stats"]["success"]["count"]


def test_bls_calls_go_through_the_called_models_scheduler(servers):
    tritium, _ = servers
    before = stats(tritium, "add_sub")
    out, err = infer(tritium.http_url, "http", "bls_add_sub", [("INPUT0", f32(1, 1, 1, 1), "FP32"),
                                                              ("INPUT1", f32(2, 2, 2, 2), "FP32")])
    assert err is None, err
    assert stats(tritium, "add_sub") == before + 3, "three BLS requests counted in add_sub's statistics"


def test_many_bls_requests_at_once_all_get_their_own_answer(servers):
    """32 clients at once, each BLS request making three calls: no call is lost or mixed up."""
    from concurrent.futures import ThreadPoolExecutor
    tritium, _ = servers

    def one(i):
        a, b = np.full(4, i, np.float32), np.arange(4, dtype=np.float32)
        out, err = infer(tritium.http_url, "http", "bls_add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")])
        assert err is None, err
        return all(np.array_equal(out[k], v) for k, v in
                   (("SUM", a + b), ("DIFF", a - b), ("ASYNC_SUM", 2 * a + b), ("ASYNC_DIFF", 2 * a - b)))

    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(one, range(64)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_py_calls_an_onnx_model_and_a_python_model(servers, protocol):
    tritium, _ = servers
    a = np.arange(16, dtype=np.float32)
    b = np.full(16, 0.5, dtype=np.float32)
    url = tritium.http_url if protocol == "http" else tritium.grpc_url
    out, err = infer(url, protocol, "bls_onnx", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")])
    assert err is None, err
    np.testing.assert_allclose(out["OUTPUT0"], a + b)
    np.testing.assert_allclose(out["OUTPUT1"], a - b)
    np.testing.assert_array_equal(out["PY_SUM"], a[:4] + b[:4])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bls_call_to_an_ensemble_answers_as_a_client_call_does(servers, protocol):
    tritium, _ = servers
    url = tritium.http_url if protocol == "http" else tritium.grpc_url
    text = np.array([b"Two puppies and a hound chased a kitten"], dtype=np.object_)
    direct, err = infer(url, protocol, "text_classify", [("TEXT", text, "BYTES")])
    assert err is None, err
    through_bls, err = infer(url, protocol, "bls_ensemble", [("TEXT", text, "BYTES")])
    assert err is None, err
    np.testing.assert_array_equal(through_bls["SCORES"], direct["SCORES"])
    assert int(np.argmax(direct["SCORES"])) == 1, "dog, the label the bundled example gives"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoupled_bls_streams_every_response_as_triton(servers, protocol):
    values = np.array([1, 2, 3], dtype=np.int32)
    out, err = both(servers, protocol, "bls_decoupled", [("IN", values, "INT32")])
    assert err is None, err
    np.testing.assert_array_equal(out["OUT"], values * 2)
    # Three responses, then the final flag alone (an empty response the iterator also gives).
    assert int(out["RESPONSES"][0]) == 4 and bool(out["LAST_EMPTY"][0])


CASES = {
    0: "unknown model",
    1: "wrong shape",
    2: "missing input",
    3: "the called model raises",
    4: "decoupled model without decoupled=True",
    5: "unknown output",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(CASES), ids=list(CASES.values()))
def test_a_failed_bls_call_reaches_model_py_with_tritons_text(servers, protocol, case):
    out, err = both(servers, protocol, "bls_errors", [("CASE", np.array([case], dtype=np.int32), "INT32")])
    assert err is None, err
    message = out["MESSAGE"][0].decode()
    assert message != "no error", CASES[case]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_error_model_py_raises_from_a_bls_answer_reaches_the_client(servers, protocol):
    out, err = both(servers, protocol, "bls_errors", [("CASE", np.array([100], dtype=np.int32), "INT32")])
    assert out is None and "no_such_model" in err[1], err


def test_the_server_serves_on_after_failed_bls_calls(servers):
    tritium, _ = servers
    for case in CASES:
        infer(tritium.http_url, "http", "bls_errors", [("CASE", np.array([case], dtype=np.int32), "INT32")])
    assert tritium.alive()
    out, err = infer(tritium.grpc_url, "grpc", "bls_add_sub", [("INPUT0", f32(1, 2, 3, 4), "FP32"),
                                                              ("INPUT1", f32(1, 1, 1, 1), "FP32")])
    assert err is None, err
    np.testing.assert_array_equal(out["SUM"], f32(2, 3, 4, 5))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_sequence_through_bls_keeps_its_correlation_id_and_flags(servers, protocol):
    corr = 77 if protocol == "http" else 78
    seen = []
    for x, flags in [(1, 1), (2, 0), (3, 2)]:
        inputs = [("X", np.array([x], np.int32), "INT32"), ("CORR", np.array([corr], np.uint64), "UINT64"),
                  ("FLAGS", np.array([flags], np.uint32), "UINT32")]
        out, err = both(servers, protocol, "bls_sequence", inputs)
        assert err is None, err
        seen.append((int(out["ACC"][0]), int(out["CORR"][0]), int(out["FLAGS"][0])))
    assert seen == [(1, corr, 1), (3, corr, 0), (6, corr, 2)]


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    """Both servers with explicit model control, only bls_loader loaded at start."""
    base = tmp_path_factory.mktemp("bls_explicit")
    repo = base / "models"
    shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    shutil.copytree(BLS_MODELS / "bls_loader", repo / "bls_loader")
    args = ["--model-control-mode=explicit", "--load-model=bls_loader"]
    tritium = Server(repo, args=args, log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(repo, base, args=args)
    yield tritium, triton
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def test_model_py_loads_and_unloads_models_as_triton(explicit):
    tritium, _ = explicit

    def act(action):
        out, err = both(explicit, "http", "bls_loader", [("ACTION", np.array([action], np.int32), "INT32")])
        assert err is None, err
        return bool(out["READY"][0]), out["MESSAGE"][0].decode()

    def ready_in(server):
        out, err = infer(server.http_url, "http", "bls_loader", [("ACTION", np.array([0], np.int32), "INT32")])
        assert err is None, err
        return bool(out["READY"][0])

    def unload():
        # As in Triton, the unload starts and the call returns; the model goes a moment later
        # (at its own pace in each server).
        assert act(2)[1] == "ok"
        for server in explicit:
            wait_until(lambda: not ready_in(server), timeout=60, what="add_sub unloaded", interval=0.5)

    assert act(0) == (False, "ok")
    assert act(1) == (True, "ok")
    out, err = infer(tritium.grpc_url, "grpc", "add_sub", [("INPUT0", f32(1, 2, 3, 4), "FP32"),
                                                         ("INPUT1", f32(1, 1, 1, 1), "FP32")])
    assert err is None, err
    np.testing.assert_array_equal(out["OUTPUT1"], f32(0, 1, 2, 3))
    unload()
    assert act(3) == (True, "ok")
    unload()
    # ACTION 4 (loading a model the repository lacks) is left out: Triton 2.51's Python backend
    # aborts the server process (boost::interprocess::lock_exception) after such failed loads,
    # in real Triton as in Tritium (seen here within three tries), so no test can rely on it.
