"""Custom backends written in C against Triton's backend API load in Tritium unchanged, through
the same host as Triton's Python backend.

- `vecop` (examples/custom_backend/vecop.c, built by its build.sh with the system compiler): a
  dynamically batched vector operation and a decoupled model, with a model config parameter,
  request parameters and a custom metric on /metrics.
  `vecop_accumulate` is a sequence model keeping its sum in implicit state (the state API).
- `faulty` (tests/fixtures/backends/faulty.c), built under several names: a backend for a newer
  API version, one whose Initialize fails, and models whose ModelInitialize or
  ModelInstanceInitialize fails, or whose requests are never answered, released without a
  response, or never returned from Execute. Each fails its own model's load (with the reason in
  the repository index) or its own request, and every other model keeps serving.
"""
import queue
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, Server, wait_until

EXAMPLE = REPO_ROOT / "examples" / "custom_backend"
FAULTY = Path(__file__).resolve().parent / "fixtures" / "backends" / "faulty.c"

# The faulty backend's builds: backend name -> extra compiler flags.
FAULTY_BUILDS = {
    "faulty": [],
    "faulty_newer_api": ["-DFAULTY_API_MINOR=99"],
    "faulty_init": ["-DFAULTY_FAIL_INITIALIZE"],
}


def faulty_config(name, backend="faulty", fail=None):
    params = f'parameters {{ key: "fail" value {{ string_value: "{fail}" }} }}\n' if fail else ""
    return (f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
            'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' + params)


FAULTY_MODELS = {
    "faulty_ok": faulty_config("faulty_ok"),
    "fails_model_initialize": faulty_config("fails_model_initialize", fail="model_initialize"),
    "fails_instance_initialize": faulty_config("fails_instance_initialize", fail="instance_initialize"),
    "needs_newer_api": faulty_config("needs_newer_api", backend="faulty_newer_api"),
    "fails_backend_initialize": faulty_config("fails_backend_initialize", backend="faulty_init"),
    "missing_backend": faulty_config("missing_backend", backend="nosuch"),
}


@pytest.fixture(scope="module")
def backend_dir(tmp_path_factory):
    """The example and the faulty builds, compiled here, in a Triton backend directory."""
    out = tmp_path_factory.mktemp("backends")
    subprocess.run(["bash", str(EXAMPLE / "build.sh"), str(out)], check=True)
    for name, flags in FAULTY_BUILDS.items():
        (out / name).mkdir()
        subprocess.run(["cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                        "-fvisibility=hidden", f"-I{EXAMPLE}", *flags, "-o",
                        str(out / name / f"libtriton_{name}.so"), str(FAULTY)], check=True)
    return out


def make_repo(dest: Path, faulty=True) -> Path:
    shutil.copytree(EXAMPLE / "models", dest)
    # vecop_add, slower: requests sent together queue behind the first and batch.
    (dest / "vecop_slow" / "1").mkdir(parents=True)
    config = (dest / "vecop_add" / "config.pbtxt").read_text().replace('"vecop_add"', '"vecop_slow"')
    (dest / "vecop_slow" / "config.pbtxt").write_text(
        config + 'parameters { key: "execute_delay_ms" value { string_value: "100" } }\n')
    # vecop_accumulate whose state has another output name than the one the backend writes.
    (dest / "vecop_misnamed_state" / "1").mkdir(parents=True)
    config = (dest / "vecop_accumulate" / "config.pbtxt").read_text()
    (dest / "vecop_misnamed_state" / "config.pbtxt").write_text(
        config.replace('"vecop_accumulate"', '"vecop_misnamed_state"').replace('"ACC_NEXT"', '"ACC_OTHER"'))
    if faulty:
        for name, config in FAULTY_MODELS.items():
            (dest / name / "1").mkdir(parents=True)
            (dest / name / "config.pbtxt").write_text(config)
    return dest


@pytest.fixture(scope="module")
def server(backend_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("custom_backend")
    repo = make_repo(base / "models")
    srv = Server(repo, log_dir=base, args=["--backend-directory", str(backend_dir), "--exit-on-error=false"])
    srv.start(wait_for="live")
    wait_until(lambda: srv.get("/v2/models/vecop_add/ready").status_code == 200, what="vecop_add ready")
    yield srv
    assert srv.stop() == 0, srv.log_tail()


def add(url, protocol, a, b, offset=None, client=None, model="vecop_add"):
    lib = httpclient if protocol == "http" else grpcclient
    own = client is None
    client = client or lib.InferenceServerClient(url)
    inputs = []
    for name, value in (("A", a), ("B", b)):
        t = lib.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    try:
        return client.infer(model, inputs, parameters=None if offset is None else {"offset": offset})
    finally:
        if own:
            client.close()


def stats(srv, model):
    s = srv.get(f"/v2/models/{model}/stats").json()["model_stats"][0]
    return s["inference_count"], s["execution_count"]


def elements_metric(srv, model):
    for line in requests.get(srv.metrics_url).text.splitlines():
        if line.startswith(f'vecop_elements_total{{model="{model}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_c_backend_computes_with_its_config_and_request_parameters(server, protocol):
    url = server.http_url if protocol == "http" else server.grpc_url
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[10, 20, 30, 40]], dtype=np.float32)
    np.testing.assert_array_equal(add(url, protocol, a, b).as_numpy("OUT"), 2 * (a + b))
    np.testing.assert_array_equal(add(url, protocol, a, b, offset=5).as_numpy("OUT"), 2 * (a + b) + 5)
    with pytest.raises(InferenceServerException, match="parameter 'offset' must be a number"):
        add(url, protocol, a, b, offset="five")


