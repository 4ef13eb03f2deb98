"""Input limits (issue 16, point 4): the HTTP body limit (`--http-max-input-size`, Triton's flag
and 64 MiB default) on every endpoint that reads a body, answered 400 with Triton's JSON error
and nothing changed; and the gRPC message limit (Triton's is INT32_MAX, without a flag; Tritium's
`--grpc-max-message-size` lowers it), answered RESOURCE_EXHAUSTED with gRPC core's text before
the message is read, the server serving on.
"""
import json
import socket
import urllib.parse

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, wait_until

LIMIT = 4096


def too_large(n, limit=LIMIT):
    return {"error": f"request body size {n} bytes exceeds the maximum allowed value of {limit} bytes. "
                     "Use --http-max-input-size to increase the limit."}


@pytest.fixture(scope="module")
def small_http(tmp_path_factory):
    base = tmp_path_factory.mktemp("limits")
    repo = copy_bundled_repo(base / "models", ["add_sub", "add_sub_nobatch"])
    srv = Server(repo, args=["--model-control-mode=explicit", "--load-model=add_sub",
                             f"--http-max-input-size={LIMIT}"], log_dir=base).start()
    yield srv
    assert srv.stop() == 0, srv.log_tail()


def padded(obj, size):
    """`obj` as JSON, padded with spaces to exactly `size` bytes."""
    text = json.dumps(obj)
    assert len(text) <= size
    return text + " " * (size - len(text))


def add_sub_json():
    data = list(range(16))
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
                       {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data}]}


POSTS = [
    "/v2/models/add_sub/infer",
    "/v2/models/add_sub/versions/1/infer",
    "/v2/repository/index",
    "/v2/repository/models/add_sub_nobatch/load",
    "/v2/repository/models/add_sub/unload",
    "/v2/logging",
    "/v2/trace/setting",
    "/v2/models/add_sub/trace/setting",
    "/v2/systemsharedmemory/region/big/register",
    "/v2/models/add_sub/generate",
    "/v2/models/add_sub/generate_stream",
    "/v1/chat/completions",
]


@pytest.mark.parametrize("path", POSTS)
def test_every_body_over_the_limit_gets_tritons_json_error(small_http, path):
    body = padded({"parameters": {}}, LIMIT + 1)
    r = requests.post(small_http.base + path, data=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == too_large(LIMIT + 1)
    # Sent in chunks without a Content-Length, it is refused as it arrives.
    chunks = (body[i:i + 1000].encode() for i in range(0, len(body), 1000))
    r = requests.post(small_http.base + path, data=chunks, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("request body size ") and f"of {LIMIT} bytes" in r.json()["error"]


def test_refused_bodies_change_nothing_and_bodies_at_the_limit_pass(small_http):
    base = small_http.base
    before = small_http.index()
    for path in ["/v2/repository/models/add_sub_nobatch/load", "/v2/repository/models/add_sub/unload"]:
        assert requests.post(base + path, data=padded({}, LIMIT + 10), timeout=30).status_code == 400
    assert requests.post(base + "/v2/logging", data=padded({"log_verbose_level": 2}, LIMIT + 10),
                         timeout=30).status_code == 400
    assert small_http.index() == before
    assert requests.get(base + "/v2/logging", timeout=30).json()["log_verbose_level"] == 0
    assert requests.get(base + "/v2/systemsharedmemory/status", timeout=30).json() == []
    # Exactly the limit is accepted, on infer and on load.
    r = requests.post(base + "/v2/models/add_sub/infer", data=padded(add_sub_json(), LIMIT), timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2.0 * i for i in range(16)]
    r = requests.post(base + "/v2/repository/models/add_sub_nobatch/load", data=padded({}, LIMIT), timeout=60)
    assert r.status_code == 200, r.text
    assert requests.get(base + "/v2/models/add_sub_nobatch/ready", timeout=30).status_code == 200


def test_binary_tensors_count_toward_the_limit(small_http):
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}]}).encode()
    tensors = np.ones((2, 16), dtype=np.float32).tobytes()
    ok = requests.post(small_http.base + "/v2/models/add_sub/infer", data=header + tensors, timeout=30,
                       headers={"Inference-Header-Content-Length": str(len(header))})
    assert ok.status_code == 200, ok.text
    pad = LIMIT - len(header) - len(tensors) + 1
    big = requests.post(small_http.base + "/v2/models/add_sub/infer", data=header + b" " * pad + tensors,
                        timeout=30, headers={"Inference-Header-Content-Length": str(len(header) + pad)})
    assert big.status_code == 400 and big.json() == too_large(LIMIT + 1)


