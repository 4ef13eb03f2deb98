"""Child traces in Triton's trace mode, in Tritium as in real Triton 2.51 (the wheel's
`tritonserver`, same Python backend, same model.py): a BLS call made with its request's trace
(`pb_utils.InferenceRequest(..., trace=request.trace())`) and an ensemble's step are traced as
children of the request, so the trace file has the called model's record naming the caller's
trace id as its `parent_id`, with the same points as Triton's, written before the caller's.
"""
import glob
import json
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from helpers import Server, wait_until
from test_python_backend import MODELS, Triton, stub_env

BLS_MODELS = MODELS.parent / "bls_models"
ENSEMBLE = """name: "ens_add_sub"
platform: "ensemble"
max_batch_size: 0
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" }
} ] }
"""


def trace_args(path):
    return ["--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("child_traces")
    repo = base / "models"
    shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    shutil.copytree(BLS_MODELS / "bls_traced", repo / "bls_traced")
    (repo / "ens_add_sub" / "1").mkdir(parents=True)
    (repo / "ens_add_sub" / "config.pbtxt").write_text(ENSEMBLE)
    files = {"tritium": base / "tritium.json", "triton": base / "triton.json"}
    tritium = Server(repo, args=trace_args(files["tritium"]), log_dir=base, env=stub_env()).start(timeout=180)
    triton = Triton(repo, base, args=trace_args(files["triton"]), timeout=180)
    # One file per trace (Triton writes its file at exit otherwise).
    for srv in (tritium, triton):
        r = requests.post(f"http://{srv.http_url}/v2/trace/setting", json={"log_frequency": "1"}, timeout=5)
        assert r.ok, r.text
    yield {"tritium": (tritium, files["tritium"]), "triton": (triton, files["triton"])}
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def call(url, model, names, outputs, request_id):
    client = httpclient.InferenceServerClient(url)
    inputs = []
    for name, value in zip(names, (np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32))):
        t = httpclient.InferInput(name, [4], "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    try:
        result = client.infer(model, inputs, request_id=request_id)
        return [result.as_numpy(o) for o in outputs]
    finally:
        client.close()


def trace_of(prefix, request_id):
    """(heads in file order, {id: [point names in file order]}) of the trace file holding the
    request `request_id`'s trace; None while it is not (completely) written."""
    for path in sorted(glob.glob(f"{prefix}.*")):
        try:
            recs = json.loads(open(path).read())
        except ValueError:  # being written
            continue
        heads = [r for r in recs if "model_name" in r]
        if any(h.get("request_id") == request_id and "parent_id" not in h for h in heads):
            points = {}
            for r in recs:
                for t in r.get("timestamps", []):
                    points.setdefault(r["id"], []).append(t["name"])
            return heads, points
    return None


def child_and_caller(servers, request_id, caller):
    """Each server's (child head, caller head, child's points), after checking the records."""
    got = {}
    for name, (_, prefix) in servers.items():
        heads, points = wait_until(lambda: trace_of(prefix, request_id), timeout=30, what=f"{name}'s trace file")
        assert len(heads) == 2, (name, heads)
        child, parent = heads
        assert parent == {"id": parent["id"], "model_name": caller, "model_version": 1, "request_id": request_id}, name
        assert child["id"] != parent["id"] and child["parent_id"] == parent["id"], (name, heads)
        assert child["model_name"] == "add_sub" and child["model_version"] == 1, (name, child)
        assert points[child["id"]][0] == "REQUEST_START" and points[child["id"]][-1] == "REQUEST_END", name
        got[name] = (child, parent, points[child["id"]])
    return got


def test_a_bls_call_with_its_requests_trace_is_its_child_as_in_triton(servers):
    answers = {}
    for name, (srv, _) in servers.items():
        answers[name] = call(srv.http_url, "bls_traced", ("INPUT0", "INPUT1"), ("SUM", "CONTEXT"), "bls-1")
    np.testing.assert_array_equal(answers["tritium"][0], np.arange(4, dtype=np.float32) + 1)
    np.testing.assert_array_equal(answers["tritium"][0], answers["triton"][0])
    assert answers["tritium"][1].tolist() == answers["triton"][1].tolist(), "the trace context model.py sees"
    got = child_and_caller(servers, "bls-1", "bls_traced")
    # The BLS request has no id of its own: none in its record, as in Triton.
    assert "request_id" not in got["tritium"][0] and "request_id" not in got["triton"][0]
    # The child's points are Triton's, in the same order.
    assert got["tritium"][2] == got["triton"][2]


def test_an_ensemble_step_is_a_child_record_as_in_triton(servers):
    for name, (srv, _) in servers.items():
        (total,) = call(srv.http_url, "ens_add_sub", ("A", "B"), ("SUM",), "ens-1")
        np.testing.assert_array_equal(total, np.arange(4, dtype=np.float32) + 1)
    got = child_and_caller(servers, "ens-1", "ens_add_sub")
    assert got["tritium"][0].get("request_id") == got["triton"][0].get("request_id"), got
    assert got["tritium"][2] == got["triton"][2]