def test_one_bad_request_of_a_dynamic_batch_fails_alone(server):
    before_count, before_exec = stats(server, "vecop_slow")
    before_elements = elements_metric(server, "vecop_slow") or 0.0
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    try:
        pending = []
        for i in range(6):
            a = np.full((1, 3), i, dtype=np.float32)
            b = np.ones((1, 3), dtype=np.float32)
            inputs = []
            for name, value in (("A", a), ("B", b)):
                t = httpclient.InferInput(name, [1, 3], "FP32")
                t.set_data_from_numpy(value)
                inputs.append(t)
            offset = "bad" if i == 3 else i
            pending.append(client.async_infer("vecop_slow", inputs, parameters={"offset": offset}))
        outcomes = []
        for p in pending:
            try:
                outcomes.append(p.get_result().as_numpy("OUT"))
            except InferenceServerException as e:
                outcomes.append(e)
    finally:
        client.close()
    for i, outcome in enumerate(outcomes):
        if i == 3:
            assert isinstance(outcome, InferenceServerException), outcome
            assert "parameter 'offset' must be a number" in outcome.message()
        else:
            np.testing.assert_array_equal(outcome, np.full((1, 3), 2 * (i + 1) + i, dtype=np.float32))
    count, executions = stats(server, "vecop_slow")
    assert count - before_count == 5, "five successes"
    assert executions - before_exec < 6, "the requests were batched"
    assert elements_metric(server, "vecop_slow") - before_elements == 15, "the custom metric counts elements"


def test_the_decoupled_c_model_streams_one_response_per_element(server):
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    values = np.array([1, -2, 0.5], dtype=np.float32)
    t = grpcclient.InferInput("IN", [3], "FP32")
    t.set_data_from_numpy(values)
    got = []
    try:
        client.async_stream_infer("vecop_stream", [t], enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=20)
            assert error is None, error
            response = result.get_response()
            if response.outputs:
                got.append(result.as_numpy("OUT").tolist())
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert got == [[3.0], [-6.0], [1.5]]
    assert elements_metric(server, "vecop_stream") >= 3


def test_failing_backends_fail_their_own_load_with_the_reason(server):
    index = {m["name"]: m for m in server.post("/v2/repository/index").json()}
    expected = {
        "fails_model_initialize": "faulty: ModelInitialize fails, as the config asks",
        "fails_instance_initialize": "faulty: ModelInstanceInitialize fails, as the config asks",
        "needs_newer_api": "triton backend API version does not support this backend: the server has 1.19, "
                           "faulty needs 1.99",
        "fails_backend_initialize": "failed to initialize backend 'faulty_init': faulty: Initialize fails",
        "missing_backend": "backend 'nosuch' is not available",
    }
    for model, reason in expected.items():
        assert index[model]["state"] == "UNAVAILABLE", index[model]
        assert reason in index[model]["reason"], (model, index[model]["reason"])
    for model in ("faulty_ok", "vecop_add", "vecop_stream"):
        assert index[model]["state"] == "READY", index[model]
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([0], dtype=np.int32))
    assert server.client.infer("faulty_ok", [x]).as_numpy("OUT").tolist() == [0]


def faulty_infer(server, x, timeout_us=None):
    body = {"inputs": [{"name": "X", "shape": [1], "datatype": "INT32", "data": [x]}]}
    if timeout_us is not None:
        body["parameters"] = {"timeout": timeout_us}
    return server.post("/v2/models/faulty_ok/infer", json=body)


def test_a_request_the_backend_never_answers_fails_on_its_timeout(server):
    started = time.monotonic()
    r = faulty_infer(server, 1, timeout_us=300_000)
    assert r.status_code != 200 and "sent no final response within the request's timeout" in r.json()["error"]
    assert time.monotonic() - started < 10
    r = faulty_infer(server, 3)
    assert r.status_code == 500 and "released the request without a final response" in r.json()["error"], r.text
    assert faulty_infer(server, 0).json()["outputs"][0]["data"] == [0], "the instance serves on"