@pytest.mark.parametrize("size", [200_000, 1_000_000])
def test_a_huge_header_is_431_and_the_server_serves_on(small_http, size):
    """Request heads over 128 KiB are refused with 431 Request Header Fields Too Large (the
    connection closes after it), not a reset with no answer."""
    r = requests.get(f"{small_http.base}/v2/health/live", headers={"X-Big": "a" * size}, timeout=10)
    assert r.status_code == 431
    assert requests.get(f"{small_http.base}/v2/health/ready", timeout=10).status_code == 200


def test_a_client_that_never_finishes_its_request_head_is_dropped_with_408(small_http):
    """Slow-loris on the request head: the connection holds no worker past 5 s."""
    import socket
    import time
    with socket.create_connection(("127.0.0.1", small_http.http_port)) as s:
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        s.settimeout(15)
        started = time.monotonic()
        head = s.recv(200)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert time.monotonic() - started < 8
    assert requests.get(f"{small_http.base}/v2/health/ready", timeout=10).status_code == 200


def test_a_load_over_256_kib_within_the_default_limit(start_server, repo_copy):
    """The load API had actix's hidden 256 KiB limit (a plain-text 413); it now has the
    server's: a 1 MiB load request passes under the 64 MiB default."""
    srv = start_server(repo_copy(["add_sub", "add_sub_nobatch"]), args=["--model-control-mode=explicit"])
    r = srv.post("/v2/repository/models/add_sub_nobatch/load", padded({"parameters": {}}, 1 << 20))
    assert r.status_code == 200, r.text
    assert srv.get("/v2/models/add_sub_nobatch/ready").status_code == 200
    r = srv.post("/v2/repository/index", padded({}, (1 << 26) + 1))
    assert r.status_code == 400 and r.json() == too_large((1 << 26) + 1, 1 << 26)


GRPC_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def small_grpc(tmp_path_factory):
    base = tmp_path_factory.mktemp("grpc_limits")
    repo = copy_bundled_repo(base / "models", ["identity_fp32", "add_sub"])
    srv = Server(repo, args=[f"--grpc-max-message-size={GRPC_LIMIT}"], log_dir=base).start()
    yield srv
    assert srv.stop() == 0, srv.log_tail()


def identity_inputs(n):
    x = np.arange(n, dtype=np.float32).reshape(1, n)
    i = grpcclient.InferInput("INPUT0", [1, n], "FP32")
    i.set_data_from_numpy(x)
    return x, [i]


def identity_model(srv):
    cfg = requests.get(srv.base + "/v2/models/identity_fp32/config", timeout=30).json()
    return cfg


def test_grpc_oversized_message_is_resource_exhausted(small_grpc):
    cfg = identity_model(small_grpc)
    assert cfg["input"][0]["name"] == "INPUT0", cfg
    c = grpcclient.InferenceServerClient(small_grpc.grpc_url)
    try:
        x, ins = identity_inputs(4096)  # 16 KiB: passes
        np.testing.assert_array_equal(c.infer("identity_fp32", ins).as_numpy("OUTPUT0"), x)
        _, big = identity_inputs(32 * 1024)  # 128 KiB of tensor
        with pytest.raises(InferenceServerException) as e:
            c.infer("identity_fp32", big)
        assert e.value.status() == "StatusCode.RESOURCE_EXHAUSTED", e.value
        msg = e.value.message()
        assert msg.startswith("Received message larger than max (") and msg.endswith(f" vs. {GRPC_LIMIT})"), msg
        n = int(msg.split("(")[1].split(" ")[0])
        assert 128 * 1024 < n < 128 * 1024 + 200, msg
        # The same channel, and the server, serve on.
        np.testing.assert_array_equal(c.infer("identity_fp32", ins).as_numpy("OUTPUT0"), x)
        assert c.is_server_live()
    finally:
        c.close()


