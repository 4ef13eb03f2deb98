"""Triton's own Python backend (libtriton_python.so of nvidia-pytriton 0.7.0, i.e. Triton 2.51)
runs `backend: "python"` models in Tritium through the backend API host, unchanged. Every
request goes to Tritium and to real Triton 2.51 (the wheel's `tritonserver`, same backend
library, same model.py files from tests/fixtures/python_models/) over HTTP and gRPC with
tritonclient, and the answers must agree: outputs bit for bit, errors with the same text.

scripts/setup.sh installs the wheel into .pytriton/venv (with numpy<2, which the stub needs);
without it the module is skipped with that reason.
"""
import json
import os
import re
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

from helpers import REPO_ROOT, Server, copy_bundled_repo, free_ports

PT_VENV = REPO_ROOT / ".pytriton" / "venv"
SITE = PT_VENV / "lib" / "python3.11" / "site-packages"
BACKENDS = SITE / "pytriton" / "tritonserver" / "backends"
TRITONSERVER = SITE / "pytriton" / "tritonserver" / "bin" / "tritonserver"
MODELS = Path(__file__).resolve().parent / "fixtures" / "python_models"

if not (BACKENDS / "python" / "libtriton_python.so").is_file() or not (
        BACKENDS / "python" / "triton_python_backend_stub").is_file():
    pytest.skip(f"Triton's Python backend is not installed at {BACKENDS / 'python'} "
                "(scripts/setup.sh installs nvidia-pytriton 0.7.0 there)", allow_module_level=True)