def test_an_execute_that_never_returns_fails_its_request_and_the_instance_is_replaced(server):
    r = faulty_infer(server, 2, timeout_us=300_000)
    assert r.status_code != 200 and "did not return from execute within the request's timeout" in r.json()["error"]
    wait_until(lambda: faulty_infer(server, 0, timeout_us=5_000_000).status_code == 200, timeout=30,
               what="a replaced instance answers")
    restarts = [line for line in requests.get(server.metrics_url).text.splitlines()
                if line.startswith("tritium_instance_restarts") and 'model="faulty_ok"' in line]
    assert restarts and not all(line.endswith(" 0") for line in restarts), restarts
    add(server.http_url, "http", np.ones((1, 2), np.float32), np.ones((1, 2), np.float32))


def test_finalize_runs_when_the_last_model_of_a_backend_unloads_and_at_shutdown(backend_dir, tmp_path):
    repo = make_repo(tmp_path / "models", faulty=False)
    srv = Server(repo, log_dir=tmp_path, args=["--backend-directory", str(backend_dir),
                                               "--model-control-mode", "explicit", "--load-model", "vecop_add"])
    srv.start()
    try:
        ones = np.ones((1, 2), np.float32)
        add(srv.http_url, "http", ones, ones)
        assert srv.post("/v2/repository/models/vecop_add/unload").status_code == 200
        wait_until(lambda: "vecop: backend finalized" in srv.log_tail(100_000), what="Finalize on unload")
        assert srv.post("/v2/repository/models/vecop_add/load").status_code == 200
        np.testing.assert_array_equal(add(srv.http_url, "http", ones, ones).as_numpy("OUT"), 4 * ones)
    finally:
        assert srv.stop() == 0, srv.log_tail()
    log = srv.log_path.read_text()
    assert log.count("vecop: backend initialized") == 2, log
    assert log.count("vecop: backend finalized") == 2, log


def run_sequence(url, protocol, model, corr, steps):
    """OUT of each step (IN, start, end) of sequence `corr`, or the error text of a failed one."""
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(url)
    answers = []
    try:
        for values, start, end in steps:
            t = lib.InferInput("IN", [len(values)], "FP32")
            t.set_data_from_numpy(np.array(values, dtype=np.float32))
            try:
                r = client.infer(model, [t], sequence_id=corr, sequence_start=start, sequence_end=end)
            except InferenceServerException as e:
                answers.append(e.message())
                continue
            outputs = r.get_response()["outputs"] if protocol == "http" else r.get_response(as_json=True)["outputs"]
            answers.append(([o["name"] for o in outputs], r.as_numpy("OUT").tolist()))
    finally:
        client.close()
    return answers


STATE_STEPS = [([1, 2, 3], True, False), ([1, 1, 1], False, False), ([0, 0, 1], False, True)]


def state_answers(url_of, protocol):
    """Two sequences interleaved on vecop_accumulate, then one on the misnamed state."""
    url = url_of(protocol)
    first = run_sequence(url, protocol, "vecop_accumulate", 11, STATE_STEPS[:1])
    other = run_sequence(url, protocol, "vecop_accumulate", 12, [([5, 5, 5], True, True)])
    first += run_sequence(url, protocol, "vecop_accumulate", 11, STATE_STEPS[1:])
    misnamed = run_sequence(url, protocol, "vecop_misnamed_state", 13, [([1, 1, 1], True, True)])
    return first, other, misnamed


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_keeps_its_sum_in_implicit_state_through_the_state_api(server, protocol):
    first, other, misnamed = state_answers(lambda p: server.http_url if p == "http" else server.grpc_url, protocol)
    # OUT = ACC + 2 * IN; the state output stays the server's (the client gets OUT only).
    assert first == [(["OUT"], [2, 4, 6]), (["OUT"], [4, 6, 8]), (["OUT"], [4, 6, 10])]
    assert other == [(["OUT"], [10, 10, 10])], "a new sequence starts from the initial state"
    assert len(misnamed) == 1 and "state 'ACC_NEXT' is not a valid state name." in misnamed[0], misnamed


def test_the_state_api_answers_as_in_triton(backend_dir, tmp_path):
    """The same library and models in real Triton 2.51 (from the nvidia-pytriton wheel)."""
    triton_module = pytest.importorskip("test_python_backend")
    repo = tmp_path / "models"
    make_repo(tmp_path / "all", faulty=False)
    for name in ("vecop_accumulate", "vecop_misnamed_state"):
        shutil.copytree(tmp_path / "all" / name, repo / name)
    srv = Server(repo, log_dir=tmp_path, args=["--backend-directory", str(backend_dir)]).start()
    triton = triton_module.Triton(repo, tmp_path, args=["--backend-directory", str(backend_dir)])
    try:
        for protocol in ("http", "grpc"):
            ours = state_answers(lambda p: srv.http_url if p == "http" else srv.grpc_url, protocol)
            theirs = state_answers(lambda p: triton.http_url if p == "http" else triton.grpc_url, protocol)
            assert ours == theirs
    finally:
        triton.stop()
        assert srv.stop() == 0, srv.log_tail()
