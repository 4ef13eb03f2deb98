"""A BLS call made with its request's trace (`pb_utils.InferenceRequest(..., trace=request.trace())`)
is traced as a child of that request, in Tritium as in real Triton 2.51 (the wheel's
`tritonserver`, same Python backend, same model.py): with Triton's trace mode on, the trace file
has the called model's record naming the caller's trace id as its `parent_id`, with the same
points as Triton's, written before the caller's record.
"""
import glob
import json
import shutil

import numpy as np
import requests
import tritonclient.http as httpclient

from helpers import Server, wait_until
from test_python_backend import MODELS, Triton, stub_env

BLS_MODELS = MODELS.parent / "bls_models"


def trace_args(path):
    return ["--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]


def call(url, request_id):
    client = httpclient.InferenceServerClient(url)
    inputs = []
    for name, value in (("INPUT0", np.arange(4, dtype=np.float32)), ("INPUT1", np.ones(4, dtype=np.float32))):
        t = httpclient.InferInput(name, [4], "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    try:
        result = client.infer("bls_traced", inputs, request_id=request_id)
        return result.as_numpy("SUM"), result.as_numpy("CONTEXT")
    finally:
        client.close()


def records(pattern):
    """Every record of the trace files matching `pattern`, file after file."""
    out = []
    for path in sorted(glob.glob(pattern)):
        out.extend(json.loads(open(path).read()))
    return out


def traced(recs):
    """(heads in file order, {id: [point names in file order]})."""
    heads = [r for r in recs if "model_name" in r]
    points = {}
    for r in recs:
        for t in r.get("timestamps", []):
            points.setdefault(r["id"], []).append(t["name"])
    return heads, points


def test_a_bls_call_with_its_requests_trace_is_its_child_as_in_triton(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    shutil.copytree(BLS_MODELS / "bls_traced", repo / "bls_traced")
    ours_file, theirs_file = tmp_path / "tritium.json", tmp_path / "triton.json"
    tritium = Server(repo, args=trace_args(ours_file), log_dir=tmp_path, env=stub_env()).start(timeout=180)
    triton = Triton(repo, tmp_path, args=trace_args(theirs_file), timeout=180)
    try:
        # One file per trace (Triton writes its file at exit otherwise).
        for srv in (tritium, triton):
            r = requests.post(f"http://{srv.http_url}/v2/trace/setting", json={"log_frequency": "1"}, timeout=5)
            assert r.ok, r.text
        ours, theirs = call(tritium.http_url, "bls-1"), call(triton.http_url, "bls-1")
        np.testing.assert_array_equal(ours[0], np.arange(4, dtype=np.float32) + 1)
        np.testing.assert_array_equal(ours[0], theirs[0])
        assert ours[1].tolist() == theirs[1].tolist(), "the trace context model.py sees"
        def both_written():
            try:
                return all(len(traced(records(f"{f}.*"))[0]) == 2 for f in (ours_file, theirs_file))
            except ValueError:  # a file being written
                return False
        wait_until(both_written, timeout=30, what="the caller's and the child's records in both trace files")
    finally:
        triton.stop()
        assert tritium.stop() == 0, tritium.log_tail()

    for name in (ours_file, theirs_file):
        heads, points = traced(records(f"{name}.*"))
        child, caller = heads
        assert caller == {"id": caller["id"], "model_name": "bls_traced", "model_version": 1, "request_id": "bls-1"}, name
        # The BLS request has no id of its own: none in its record.
        assert child == {"id": child["id"], "model_name": "add_sub", "model_version": 1,
                         "parent_id": caller["id"]}, name
        assert child["id"] != caller["id"]
        assert points[child["id"]][0] == "REQUEST_START" and points[child["id"]][-1] == "REQUEST_END", name
    ours_heads, ours_points = traced(records(f"{ours_file}.*"))
    theirs_heads, theirs_points = traced(records(f"{theirs_file}.*"))
    # The child's points are Triton's, in the same order.
    assert ours_points[ours_heads[0]["id"]] == theirs_points[theirs_heads[0]["id"]]