def stub_env():
    """The stub embeds Python 3.11 and imports numpy<2 from the venv first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{PT_VENV / 'bin'}:{env.get('PATH', '')}"
    return env


class Triton:
    """Real Triton 2.51 from the wheel, on free ports, with the same backend directory."""

    def __init__(self, repo: Path, log_dir: Path, args=(), timeout=60.0):
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.log_path = log_dir / f"triton-{self.http_port}.log"
        env = stub_env()
        env["LD_LIBRARY_PATH"] = str(SITE / "nvidia_pytriton.libs")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(TRITONSERVER), "--model-repository", str(repo), "--backend-directory", str(BACKENDS),
             "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-port",
             str(self.metrics_port), "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
             "--exit-timeout-secs", "5", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if requests.get(f"http://127.0.0.1:{self.http_port}/v2/health/ready", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.proc.kill()
        raise TimeoutError(self.log_path.read_text())

    @property
    def http_url(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self):
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("python_backend")
    repo = base / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("README.md", "__pycache__"))
    tritium = Server(repo, log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(repo, base)
    yield tritium, triton
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def infer(url, protocol, model, inputs, outputs=None, parameters=None):
    """(outputs as numpy arrays by name, None) or (None, (status, error message)) for one request."""
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(url)
    tensors = []
    for name, array, datatype in inputs:
        t = lib.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        tensors.append(t)
    requested = [lib.InferRequestedOutput(o) for o in outputs] if outputs else None
    try:
        result = client.infer(model, tensors, outputs=requested, parameters=parameters)
    except InferenceServerException as e:
        return None, (e.status(), e.message())
    finally:
        client.close()
    names = [o["name"] for o in (result.get_response()["outputs"] if protocol == "http"
                                 else result.get_response(as_json=True)["outputs"])]
    return {n: result.as_numpy(n) for n in names}, None


def both(servers, protocol, model, inputs, outputs=None, parameters=None):
    """Tritium's answer, after checking that it is Triton's."""
    tritium, triton = servers
    url = {"http": lambda s: s.http_url, "grpc": lambda s: s.grpc_url}[protocol]
    ours = infer(url(tritium), protocol, model, inputs, outputs, parameters)
    theirs = infer(url(triton), protocol, model, inputs, outputs, parameters)
    assert ours[1] == theirs[1], f"errors differ: Tritium {ours[1]!r}, Triton {theirs[1]!r}"
    if theirs[0] is not None:
        assert ours[0] is not None and sorted(ours[0]) == sorted(theirs[0]), (ours, theirs)
        for name, value in theirs[0].items():
            assert ours[0][name].dtype == value.dtype and ours[0][name].shape == value.shape, name
            assert np.array_equal(ours[0][name], value), (name, ours[0][name], value)
    return ours


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_add_sub_answers_as_triton(servers, protocol):
    a = np.array([1.5, 2, 3, 4], dtype=np.float32)
    b = np.array([10, 20, 30, -40], dtype=np.float32)
    out, err = both(servers, protocol, "add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")])
    assert err is None
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_only_the_requested_output_comes_back(servers, protocol):
    a, b = np.ones(4, np.float32), np.full(4, 3, np.float32)
    out, err = both(servers, protocol, "add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], ["OUTPUT1"])
    assert err is None and list(out) == ["OUTPUT1"]
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_batch_keeps_its_rows(servers, protocol):
    a = np.arange(10, dtype=np.int32).reshape(2, 5)
    b = np.full((2, 5), 7, dtype=np.int32)
    out, err = both(servers, protocol, "add_sub_batch", [("INPUT0", a, "INT32"), ("INPUT1", b, "INT32")])
    assert err is None
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strings_round_trip(servers, protocol):
    text = np.array(["hello", "Tritium", "", "grüße"], dtype=np.object_)
    out, err = both(servers, protocol, "strings", [("TEXT", text, "BYTES")])
    assert err is None
    assert [t.decode() for t in out["UPPER"]] == ["HELLO", "TRITIUM", "", "GRÜSSE"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", [1, 2, 3])
def test_model_errors_reach_the_client_with_tritons_text(servers, protocol, mode):
    out, err = both(servers, protocol, "errors", [("MODE", np.array([mode], dtype=np.int32), "INT32")])
    assert out is None
    assert f"MODE {mode}" in err[1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_answers_after_an_error(servers, protocol):
    both(servers, protocol, "errors", [("MODE", np.array([3], dtype=np.int32), "INT32")])
    out, err = both(servers, protocol, "errors", [("MODE", np.array([4], dtype=np.int32), "INT32")])
    assert err is None
    np.testing.assert_array_equal(out["OUT"], np.array([40], dtype=np.int32))


def stream(url, model, inputs, expected, timeout=20.0):
    """The outputs of the responses to one request on a gRPC stream, until the final one."""
    import queue
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    tensors = []
    for name, array, datatype in inputs:
        t = grpcclient.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        tensors.append(t)
    client.async_stream_infer(model, tensors, enable_empty_final_response=True)
    got = []
    try:
        while True:
            result, error = results.get(timeout=timeout)
            assert error is None, error
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if response.outputs:
                got.append({o.name: result.as_numpy(o.name).tolist() for o in response.outputs})
            if final:
                break
            assert len(got) <= expected, got
    finally:
        client.stop_stream()
        client.close()
    return got


def test_a_decoupled_model_streams_its_responses_as_triton(servers):
    tritium, triton = servers
    values = np.array([3, -1, 7, 0], dtype=np.int32)
    ours = stream(tritium.grpc_url, "repeat", [("IN", values, "INT32")], len(values))
    theirs = stream(triton.grpc_url, "repeat", [("IN", values, "INT32")], len(values))
    assert ours == theirs == [{"OUT": [2 * int(v)]} for v in values]


@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_a_cancelled_stream_is_seen_by_request_is_cancelled(servers, server):
    """The client cancels a decoupled request after its first response; model.py, answering from
    a thread of its own, sees `request.is_cancelled()` and stops. The next request reports how
    the one before it ended."""
    srv = servers[0] if server == "tritium" else servers[1]
    import queue
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    n = grpcclient.InferInput("N", [1], "INT32")
    n.set_data_from_numpy(np.array([50], dtype=np.int32))
    client.async_stream_infer("ticker", [n])
    result, error = results.get(timeout=20)
    assert error is None and result.as_numpy("TICK").tolist() == [0]
    client.stop_stream(cancel_requests=True)
    client.close()
    time.sleep(1.0)  # Triton frees the instance before the ticking thread ends: let it see
    got = stream(srv.grpc_url, "ticker", [("N", np.array([1], dtype=np.int32), "INT32")], 1)
    previous = got[0]["PREVIOUS"][0].decode()
    assert previous.startswith("cancelled after"), previous

@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_dynamic_batching_hands_several_requests_to_one_execute(servers, server):
    srv = servers[0] if server == "tritium" else servers[1]
    client = httpclient.InferenceServerClient(srv.http_url, concurrency=8)
    # The slow first one holds the instance, so the others queue behind it whatever the
    # machine's load (a lone request on an idle instance runs at once).
    values = [100, 1, 2, 3, 4, 5]
    try:
        pending = []
        for value in values:
            x = httpclient.InferInput("X", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            pending.append(client.async_infer("batched", [x]))
            time.sleep(0.02 if value == 100 else 0)
        results = [p.get_result() for p in pending]
    finally:
        client.close()
    assert [int(r.as_numpy("Y")[0][0]) for r in results] == [v + 1 for v in values], "each request its own rows"
    counts = [int(r.as_numpy("N")[0][0]) for r in results]
    assert max(counts) > 1, f"model.py saw one request per execute: {counts}"



@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_an_error_response_in_a_dynamic_batch_fails_only_its_request(servers, server):
    srv = servers[0] if server == "tritium" else servers[1]
    client = httpclient.InferenceServerClient(srv.http_url, concurrency=8)
    try:
        pending = []
        for value in (100, 1, 2, -5, 4, 5):  # the slow first one holds the instance
            x = httpclient.InferInput("X", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            pending.append(client.async_infer("batched", [x]))
            time.sleep(0.02 if value == 100 else 0)
        outcomes = []
        for p in pending:
            try:
                outcomes.append(int(p.get_result().as_numpy("Y")[0][0]))
            except InferenceServerException as e:
                outcomes.append(e.message())
    finally:
        client.close()
    error = outcomes.pop(3)
    assert outcomes == [101, 2, 3, 5, 6], "the other requests of the batch succeed"
    found = re.search(r"X=-5 is refused \(one of (\d+) requests\)", error)
    assert found and int(found.group(1)) > 1, f"the bad request was batched with others: {error}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_parameters_reach_model_py(servers, protocol):
    params = {"p_str": "abc", "p_int": 5, "p_bool": True}
    out, err = both(servers, protocol, "inspect", [("X", np.array([1], dtype=np.int32), "INT32")], ["PARAMS"],
                    parameters=params)
    assert err is None
    assert json.loads(out["PARAMS"][0]) == params


def test_two_instances_are_two_stub_processes_and_model_py_logs_reach_the_log(servers):
    for srv in servers:
        client = httpclient.InferenceServerClient(srv.http_url, concurrency=4)
        try:
            pending = []
            for i in range(4):
                x = httpclient.InferInput("X", [1], "INT32")
                x.set_data_from_numpy(np.array([100 + i], dtype=np.int32))
                pending.append(client.async_infer("inspect", [x]))
            pids = {int(p.get_result().as_numpy("PID")[0]) for p in pending}
        finally:
            client.close()
        assert len(pids) == 2, pids
    assert "inspect saw X=100" in servers[0].log_tail(200_000)


def test_a_sequence_reaches_model_py_with_its_id_and_flags(servers):
    answers = []
    for srv in servers:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        got = []
        try:
            for value, start, end in ((1, True, False), (2, False, False), (3, False, True), (10, True, True)):
                x = grpcclient.InferInput("X", [1], "INT32")
                x.set_data_from_numpy(np.array([value], dtype=np.int32))
                r = client.infer("sequence", [x], sequence_id=42, sequence_start=start, sequence_end=end)
                got.append((int(r.as_numpy("ACC")[0]), int(r.as_numpy("CORR")[0]), int(r.as_numpy("FLAGS")[0])))
        finally:
            client.close()
        answers.append(got)
    assert answers[0] == answers[1] == [(1, 42, 1), (3, 42, 0), (6, 42, 2), (10, 42, 3)], answers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_complete_config_of_model_py_completes_the_config(servers, protocol):
    configs = []
    for srv in servers:
        config = requests.get(f"http://{srv.http_url}/v2/models/completed/config").json()
        configs.append((config["max_batch_size"], [(t["name"], t["data_type"], t["dims"]) for t in config["input"]],
                        [(t["name"], t["data_type"], t["dims"]) for t in config["output"]]))
    assert configs[0] == configs[1] == (4, [("IN", "TYPE_INT64", [2])], [("OUT", "TYPE_INT64", [2])]), configs
    x = np.array([[1, -2], [3, 4]], dtype=np.int64)
    out, err = both(servers, protocol, "completed", [("IN", x, "INT64")])
    assert err is None
    np.testing.assert_array_equal(out["OUT"], 3 * x)


def custom_samples(text):
    """The custom_* samples of a /metrics text, by name and labels."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("custom_")}


