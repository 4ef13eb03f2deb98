"""A backend's own statistics (`TRITONBACKEND_ModelInstanceReportStatistics` and
`ReportBatchStatistics`) feed the model's statistics (`/v2/models/<m>/stats`) and the
`nv_inference_*` metrics, as in Triton: the same requests to the same Python models under
Tritium and under real Triton 2.51 (same backend library) give the same counts, and the compute
times are the backend's own. Triton's Python backend counts an error response that model.py
returns (`pb_utils.TritonError`) as a success and an exception in `execute` as a failure; so
must Tritium. The C example of examples/custom_backend reports its statistics the same way,
and its decoupled model each response (`ReportResponseStatistics`, the `response_stats`).
"""
import queue
import re
import shutil

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from helpers import Server
from test_custom_backend import add, backend_dir, make_repo  # noqa: F401 (backend_dir: a fixture)
from test_python_backend import BACKENDS, MODELS, Triton, infer, stub_env

MODELS_USED = ("errors", "add_sub", "batched")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("backend_stats")
    repo = base / "models"
    for m in MODELS_USED:
        shutil.copytree(MODELS / m, repo / m)
    tritium = Server(repo, log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(repo, base)
    yield {"tritium": tritium, "triton": triton}
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def stats(srv, model) -> dict:
    return requests.get(f"http://{srv.http_url}/v2/models/{model}/stats", timeout=5).json()["model_stats"][0]


def counts(s) -> dict:
    got = {"inference_count": int(s["inference_count"]), "execution_count": int(s["execution_count"])}
    for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        got[k] = int(s["inference_stats"][k]["count"])
    got["batches"] = sorted((int(b["batch_size"]), int(b["compute_infer"]["count"])) for b in s.get("batch_stats", []))
    return got


def metric(srv, name, model) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=5).text
    values = [float(l.split()[-1]) for l in text.splitlines()
              if l.startswith(name + "{") and f'model="{model}"' in l]
    return sum(values)


def run_errors(srv):
    """MODE 0 answers, 1 returns an error response, 2 and 3 raise in `execute`."""
    outcomes = []
    for protocol in ("http", "grpc"):
        for mode in (0, 1, 2, 3):
            url = srv.http_url if protocol == "http" else srv.grpc_url
            _, error = infer(url, protocol, "errors", [("MODE", np.array([mode], np.int32), "INT32")])
            outcomes.append(error is None)
    return outcomes


def test_error_responses_and_exceptions_are_counted_as_triton_counts_them(servers):
    seen = {name: run_errors(srv) for name, srv in servers.items()}
    assert seen["tritium"] == seen["triton"] == [True, False, False, False] * 2
    ours, theirs = counts(stats(servers["tritium"], "errors")), counts(stats(servers["triton"], "errors"))
    assert ours == theirs, (ours, theirs)
    # The error response counts as a success, the exceptions as failures.
    assert ours["success"] == 4 and ours["fail"] == 4 and ours["execution_count"] == 8, ours
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count"):
        assert metric(servers["tritium"], name, "errors") == metric(servers["triton"], name, "errors"), name


def test_compute_times_are_the_backends_own(servers):
    x = np.arange(4, dtype=np.float32)
    for name, srv in servers.items():
        for _ in range(3):
            _, error = infer(srv.http_url, "http", "add_sub", [("INPUT0", x, "FP32"), ("INPUT1", x, "FP32")])
            assert error is None, (name, error)
    ours, theirs = stats(servers["tritium"], "add_sub"), stats(servers["triton"], "add_sub")
    assert counts(ours) == counts(theirs), (counts(ours), counts(theirs))
    for s in (ours, theirs):
        st = s["inference_stats"]
        infer_ns = int(st["compute_infer"]["ns"])
        # model.py's execute runs in the stub process: it takes a measurable time, within the
        # request's end-to-end time.
        assert 0 < infer_ns <= int(st["success"]["ns"]), st
        batch = s["batch_stats"][0]
        assert int(batch["batch_size"]) == 1 and int(batch["compute_infer"]["count"]) == 3, batch


def test_a_dynamic_batch_is_one_execution_of_its_size(servers):
    """Requests sent one after another: each is its own execution of batch size 1 (the
    batched model holds a batch 200 ms, so a concurrent test would race on how they group)."""
    for name, srv in servers.items():
        for i in range(3):
            got, error = infer(srv.http_url, "http", "batched", [("X", np.array([[i]], np.int32), "INT32")])
            assert error is None and got["N"].tolist() == [[1]], (name, got, error)
        _, error = infer(srv.http_url, "http", "batched", [("X", np.array([[-1]], np.int32), "INT32")])
        assert error is not None and "is refused" in error[1], (name, error)
    ours, theirs = counts(stats(servers["tritium"], "batched")), counts(stats(servers["triton"], "batched"))
    assert ours == theirs, (ours, theirs)
    assert ours["success"] == 4 and ours["batches"] == [(1, 4)], ours