def test_grpc_stream_with_an_oversized_message_ends_with_resource_exhausted(small_grpc):
    c = grpcclient.InferenceServerClient(small_grpc.grpc_url)
    try:
        results = []
        c.start_stream(callback=lambda result, error: results.append((result, error)))
        x, ins = identity_inputs(16)
        c.async_stream_infer("identity_fp32", ins)
        wait_until(lambda: results, what="the first answer")
        _, big = identity_inputs(32 * 1024)
        c.async_stream_infer("identity_fp32", big)
        wait_until(lambda: len(results) == 2, what="the stream's end")
        c.stop_stream()
        assert results[0][1] is None, results
        np.testing.assert_array_equal(results[0][0].as_numpy("OUTPUT0"), x)
        assert len(results) == 2 and results[1][0] is None, results
        assert "Received message larger than max" in str(results[1][1]), results
        assert "RESOURCE_EXHAUSTED" in str(results[1][1]) or "ResourceExhausted" in repr(results[1][1])
        # A new stream works.
        results.clear()
        c.start_stream(callback=lambda result, error: results.append((result, error)))
        c.async_stream_infer("identity_fp32", ins)
        c.stop_stream()
        assert len(results) == 1 and results[0][1] is None, results
    finally:
        c.close()


def vm_hwm_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_grpc_refuses_before_reading_the_message(small_grpc):
    """A 256 MiB message over a 64 KiB limit is refused from its length prefix: the server's
    peak memory does not grow by the message (it did when the whole message was read first)."""
    with grpc.insecure_channel(small_grpc.grpc_url, options=[
            ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30)
        before = vm_hwm_kib(small_grpc.proc.pid)
        req = service_pb2.ModelInferRequest(model_name="identity_fp32")
        req.raw_input_contents.append(b"\0" * (256 << 20))
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req, timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        grown_mib = (vm_hwm_kib(small_grpc.proc.pid) - before) / 1024
        assert grown_mib < 32, f"peak memory grew {grown_mib:.0f} MiB for a refused 256 MiB message"
        assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30).live


def test_grpc_refuses_from_the_announced_length_without_waiting_for_the_message(small_grpc):
    """By hand, over HTTP/2 frames: a ModelInfer call whose 5-byte prefix announces 256 MiB and
    whose message never comes. The server ends the call at once (the message read timeout is
    60 s), so it refused from the prefix and buffered nothing; it then serves a normal call."""
    from test_slowloris import grpc_call_head, h2_frame, wait_for_stream_end
    port = int(small_grpc.grpc_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(grpc_call_head(port, "ModelInfer"))
        s.sendall(h2_frame(0, 0, 1, b"\x00" + (256 << 20).to_bytes(4, "big") + b"\x0a" * 16))
        end = wait_for_stream_end(s, 30)
    assert end is not None and end.took < 5, f"the call was not ended from its length prefix ({end and end.took})"
    # RESOURCE_EXHAUSTED with gRPC's own text (percent-encoded in the trailer, as gRPC sends it).
    assert end.trailer("grpc-status") == "8", end.headers
    assert urllib.parse.unquote(end.trailer("grpc-message")) == \
        f"Received message larger than max ({256 << 20} vs. {GRPC_LIMIT})", end.headers
    c = grpcclient.InferenceServerClient(small_grpc.grpc_url)
    try:
        x, ins = identity_inputs(16)
        np.testing.assert_array_equal(c.infer("identity_fp32", ins).as_numpy("OUTPUT0"), x)
    finally:
        c.close()
