"""A client that goes away while a backend model is still inside `execute` is seen by the
backend at once (`TRITONBACKEND_RequestIsCancelled`, model.py's `request.is_cancelled()`), so the
model can stop early. The `spin` model (tests/fixtures/python_models/) works for up to SECONDS,
polling `request.is_cancelled()`, and its next request tells how the one before ended. The same
model runs under real Triton 2.51 (same Python backend library) for the gRPC cases; Triton 2.51
does not cancel requests of HTTP clients that disconnect (its docs: only gRPC and the C API
cancel), so that case runs under Tritium only.
"""
import shutil
import socket
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import Server
from test_python_backend import MODELS, Triton, infer, stub_env

SPIN_BODY = b'{"inputs":[{"name":"SECONDS","datatype":"FP32","shape":[1],"data":[10.0]}]}'


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("backend_cancel")
    repo = base / "models"
    shutil.copytree(MODELS / "spin", repo / "spin")
    tritium = Server(repo, log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(repo, base)
    yield {"tritium": tritium, "triton": triton}
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def seconds(value):
    return [("SECONDS", np.array([value], dtype=np.float32), "FP32")]


def previous(srv, protocol="grpc") -> str:
    """Runs a request that finishes at once; how the request before it ended."""
    got, error = infer(srv.grpc_url if protocol == "grpc" else srv.http_url, protocol, "spin", seconds(0.0))
    assert error is None, error
    return got["PREVIOUS"][0].decode()


def cancelled_after(text) -> float:
    assert text.startswith("cancelled after "), text
    return float(text.split()[-1])


@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_a_request_left_alone_runs_to_its_end(servers, server):
    srv = servers[server]
    got, error = infer(srv.grpc_url, "grpc", "spin", seconds(0.3))
    assert error is None, error
    assert previous(srv) == "finished"


@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_a_grpc_deadline_that_passes_during_execute_cancels_it(servers, server):
    srv = servers[server]
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    inp = grpcclient.InferInput("SECONDS", [1], "FP32")
    inp.set_data_from_numpy(np.array([10.0], dtype=np.float32))
    started = time.monotonic()
    try:
        with pytest.raises(InferenceServerException) as info:
            client.infer("spin", [inp], client_timeout=0.5)
        assert "DEADLINE_EXCEEDED" in str(info.value.status()) or "CANCELLED" in str(info.value.status()), info.value
    finally:
        client.close()
    # The model stopped soon after the deadline, not after its 10 s.
    assert cancelled_after(previous(srv)) < 3.0
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize("server", ["tritium", "triton"])
def test_a_grpc_call_the_client_cancels_during_execute_is_cancelled(servers, server):
    srv = servers[server]
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    inp = grpcclient.InferInput("SECONDS", [1], "FP32")
    inp.set_data_from_numpy(np.array([10.0], dtype=np.float32))
    answers = []
    try:
        call = client.async_infer("spin", [inp], callback=lambda result, error: answers.append(error))
        time.sleep(0.5)
        call.cancel()
        assert cancelled_after(previous(srv)) < 3.0
        assert answers and "CANCELLED" in str(answers[0].status()), answers
    finally:
        client.close()


def test_an_http_client_that_disconnects_during_execute_cancels_it(servers):
    srv = servers["tritium"]
    s = socket.create_connection(("127.0.0.1", srv.http_port))
    s.sendall(b"POST /v2/models/spin/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(SPIN_BODY)).encode() + b"\r\n\r\n" + SPIN_BODY)
    time.sleep(0.5)
    s.close()
    assert cancelled_after(previous(srv, "http")) < 3.0
    # The model keeps serving: the next request runs to its end.
    got, error = infer(srv.http_url, "http", "spin", seconds(0.2))
    assert error is None and got["PREVIOUS"][0].decode() == "finished", (got, error)
