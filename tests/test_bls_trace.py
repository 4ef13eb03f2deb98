"""Child traces in Triton's trace mode, in Tritium as in real Triton 2.51 (the wheel's
`tritonserver`, same Python backend, same model.py): a BLS call made with its request's trace
(`pb_utils.InferenceRequest(..., trace=request.trace())`) and an ensemble's step are traced as
children of the request, so the trace file has the called model's record naming the caller's
trace id as its `parent_id`, with the same points as Triton's, written before the caller's. In
OpenTelemetry mode the call is a span under its caller's model span, and model.py is handed the
W3C context of that span, as in Triton.
"""
import glob
import json
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from helpers import Server, wait_until
from otlp_receiver import Receiver, attributes
from test_opentelemetry import otel_args
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


def call(url, model, names, outputs, request_id, headers=None):
    client = httpclient.InferenceServerClient(url)
    inputs = []
    for name, value in zip(names, (np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32))):
        t = httpclient.InferInput(name, [4], "FP32")
        t.set_data_from_numpy(value)
        inputs.append(t)
    try:
        result = client.infer(model, inputs, request_id=request_id, headers=headers)
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


def caller_points(prefix, request_id):
    heads, points = trace_of(prefix, request_id)
    caller = next(h for h in heads if "parent_id" not in h)
    return points[caller["id"]]


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
    # The child's points are Triton's, in the same order; the caller has Triton's points (Triton
    # writes them in the order they were reported, the backend's compute points last).
    assert got["tritium"][2] == got["triton"][2]
    callers = {name: caller_points(prefix, "bls-1") for name, (_, prefix) in servers.items()}
    assert sorted(callers["tritium"]) == sorted(callers["triton"]), callers


def test_an_ensemble_step_is_a_child_record_as_in_triton(servers):
    for name, (srv, _) in servers.items():
        (total,) = call(srv.http_url, "ens_add_sub", ("A", "B"), ("SUM",), "ens-1")
        np.testing.assert_array_equal(total, np.arange(4, dtype=np.float32) + 1)
    got = child_and_caller(servers, "ens-1", "ens_add_sub")
    assert got["tritium"][0].get("request_id") == got["triton"][0].get("request_id"), got
    assert got["tritium"][2] == got["triton"][2]
    # The ensemble's own record: its steps computed, not it, so no compute points, as in Triton.
    callers = {name: caller_points(prefix, "ens-1") for name, (_, prefix) in servers.items()}
    assert not [p for p in callers["tritium"] if p.startswith("COMPUTE_")], callers
    assert sorted(callers["tritium"]) == sorted(callers["triton"]), callers


CLIENT_TRACE = "0af7651916cd43dd8448eb211c12666c"


def span_tree(spans):
    """Each span as (name, its parent's name or 'client', events, attributes without the ids
    that differ between runs), sorted: what two servers' traces must agree on."""
    by_id = {s.span_id: s for s in spans}
    out = []
    for s in spans:
        parent = by_id.get(s.parent_span_id)
        attrs = {k: v for k, v in attributes(s.attributes).items() if k not in ("triton.trace_id", "triton.trace_parent_id")}
        out.append((s.name, parent.name if parent else "client", [e.name for e in s.events], sorted(attrs.items())))
    return sorted(out, key=repr)


def test_in_opentelemetry_mode_a_bls_call_is_a_span_under_its_caller_as_in_triton(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "add_sub", repo / "add_sub")
    shutil.copytree(BLS_MODELS / "bls_traced", repo / "bls_traced")
    got = {}
    for name in ("triton", "tritium"):
        with Receiver(json=True) as rx:
            args = otel_args(rx.url, "rate=1")
            srv = (Triton(repo, tmp_path, args=args, timeout=180) if name == "triton"
                   else Server(repo, args=args, log_dir=tmp_path, env=stub_env()).start(timeout=180))
            try:
                total, context = call(srv.http_url, "bls_traced", ("INPUT0", "INPUT1"), ("SUM", "CONTEXT"), "otel-1",
                                      headers={"traceparent": f"00-{CLIENT_TRACE}-b7ad6b7169242424-01"})
                np.testing.assert_array_equal(total, np.arange(4, dtype=np.float32) + 1)
                wait_until(lambda: rx.count() >= 5, timeout=30, what=f"{name}'s 5 spans")
            finally:
                stopped = srv.stop()
            assert name == "triton" or stopped == 0, srv.log_tail()
            spans = [s for _, _, s in rx.all()]
            got[name] = (span_tree(spans), spans, json.loads(context[0]))
    assert got["tritium"][0] == got["triton"][0]
    names = [n for n, *_ in got["tritium"][0]]
    assert sorted(names) == ["InferRequest", "add_sub", "bls_traced", "compute", "compute"], names
    # model.py's `request.trace().get_context()`: the W3C context of its own model's span, in
    # the client's trace, so a model can pass it on to services it calls.
    for name, (_, spans, context) in got.items():
        caller = next(s for s in spans if s.name == "bls_traced")
        assert context == {"traceparent": f"00-{CLIENT_TRACE}-{caller.span_id.hex()}-01"}, (name, context)
        assert {s.trace_id.hex() for s in spans} == {CLIENT_TRACE}, name
