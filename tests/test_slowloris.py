"""Slow clients and connection limits (issue 16, point 4): a client that sends its headers and
then stalls or trickles its body is answered 408 after `--http-body-read-timeout` (Tritium's
flag; Triton has no body timeout) and loses its connection, as a gRPC message that stalls is
after `--grpc-message-read-timeout` (DEADLINE_EXCEEDED and the flag's text, read from the
call's HTTP/2 trailers with `hpack`); `--http-max-connections` and
`--grpc-max-connections` keep idle connections from taking the server's file descriptors while
the clients being served carry on; a gRPC connection that never sends HTTP/2's preface is closed.
"""
import json
import os
import socket
import threading
import time
import urllib.parse

import hpack
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from helpers import Server, copy_bundled_repo

BODY_TIMEOUT = 2


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("slowloris")
    repo = copy_bundled_repo(base / "models", ["add_sub"])
    s = Server(repo, args=[f"--http-body-read-timeout={BODY_TIMEOUT}", "--http-max-connections=16",
                           "--http-thread-count=2", "--grpc-max-connections=4",
                           f"--grpc-message-read-timeout={BODY_TIMEOUT}"], log_dir=base).start()
    yield s
    assert s.stop() == 0, s.log_tail()


def add_sub_body():
    data = list(range(16))
    return json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data}]}).encode()


