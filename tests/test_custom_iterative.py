"""The C example's iterative sequence backend (examples/custom_backend/iterate.c, built by the
example's build.sh): a backend of our own that releases a request with
`TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` until its steps are done, on models with
`sequence_batching { iterative_sequence: true }`, in Tritium and in real Triton 2.51 loading the
same library. The same requests go to both servers; the responses must agree (outputs in the
same order, START on the first step only, the final flag on the last), as for the Python
backend in tests/test_iterative_sequence.py.
"""
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import Server
from test_custom_backend import EXAMPLE, backend_dir  # noqa: F401 (backend_dir: a fixture)
from test_iterative_sequence import stream, without
from test_python_backend import Triton

MODELS = ("iterate_stream", "iterate_once")


@pytest.fixture(scope="module")
def servers(backend_dir, tmp_path_factory):  # noqa: F811 (the fixture)
    base = tmp_path_factory.mktemp("custom_iterative")
    repo = base / "models"
    for m in MODELS:
        shutil.copytree(EXAMPLE / "models" / m, repo / m)
    # A third model on the same library, without iterative_sequence: its reschedules are refused.
    plain = repo / "iterate_plain"
    shutil.copytree(EXAMPLE / "models" / "iterate_once", plain)
    config = plain / "config.pbtxt"
    config.write_text(config.read_text().replace("iterate_once", "iterate_plain")
                      .replace("sequence_batching { iterative_sequence: true }", "sequence_batching { }"))
    args = ["--backend-directory", str(backend_dir)]
    tritium = Server(repo, log_dir=base, args=args).start()
    triton = Triton(repo, base, args=args)
    yield tritium, triton
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def test_each_step_streams_a_response_and_the_last_the_final_flag_as_triton(servers):
    tritium, triton = servers
    reqs = [(3, 42, True, False)]
    ours = stream(tritium.grpc_url, "iterate_stream", reqs)[0]["r0"]
    theirs = stream(triton.grpc_url, "iterate_stream", reqs)[0]["r0"]
    assert ours == theirs == [
        {"OUT": 2, "ITER": 1, "CORR": 42, "FLAGS": 1, "final": False},
        {"OUT": 1, "ITER": 2, "CORR": 42, "FLAGS": 0, "final": False},
        {"OUT": 0, "ITER": 3, "CORR": 42, "FLAGS": 0, "final": True},
    ]


def test_concurrent_sequences_interleave_and_answer_as_triton(servers):
    """Three requests without IDs at once: each gets a sequence of its own, their steps
    interleave (inflight batching), and each request's responses are Triton's."""
    tritium, triton = servers
    reqs = [(4, 0, False, False), (2, 0, False, False), (3, 0, False, False)]
    outcome = {}
    for name, srv in (("tritium", tritium), ("triton", triton)):
        per, order = stream(srv.grpc_url, "iterate_stream", reqs)
        outcome[name] = {rid: without(rs, "CORR") for rid, rs in per.items()}
        assert len({r["CORR"] for rs in per.values() for r in rs}) == 3, (name, per)
        # r1 (2 steps) starts and ends while r0 (4 steps) runs: the steps interleave.
        ids = [rid for rid, _ in order]
        last = {rid: max(i for i, x in enumerate(ids) if x == rid) for rid in per}
        assert ids.index("r1") < last["r0"] and last["r1"] < last["r0"], (name, ids)
    assert outcome["tritium"] == outcome["triton"]
    assert outcome["tritium"]["r0"] == [
        {"OUT": 4 - i, "ITER": i, "FLAGS": int(i == 1), "final": i == 4} for i in range(1, 5)]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_non_decoupled_model_answers_once_at_the_last_step(servers, protocol):
    lib = grpcclient if protocol == "grpc" else httpclient
    answers = []
    for srv in servers:
        client = lib.InferenceServerClient(srv.grpc_url if protocol == "grpc" else srv.http_url)
        try:
            t = lib.InferInput("IN", [1, 1], "INT32")
            t.set_data_from_numpy(np.array([[3]], dtype=np.int32))
            r = client.infer("iterate_once", [t], sequence_id=77, sequence_start=True)
            answers.append({n: int(r.as_numpy(n)[0][0]) for n in ("OUT", "ITER", "CORR", "FLAGS")})
        finally:
            client.close()
    assert answers[0] == answers[1] == {"OUT": 0, "ITER": 3, "CORR": 77, "FLAGS": 0}


def test_a_model_without_iterative_sequence_refuses_the_reschedule(servers):
    """Triton refuses the release with its text, which the backend logs before releasing the
    request as usual; Triton then never answers the client, Tritium answers with an error that
    carries the text (as for the Python backend)."""
    tritium, triton = servers
    refused = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
               "configured to handle such a flag.")
    for srv, quiet in ((triton, 3.0), (tritium, 10.0)):
        client = httpclient.InferenceServerClient(srv.http_url, network_timeout=quiet)
        t = httpclient.InferInput("IN", [1, 1], "INT32")
        t.set_data_from_numpy(np.array([[3]], dtype=np.int32))
        try:
            with pytest.raises(Exception) as e:
                client.infer("iterate_plain", [t], sequence_id=5, sequence_start=True)
        finally:
            client.close()
        if srv is tritium:
            assert refused in str(e.value), e.value
    assert refused in triton.log_path.read_text() and refused in tritium.log_tail(400_000)
