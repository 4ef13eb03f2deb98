"""Iterative sequences (`sequence_batching { iterative_sequence: true }`) with Triton 2.51's own
Python backend, in Tritium and in real Triton 2.51 side by side: a model.py releases its request
with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` until its count is reached, and the request runs
again in a later batch with the same inputs. The same requests go to both servers over gRPC
streaming (unary gRPC and HTTP for the non-decoupled model), and the responses must agree: the
same outputs in the same order, START only on the first iteration, the final flag on the last.
The models are in tests/fixtures/python_models/ (`iterative`, `iterative_unary`,
`reschedule_refused`, `reschedule_dynamic`; see its README).
"""
import queue
import shutil
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import Server
from test_python_backend import MODELS, Triton, stub_env

MINE = ["iterative", "iterative_unary", "reschedule_refused", "reschedule_dynamic"]
REFUSED = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
           "configured to handle such a flag.")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("iterative")
    repo = base / "models"
    for m in MINE:
        shutil.copytree(MODELS / m, repo / m)  # follows the model.py links
    tritium = Server(repo, log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(repo, base)
    yield tritium, triton
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def stream(url, model, reqs, timeout=20.0, quiet=None):
    """Sends `reqs` ((IN, sequence id, start, end) each) on one gRPC stream, ids r0, r1, ...;
    returns each request's responses in arrival order (a dict of the outputs and `final`, or
    ("error", message)) and all of them in arrival order. With `quiet`, stops when nothing
    arrives for that long (a request left without its final response) instead of failing."""
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for i, (n, sid, start, end) in enumerate(reqs):
        t = grpcclient.InferInput("IN", [1, 1], "INT32")
        t.set_data_from_numpy(np.array([[n]], dtype=np.int32))
        client.async_stream_infer(model, [t], request_id=f"r{i}", sequence_id=sid, sequence_start=start,
                                  sequence_end=end, enable_empty_final_response=True)
    per = {f"r{i}": [] for i in range(len(reqs))}
    order = []
    open_ = set(per)
    try:
        while open_:
            try:
                result, error = results.get(timeout=quiet or timeout)
            except queue.Empty:
                if quiet is None:
                    raise
                break
            if error is not None:
                # An error answers one request (its id is not in the error): the oldest open one.
                rid = sorted(open_)[0]
                per[rid].append(("error", error.message()))
                open_.discard(rid)
                continue
            response = result.get_response()
            got = {o.name: int(result.as_numpy(o.name).reshape(-1)[0]) for o in response.outputs}
            got["final"] = response.parameters["triton_final_response"].bool_param
            per[response.id].append(got)
            order.append((response.id, got))
            if got["final"]:
                open_.discard(response.id)
    finally:
        client.stop_stream(cancel_requests=bool(open_))
        client.close()
    return per, order


def without(responses, *keys):
    return [r if isinstance(r, tuple) else {k: v for k, v in r.items() if k not in keys} for r in responses]


def test_each_iteration_streams_a_response_and_the_last_the_final_flag_as_triton(servers):
    tritium, triton = servers
    for n in (3, 2):
        ours = stream(tritium.grpc_url, "iterative", [(n, 0, False, False)])[0]["r0"]
        theirs = stream(triton.grpc_url, "iterative", [(n, 0, False, False)])[0]["r0"]
        assert without(ours, "STEP") == without(theirs, "STEP"), (ours, theirs)
    # The second request without an ID got the sequencer's second ID; START on its first
    # iteration only, the same inputs every time (OUT counts down from IN), final on the last.
    assert without(ours, "STEP") == [
        {"OUT": 1, "ITER": 1, "CORR": 2, "FLAGS": 1, "final": False},
        {"OUT": 0, "ITER": 2, "CORR": 2, "FLAGS": 0, "final": True},
    ]
    # A client's own ID and START: the iterations keep the ID, START only on the first.
    reqs = [(3, 55, True, False)]
    ours, theirs = stream(tritium.grpc_url, "iterative", reqs)[0], stream(triton.grpc_url, "iterative", reqs)[0]
    assert without(ours["r0"], "STEP") == without(theirs["r0"], "STEP") == [
        {"OUT": 2, "ITER": 1, "CORR": 55, "FLAGS": 1, "final": False},
        {"OUT": 1, "ITER": 2, "CORR": 55, "FLAGS": 0, "final": False},
        {"OUT": 0, "ITER": 3, "CORR": 55, "FLAGS": 0, "final": True},
    ]


def test_concurrent_sequences_interleave_their_iterations(servers):
    """Three requests at once: each is rescheduled behind the others (no priority), so their
    iterations interleave, several sequences' iterations share an execution (inflight batching,
    up to max_batch_size 4) on both servers, and each request's responses are Triton's."""
    tritium, triton = servers
    reqs = [(4, 0, False, False), (2, 0, False, False), (3, 0, False, False)]
    outcome = {}
    for name, srv in (("tritium", tritium), ("triton", triton)):
        per, order = stream(srv.grpc_url, "iterative", reqs)
        outcome[name] = {rid: without(rs, "STEP", "CORR") for rid, rs in per.items()}
        steps = {rid: [r["STEP"] for r in rs] for rid, rs in per.items()}
        assert min(steps["r1"]) < max(steps["r0"]) and min(steps["r2"]) < max(steps["r0"]), (name, steps)
        shared = set(steps["r0"]) & (set(steps["r1"]) | set(steps["r2"]))
        assert shared, f"{name}: no execution held two sequences' iterations: {steps}"
        assert len({r["CORR"] for rs in per.values() for r in rs}) == 3, (name, per)
    assert outcome["tritium"] == outcome["triton"]
    assert outcome["tritium"]["r0"] == [
        {"OUT": 4 - i, "ITER": i, "FLAGS": int(i == 1), "final": i == 4} for i in range(1, 5)]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_non_decoupled_iterative_sequence_answers_once_at_its_last_iteration(servers, protocol):
    lib = grpcclient if protocol == "grpc" else httpclient
    answers = []
    for srv in servers:
        client = lib.InferenceServerClient(srv.grpc_url if protocol == "grpc" else srv.http_url)
        try:
            t = lib.InferInput("IN", [1, 1], "INT32")
            t.set_data_from_numpy(np.array([[3]], dtype=np.int32))
            r = client.infer("iterative_unary", [t])
            answers.append({n: int(r.as_numpy(n)[0][0]) for n in ("OUT", "ITER", "FLAGS")})
        finally:
            client.close()
    assert answers[0] == answers[1] == {"OUT": 0, "ITER": 3, "FLAGS": 0}


@pytest.mark.parametrize("model,req,error", [
    ("reschedule_refused", (3, 9, True, False), REFUSED),
    ("reschedule_dynamic", (3, 0, False, False), REFUSED),
    # A request with END ends its sequence: Triton's enqueue of it again fails.
    ("iterative", (3, 56, True, True),
     "inference request for sequence 56 to model 'iterative' must specify the START flag on the first "
     "request of the sequence"),
])
def test_a_reschedule_the_model_does_not_allow_fails_with_tritons_text(servers, model, req, error):
    """Triton refuses the release with its text, which the Python backend logs before releasing
    the request as usual; Triton leaves the client waiting for a final response that never comes.
    Tritium sends the same first response, logs the same text, and then answers the request with
    an error that carries it."""
    tritium, triton = servers
    theirs = stream(triton.grpc_url, model, [req], quiet=3.0)[0]["r0"]
    ours = stream(tritium.grpc_url, model, [req], quiet=10.0)[0]["r0"]
    first = {"OUT": 2, "ITER": 1, "FLAGS": req[2] | req[3] << 1, "final": False}
    assert without(theirs, "STEP", "CORR") == [first], "Triton: the first response, then nothing"
    assert without(ours[:1], "STEP", "CORR") == [first]
    assert len(ours) == 2 and ours[1][0] == "error" and ours[1][1].endswith(error), ours
    for log in (triton.log_path.read_text(), tritium.log_tail(400_000)):
        assert f"Failed to release request: {error}" in log or f"failed to release request: {error}" in log


def test_statistics_count_each_iteration_as_triton(servers):
    """Both servers ran the same requests: each iteration counts as one successful inference."""
    counts = []
    for srv in servers:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            got = {}
            for m in ("iterative", "iterative_unary"):
                s = client.get_inference_statistics(m, as_json=True)["model_stats"][0]
                got[m] = (s.get("inference_count"), s["inference_stats"]["success"].get("count"))
        finally:
            client.close()
        counts.append(got)
    tritium, triton = counts
    assert tritium["iterative_unary"] == triton["iterative_unary"] == ("6", "6")
    # iterative: 3 + 2 + 3 + (4 + 2 + 3) iterations, and in Triton one more: the START|END
    # request's iteration before its refused reschedule, which Triton's Python backend reports a
    # success while the client waits for ever; Tritium answers that request with an error.
    assert triton["iterative"] == ("18", "18")
    assert tritium["iterative"] == ("17", "17")
