"""Cancellation from the client's side (issue 16, point 8): a gRPC deadline that passes and an
HTTP client that goes away while its request waits in the queue. In both cases the request leaves
the queue without running, the pending figure returns to 0, the statistics count it as failed,
and the model keeps serving. (Explicit gRPC cancels and closed streams: tests/test_grpc.py.)"""
import socket
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import identity_config, wait_until

# One instance, 1.5 s per execution: one request runs, the next ones wait in the queue.
SLOW_ONE = identity_config("slow", count=1, delay_ms=1500)
BODY = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[1.0]}]}'


@pytest.fixture
def srv(start_server, tmp_path):
    repo = tmp_path / "repo"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(SLOW_ONE)
    return start_server(repo)


def pending(srv) -> float:
    text = requests.get(srv.metrics_url, timeout=5).text
    line = [l for l in text.splitlines() if l.startswith("nv_inference_pending_request_count{") and 'model="slow"' in l]
    return float(line[0].split()[-1])


def stats(srv) -> dict:
    return requests.get(f"{srv.base}/v2/models/slow/stats", timeout=5).json()["model_stats"][0]


def post_raw(srv) -> socket.socket:
    """Sends an infer request on its own connection and returns the socket, unread."""
    s = socket.create_connection(("127.0.0.1", srv.http_port))
    s.sendall(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
    return s


def test_grpc_deadline_that_passes_in_the_queue_drops_the_request(srv):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    busy = post_raw(srv)  # runs for 1.5 s
    try:
        time.sleep(0.2)
        inp = grpcclient.InferInput("INPUT0", [1], "FP32")
        inp.set_data_from_numpy(np.array([2.0], np.float32))
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as info:
            client.infer("slow", [inp], client_timeout=0.3)
        # The client's own deadline (DEADLINE_EXCEEDED) usually fires first; on a loaded machine
        # the server's can answer first, and tonic answers an expired grpc-timeout with
        # CANCELLED "Timeout expired" where gRPC core says DEADLINE_EXCEEDED.
        status = str(info.value.status())
        assert "DEADLINE_EXCEEDED" in status or ("CANCELLED" in status and "Timeout expired" in str(info.value)), \
            info.value
        assert time.monotonic() - started < 1.2, "the deadline fired before the busy instance freed"
        # The expired request never runs: once the busy one is done, one execution in all.
        assert b"200 OK" in busy.recv(4096)
        wait_until(lambda: pending(srv) == 0, 10, "the expired request to leave the queue")
        time.sleep(2.0)  # were it still queued, it would run now
        s = stats(srv)
        assert int(s["execution_count"]) == 1, s
        assert int(s["inference_stats"]["fail"]["count"]) == 1, s
        # The model still serves.
        assert client.infer("slow", [inp]).as_numpy("OUTPUT0").tolist() == [2.0]
    finally:
        busy.close()
        client.close()


def test_http_client_that_disconnects_while_queued_is_dropped(srv):
    busy = post_raw(srv)
    try:
        time.sleep(0.2)
        queued = [post_raw(srv) for _ in range(3)]
        wait_until(lambda: pending(srv) >= 3, 2, "three queued requests")
        for s in queued:
            s.close()
        wait_until(lambda: pending(srv) == 0, 3, "the abandoned requests to leave the queue")
        assert b"200 OK" in busy.recv(4096)
        time.sleep(2.0)
        s = stats(srv)
        assert int(s["execution_count"]) == 1, f"abandoned requests were dropped, not run: {s}"
        answer = requests.post(f"{srv.base}/v2/models/slow/infer", data=BODY, timeout=10)
        assert answer.status_code == 200, answer.text
    finally:
        busy.close()