def test_custom_metrics_of_model_py_are_on_metrics_as_in_triton(servers):
    tritium, triton = servers
    for srv in servers:
        for x in (3.0, 20.0):
            out, err = infer(srv.http_url, "http", "custom_metrics", [("X", np.array([x], np.float32), "FP32")])
            assert err is None, err
    ours = custom_samples(requests.get(tritium.metrics_url).text)
    theirs = custom_samples(requests.get(f"http://127.0.0.1:{triton.metrics_port}/metrics").text)
    assert ours == theirs, (ours, theirs)
    assert ours['custom_x_total{model="custom_metrics"}'] == 23.0
    assert ours['custom_last_x{model="custom_metrics"}'] == 20.0
    assert ours['custom_x_count{model="custom_metrics"}'] == 2.0


def test_a_stub_that_dies_fails_its_request_then_the_instance_is_replaced(servers):
    """Triton 2.51 keeps the dead stub's instance and fails every later request ("Stub process
    'errors_0' is not healthy."); Tritium's supervisor replaces the instance instead."""
    tritium, triton = servers
    crash = [("MODE", np.array([9], dtype=np.int32), "INT32")]
    ours, theirs = infer(tritium.http_url, "http", "errors", crash), infer(triton.http_url, "http", "errors", crash)
    assert ours == theirs and ours[1][0] == "500", (ours, theirs)
    deadline = time.monotonic() + 60
    while True:
        out, err = infer(tritium.http_url, "http", "errors", [("MODE", np.array([5], dtype=np.int32), "INT32")])
        if err is None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert err is None, err
    np.testing.assert_array_equal(out["OUT"], np.array([50], dtype=np.int32))
    out, err = infer(tritium.http_url, "http", "add_sub", [("INPUT0", np.ones(4, np.float32), "FP32"),
                                                          ("INPUT1", np.ones(4, np.float32), "FP32")])
    assert err is None, "other models are unaffected"
    metrics = requests.get(tritium.metrics_url).text
    assert any(line.startswith("tritium_instance_restarts") and 'model="errors"' in line and not line.endswith(" 0")
               for line in metrics.splitlines()), "the restart is counted"