def test_the_c_example_reports_its_statistics_as_in_triton(backend_dir, tmp_path):
    """examples/custom_backend's vecop reports each request and each execution; under Tritium
    and Triton 2.51 (same library) the counts agree, a failed request counted a failure."""
    repo = tmp_path / "models"
    make_repo(tmp_path / "all", faulty=False)
    shutil.copytree(tmp_path / "all" / "vecop_add", repo / "vecop_add")
    args = ["--backend-directory", str(backend_dir)]
    found = {}
    srv = Server(repo, log_dir=tmp_path, args=args).start()
    triton = Triton(repo, tmp_path, args=args)
    try:
        for name, s in (("tritium", srv), ("triton", triton)):
            for rows, protocol in ((1, "http"), (2, "grpc"), (3, "http")):
                value = np.ones((rows, 4), np.float32)
                add(s.http_url if protocol == "http" else s.grpc_url, protocol, value, value)
            with pytest.raises(Exception, match="shape"):
                add(s.http_url, "http", np.ones((1, 4), np.float32), np.ones((1, 3), np.float32))
            found[name] = counts(stats(s, "vecop_add"))
    finally:
        triton.stop()
        assert srv.stop() == 0, srv.log_tail()
    assert found["tritium"] == found["triton"], found
    assert found["tritium"]["success"] == 3 and found["tritium"]["fail"] == 1, found
    assert found["tritium"]["batches"] == [(1, 1), (2, 1), (3, 1)], found


def stream(url, model, name, values, datatype):
    """Sends one request on a gRPC stream; returns the outputs of its responses."""
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    t = grpcclient.InferInput(name, [len(values)], datatype)
    t.set_data_from_numpy(values)
    got = []
    try:
        client.async_stream_infer(model, [t], enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.outputs:
                got.append(result.as_numpy("OUT").tolist())
            if response.parameters["triton_final_response"].bool_param:
                return got
    finally:
        client.stop_stream()
        client.close()


def response_counts(srv, model):
    """{index: {figure: count}} of the model's response_stats, over HTTP, after checking that
    gRPC's statistics say the same."""
    http = stats(srv, model).get("response_stats", {})
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        grpc = client.get_inference_statistics(model, as_json=True)["model_stats"][0].get("response_stats", {})
    finally:
        client.close()
    got = {i: {k: int(v.get("count", 0)) for k, v in figures.items()} for i, figures in http.items()}
    assert got == {i: {k: int(v.get("count", 0)) for k, v in f.items()} for i, f in grpc.items()}, (http, grpc)
    for figures in http.values():
        # Durations are the backend's timestamps: a counted success took some time.
        assert int(figures["success"].get("count", 0)) == 0 or int(figures["success"]["ns"]) > 0, figures
    return got


def test_a_decoupled_models_response_statistics_are_the_backends_as_in_triton(backend_dir, tmp_path):
    """The C example's decoupled vecop_stream reports each response
    (`TRITONBACKEND_ModelInstanceReportResponseStatistics`), the final flag alone as an empty
    response; Triton 2.51's Python backend reports none, so a decoupled model.py has no
    response statistics. Under Tritium and Triton (same libraries) the statistics agree."""
    repo = tmp_path / "models"
    make_repo(tmp_path / "all", faulty=False)
    shutil.copytree(tmp_path / "all" / "vecop_stream", repo / "vecop_stream")
    shutil.copytree(MODELS / "repeat", repo / "repeat")
    # One backend directory with both backends.
    backends = tmp_path / "backends"
    shutil.copytree(backend_dir / "vecop", backends / "vecop")
    (backends / "python").symlink_to(BACKENDS / "python")  # its RPATH finds its libraries from there
    args = ["--backend-directory", str(backends)]
    found = {}
    srv = Server(repo, log_dir=tmp_path, args=args, env=stub_env()).start(timeout=120)
    triton = Triton(repo, tmp_path, args=args)
    try:
        for name, s in (("tritium", srv), ("triton", triton)):
            for values in ([1, 2, 3], [4, 5]):
                got = stream(s.grpc_url, "vecop_stream", "IN", np.array(values, np.float32), "FP32")
                assert got == [[3.0 * v] for v in values], (name, got)
            assert stream(s.grpc_url, "repeat", "IN", np.array([7, 8], np.int32), "INT32") == [[14], [16]], name
            found[name] = (response_counts(s, "vecop_stream"), response_counts(s, "repeat"))
    finally:
        triton.stop()
        assert srv.stop() == 0, srv.log_tail()
    assert found["tritium"] == found["triton"], found
    vecop, repeat = found["tritium"]
    blank = {"compute_infer": 0, "compute_output": 0, "success": 0, "fail": 0, "empty_response": 0, "cancel": 0}
    # Responses 0 and 1 of both requests, 2 of the first; the final flag is response 3 of the
    # first request and 2 of the second.
    expected = {
        "0": {**blank, "compute_infer": 2, "compute_output": 2, "success": 2},
        "1": {**blank, "compute_infer": 2, "compute_output": 2, "success": 2},
        "2": {**blank, "compute_infer": 2, "compute_output": 1, "success": 1, "empty_response": 1},
        "3": {**blank, "compute_infer": 1, "empty_response": 1},
    }
    assert vecop == expected, vecop
    assert repeat == {}, repeat