def head(port, length):
    return (f"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def read_response(sock, timeout):
    """Everything the server sends until it closes the connection (or `timeout` passes)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out, True
            out += chunk
    except socket.timeout:
        return out, False


def assert_timeout_answer(raw):
    status, _, rest = raw.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), raw[:300]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert set(body) == {"error"} and "--http-body-read-timeout" in body["error"], body


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def infer_ok(s):
    r = requests.post(s.base + "/v2/models/add_sub/infer", data=add_sub_body(), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2 * x for x in range(16)]


def test_a_stalled_body_is_answered_408_and_its_connection_closed(srv):
    body = add_sub_body()
    with socket.create_connection(("127.0.0.1", srv.http_port)) as s:
        s.sendall(head(srv.http_port, len(body)) + body[:20])
        started = time.monotonic()
        raw, closed = read_response(s, BODY_TIMEOUT + 8)
        took = time.monotonic() - started
    assert_timeout_answer(raw)
    assert closed, "the connection stays open after a body timeout"
    assert BODY_TIMEOUT - 0.5 < took < BODY_TIMEOUT + 5, took
    infer_ok(srv)


def test_a_trickled_body_is_cut_off_at_the_same_limit(srv):
    """One byte every 200 ms never lets the connection go quiet, yet the whole body must
    arrive within the timeout."""
    body = add_sub_body()
    with socket.create_connection(("127.0.0.1", srv.http_port)) as s:
        s.sendall(head(srv.http_port, len(body)))
        started, sent = time.monotonic(), 0
        s.setblocking(True)
        while time.monotonic() - started < BODY_TIMEOUT + 5 and sent < len(body) - 1:
            try:
                s.send(body[sent:sent + 1])
            except OSError:
                break  # the server closed the connection
            sent += 1
            time.sleep(0.2)
        raw, _ = read_response(s, 5)
        took = time.monotonic() - started
    assert sent < len(body) - 1, "the trickle was never cut off"
    assert_timeout_answer(raw)
    assert took < BODY_TIMEOUT + 4, took


def test_stalled_bodies_hold_neither_the_workers_nor_the_other_clients(srv):
    """Ten clients stall their bodies; a normal client is answered at once meanwhile, and the
    stalled connections are gone after the timeout."""
    body = add_sub_body()
    stalled = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", srv.http_port))
        s.sendall(head(srv.http_port, 10_000_000) + b"{")
        stalled.append(s)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        infer_ok(srv)
        assert time.monotonic() - started < 2
        for s in stalled:
            raw, closed = read_response(s, BODY_TIMEOUT + 8)
            assert_timeout_answer(raw)
            assert closed
    finally:
        for s in stalled:
            s.close()
    assert body  # the same server answers on
    infer_ok(srv)


def test_idle_connections_past_the_limit_wait_unaccepted(srv):
    """With --http-max-connections=16, 100 connections that send nothing cost the server at
    most 32 descriptors (two per connection: the socket and the duplicate that watches for the
    client leaving); the rest wait in the listen backlog. Once they go, a client is answered."""
    pid = srv.proc.pid
    infer_ok(srv)
    before = fds(pid)
    idle = [socket.create_connection(("127.0.0.1", srv.http_port)) for _ in range(100)]
    try:
        time.sleep(1.0)
        during = fds(pid)
        assert during - before <= 2 * 16 + 2, (before, during)
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 15
    while True:
        try:
            infer_ok(srv)
            break
        except (requests.RequestException, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert srv.alive()


def grpc_add_sub(url):
    client = grpcclient.InferenceServerClient(url)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        result = client.infer("add_sub", inputs, client_timeout=30)
        assert (result.as_numpy("OUTPUT0") == 2 * a).all()
    finally:
        client.close()


def test_grpc_connections_past_the_limit_wait_and_silent_ones_are_closed(srv):
    """--grpc-max-connections=4: four connections that never send HTTP/2's preface fill it and a
    fifth client waits; the silent ones are closed after 10 s, then the client is answered."""
    pid = srv.proc.pid
    grpc_add_sub(srv.grpc_url)
    before = fds(pid)
    silent = [socket.create_connection(("127.0.0.1", srv.grpc_port)) for _ in range(40)]
    answered = threading.Event()
    errors = []

    def client():
        try:
            grpc_add_sub(srv.grpc_url)
            answered.set()
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    try:
        time.sleep(1.0)
        assert fds(pid) - before <= 4 + 2, (before, fds(pid))
        started = time.monotonic()
        t = threading.Thread(target=client)
        t.start()
        time.sleep(2.0)
        assert not answered.is_set(), "a connection past --grpc-max-connections was served"
        # The first four silent ones are closed by the server after the preface timeout.
        for s in silent[:4]:
            _, closed = read_response(s, 15)
            assert closed, "a connection that never sent the HTTP/2 preface was kept"
    finally:
        for s in silent:
            s.close()
    t.join(40)
    assert not errors, errors
    assert answered.is_set()
    assert time.monotonic() - started < 40
    assert srv.alive()


def test_grpc_calls_past_the_stream_limit_wait_their_turn(start_server, tmp_path):
    """--grpc-max-concurrent-streams=2: six 400 ms calls sent at once on one connection, to a
    model with six instances, run at most two at a time (three rounds, at least 1.2 s), and all
    are answered."""
    from helpers import identity_config
    root = tmp_path / "streams"
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "config.pbtxt").write_text(identity_config("slow", count=6, delay_ms=400))
    s = start_server(root, args=["--grpc-max-concurrent-streams=2"])
    client = grpcclient.InferenceServerClient(s.grpc_url)
    try:
        data = np.arange(4, dtype=np.float32)
        inp = grpcclient.InferInput("INPUT0", [4], "FP32")
        inp.set_data_from_numpy(data)
        client.infer("slow", [inp], client_timeout=30)  # connected and warm
        results, done = [], threading.Event()

        def callback(result, error):
            results.append(error or result)
            if len(results) == 6:
                done.set()

        started = time.monotonic()
        for _ in range(6):
            client.async_infer("slow", [inp], callback, client_timeout=30)
        assert done.wait(30), f"{len(results)} of 6 answered"
        took = time.monotonic() - started
    finally:
        client.close()
    assert all(not isinstance(r, Exception) and (r.as_numpy("OUTPUT0") == data).all() for r in results), results
    assert took >= 1.2 - 0.05, f"six calls took {took:.2f} s: more than two ran at once"


# A gRPC call by hand, over HTTP/2 frames on a raw socket: grpcio cannot stall inside a message.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header as a literal without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_call_head(port, method):
    headers = b"".join(hpack_literal(k, v) for k, v in [
        (":method", "POST"), (":scheme", "http"), (":path", f"/inference.GRPCInferenceService/{method}"),
        (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"), ("te", "trailers")])
    return PREFACE + h2_frame(4, 0, 0, b"") + h2_frame(1, 0x4, 1, headers)  # SETTINGS, HEADERS


class StreamEnd:
    """How the server ended stream 1: after `took` seconds, with the headers of its header blocks
    (the response headers and the trailers, HPACK-decoded in the connection's order) and whether
    it reset the stream."""

    def __init__(self, took, headers, reset):
        self.took, self.headers, self.reset = took, headers, reset

    def trailer(self, name):
        return next((v for k, v in reversed(self.headers) if k == name), None)


def wait_for_stream_end(sock, timeout):
    """Reads frames until the server ends stream 1 (HEADERS with END_STREAM, or RST_STREAM);
    returns a StreamEnd, or None if it did not within `timeout`."""
    started, buf = time.monotonic(), b""
    decoder, block, headers = hpack.Decoder(), b"", []
    sock.settimeout(0.2)
    while time.monotonic() - started < timeout:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:  # the connection closed: the stream ended too
            return StreamEnd(time.monotonic() - started, headers, reset=False)
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + length], buf[9 + length:]
            if kind == 4 and not flags & 1:
                sock.sendall(h2_frame(4, 1, 0, b""))  # SETTINGS ACK
            if kind in (1, 9):  # HEADERS, CONTINUATION: one header block, decoded whole
                if kind == 1 and flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                if kind == 1 and flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                block += payload
                if flags & 0x4:  # END_HEADERS
                    decoded = decoder.decode(block)
                    block = b""
                    if stream == 1:
                        headers += decoded
            if stream == 1 and (kind == 3 or (kind == 1 and flags & 1)):
                return StreamEnd(time.monotonic() - started, headers, reset=kind == 3)
    return None


def assert_read_timeout_status(end):
    """The call ends with DEADLINE_EXCEEDED and the flag's text, in its trailers."""
    assert end.trailer("grpc-status") == "4", end.headers  # DEADLINE_EXCEEDED
    assert urllib.parse.unquote(end.trailer("grpc-message")) == (
        f"the request message did not arrive within {BODY_TIMEOUT} s. "
        "Use --grpc-message-read-timeout to change the limit."), end.headers


def test_a_stalled_grpc_message_ends_its_call_and_the_server_serves_on(srv):
    """ModelInfer: the 5-byte prefix announces 100 bytes, 10 arrive, then nothing."""
    with socket.create_connection(("127.0.0.1", srv.grpc_port)) as s:
        s.sendall(grpc_call_head(srv.grpc_port, "ModelInfer"))
        s.sendall(h2_frame(0, 0, 1, b"\x00" + (100).to_bytes(4, "big") + b"\x0a" * 10))
        end = wait_for_stream_end(s, BODY_TIMEOUT + 8)
    assert end is not None, "the stalled call was never ended"
    assert BODY_TIMEOUT - 0.5 < end.took < BODY_TIMEOUT + 5, end.took
    assert_read_timeout_status(end)
    grpc_add_sub(srv.grpc_url)


def test_a_grpc_call_that_sends_no_message_is_ended(srv):
    with socket.create_connection(("127.0.0.1", srv.grpc_port)) as s:
        s.sendall(grpc_call_head(srv.grpc_port, "ModelInfer"))
        end = wait_for_stream_end(s, BODY_TIMEOUT + 8)
    assert end is not None and end.took > BODY_TIMEOUT - 0.5, end and end.took
    assert_read_timeout_status(end)


def test_a_resting_grpc_stream_is_kept_but_a_trickled_message_is_not(srv):
    """ModelStreamInfer may rest between messages (no message begun: kept past the timeout);
    a message trickled one byte every 200 ms is cut off at the timeout."""
    with socket.create_connection(("127.0.0.1", srv.grpc_port)) as s:
        s.sendall(grpc_call_head(srv.grpc_port, "ModelStreamInfer"))
        assert wait_for_stream_end(s, BODY_TIMEOUT + 1.5) is None, "a resting stream was ended"
        message = b"\x00" + (100).to_bytes(4, "big") + b"\x0a" * 100
        started = time.monotonic()
        s.setblocking(True)
        for i in range(len(message)):
            try:
                s.sendall(h2_frame(0, 0, 1, message[i:i + 1]))
            except OSError:
                break
            if time.monotonic() - started > BODY_TIMEOUT + 0.5:
                break
            time.sleep(0.2)
        end = wait_for_stream_end(s, 5)
    assert end is not None, "the trickled message was never cut off"
    assert_read_timeout_status(end)
    assert time.monotonic() - started < BODY_TIMEOUT + 6
    grpc_add_sub(srv.grpc_url)