BROKEN = {
    "syntax_error": "class TritonPythonModel:\n    def execute(self, requests)\n        return []\n",
    "no_execute": "class TritonPythonModel:\n    def initialize(self, args):\n        pass\n",
}


def test_a_broken_model_py_fails_as_in_triton_and_the_others_serve(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    for model, source in BROKEN.items():
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "1" / "model.py").write_text(source)
        config = (MODELS / "errors" / "config.pbtxt").read_text().replace('"errors"', f'"{model}"')
        (repo / model / "config.pbtxt").write_text(config)
    args = ["--model-control-mode", "explicit", "--load-model", "add_sub"]
    tritium = Server(repo, log_dir=tmp_path, env=stub_env(), args=args).start(timeout=120)
    triton = Triton(repo, tmp_path, args=args)
    try:
        answers = []
        for srv in (tritium, triton):
            base = f"http://{srv.http_url}"
            load = requests.post(f"{base}/v2/repository/models/syntax_error/load")
            index = {m["name"]: m for m in requests.post(f"{base}/v2/repository/index").json()}
            assert requests.post(f"{base}/v2/repository/models/no_execute/load").status_code == 200
            infer = requests.post(f"{base}/v2/models/no_execute/infer", json={
                "inputs": [{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [0]}]})
            add = requests.post(f"{base}/v2/models/add_sub/infer", json={"inputs": [
                {"name": n, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]})
            answers.append((load.status_code, index["syntax_error"]["state"], index["syntax_error"]["reason"],
                            infer.status_code, infer.json()["error"], add.status_code))
        ours, theirs = answers
        assert ours == theirs, (ours, theirs)
        assert "SyntaxError" in ours[2] and "does not implement `execute`" in ours[4] and ours[5] == 200
    finally:
        triton.stop()
        assert tritium.stop() == 0, tritium.log_tail()


def test_execution_env_path_starts_the_stub_in_that_environment(tmp_path):
    """The Python backend handles EXECUTION_ENV_PATH itself (a folder with bin/activate here,
    `$$TRITON_MODEL_DIRECTORY` replaced); under Tritium it works as under Triton, with a server
    PATH that does not hold the venv."""
    repo = tmp_path / "models"
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "python_models_env" / "env_probe",
                    repo / "env_probe")
    (repo / "env_probe" / "env").symlink_to(PT_VENV.resolve())
    env = dict(os.environ)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    # --backend-directory given: Tritium leaves PATH alone (it puts the setup venv first only
    # for the default directory), so only EXECUTION_ENV_PATH brings the venv in.
    tritium = Server(repo, log_dir=tmp_path, env=env, args=["--backend-directory", str(BACKENDS)])
    tritium.start(timeout=120)
    triton = None
    try:
        triton = Triton(repo, tmp_path)
        prefixes = []
        for srv in (tritium, triton):
            out, err = infer(srv.http_url, "http", "env_probe", [("X", np.array([1], dtype=np.int32), "INT32")])
            assert err is None, err
            prefixes.append(Path(out["PREFIX"][0].decode()).resolve())
        assert prefixes[0] == prefixes[1] == PT_VENV.resolve(), prefixes
    finally:
        if triton:
            triton.stop()
        assert tritium.stop() == 0, tritium.log_tail()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_bundled_python_model_serves_in_its_ensemble_without_the_venv_on_path(tmp_path, protocol):
    """model_repository/'s animal_words (a model.py) feeds classify (ONNX) in text_classify, as
    scripts/serve.sh serves them. The server is started with a PATH that lacks the setup venv and
    with the default backend directory: it puts that venv first on PATH for the stub itself."""
    repo = copy_bundled_repo(tmp_path / "models", ["animal_words", "classify", "text_classify"])
    env = dict(os.environ)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    srv = Server(repo, log_dir=tmp_path, env=env).start(timeout=120)
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(srv.http_url if protocol == "http" else srv.grpc_url)
    try:
        text = lib.InferInput("TEXT", [1], "BYTES")
        text.set_data_from_numpy(np.array(["Two puppies chased a kitten past the dog bowl"], dtype=np.object_))
        scores = client.infer("text_classify", [text]).as_numpy("SCORES")
        counts = np.array([1, 2, 0, 0], dtype=np.float64)  # kitten; puppies, dog
        np.testing.assert_allclose(scores, np.exp(counts) / np.exp(counts).sum(), rtol=1e-5)
        top = client.infer("text_classify", [text], outputs=[lib.InferRequestedOutput("SCORES", class_count=1)])
        assert top.as_numpy("SCORES")[0].decode().endswith(":1:dog")
    finally:
        client.close()
        assert srv.stop() == 0, srv.log_tail()
    assert ".pytriton/venv/bin is first on PATH for the Python backend's stubs" in srv.log_path.read_text()
