"""The gRPC front door (src/frontends/grpc/front_door.rs) against tonic alone, over the wire.

The door serves a plain unary `ModelInfer` itself and hands every other call to tonic; its
answers must be tonic's. Two oracles, each the same server code with the door out of the way:
- a second server with `--grpc-infer-response-compression-level` set, which turns the door off
  (every call goes through tonic; its OK answers come gzip-compressed, decoded here);
- on the door's own server, the same call with `grpc-encoding: gzip` and an uncompressed
  message (a valid gRPC call the door does not take), whose whole answer, headers included,
  must equal the door's.

The calls are made by hand over raw HTTP/2 frames (HPACK from `hpack`), so that the body can be
split, compressed, truncated, doubled or followed by trailers, and through grpcio and
tritonclient.grpc for compressed and very large requests and deadlines.
"""
import gzip
import socket
import time
import urllib.parse
import zlib

import grpc
import hpack
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, identity_config
from test_grpc import add_sub_inputs

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, END_HEADERS = 0x1, 0x4
# Both servers refuse messages over this (`--grpc-max-message-size`), so the limit is tested too.
LIMIT = 4_000_000
# The `slow` model's execution, and a client deadline well under it.
SLOW_MS = 1500


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(door, tonic only): the same repository and limits, the door off on the second."""
    base = tmp_path_factory.mktemp("front_door")
    repo = copy_bundled_repo(base / "models", ["add_sub", "identity"])
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(identity_config("slow", delay_ms=SLOW_MS))
    common = ["--grpc-max-message-size", str(LIMIT)]
    door = Server(repo, args=common, log_dir=base).start()
    tonic = Server(repo, args=[*common, "--grpc-infer-response-compression-level", "high"], log_dir=base)
    try:
        tonic.start()
    except Exception:
        door.stop()
        raise
    yield door, tonic
    for srv in (door, tonic):
        assert srv.stop() == 0, srv.log_tail()


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def message(payload: bytes, flag=0) -> bytes:
    """A gRPC length-prefixed message."""
    return bytes([flag]) + len(payload).to_bytes(4, "big") + payload


def add_sub_request(model="add_sub", seed=0) -> service_pb2.ModelInferRequest:
    rng = np.random.default_rng(seed)
    req = service_pb2.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(rng.standard_normal(16).astype(np.float32).tobytes())
    return req


class Answer:
    """A call's end as the client saw it: the response headers, the data (messages, their
    prefixes included), the trailers (for a trailers-only answer, the headers), or a reset."""

    def __init__(self, headers, data, trailers, reset):
        self.headers, self.data, self.trailers, self.reset = headers, data, trailers, reset

    def header(self, name, block="trailers"):
        block = self.trailers if block == "trailers" else self.headers
        return next((v for k, v in block if k == name), None)

    @property
    def status(self):
        """(grpc-status, grpc-message): from the trailers, or the headers of a trailers-only one."""
        block = self.trailers if self.trailers is not None else self.headers
        get = dict(block or []).get
        message = get("grpc-message")
        return get("grpc-status"), None if message is None else urllib.parse.unquote(message)

    def messages(self):
        """The response messages, decompressed (gzip) where flagged."""
        out, data = [], self.data
        while data:
            flag, n = data[0], int.from_bytes(data[1:5], "big")
            body, data = data[5:5 + n], data[5 + n:]
            out.append(gzip.decompress(body) if flag else body)
        return out

    def response(self):
        [only] = self.messages()
        return service_pb2.ModelInferResponse.FromString(only)

    def comparable(self):
        """Everything but the `date` header."""
        drop = lambda block: None if block is None else [(k, v) for k, v in block if k != "date"]
        return drop(self.headers), self.data, drop(self.trailers), self.reset


def raw_call(port, body_frames, headers=(), trailers=None, end_with_empty_frame=False,
             path=MODEL_INFER, content_type="application/grpc", timeout=20.0) -> Answer:
    """One call on a new connection (stream 1): the headers, then each of `body_frames` as a DATA
    frame, then an empty DATA frame or `trailers` if asked, the last one with END_STREAM."""
    encoder = hpack.Encoder()
    head = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", f"127.0.0.1:{port}"),
            ("content-type", content_type), ("te", "trailers"), *headers]
    frames = list(body_frames)
    last_data = len(frames) - 1 if trailers is None and not end_with_empty_frame else None
    out = PREFACE + frame(SETTINGS, 0, 0)
    out += frame(HEADERS, END_HEADERS | (END_STREAM if not frames and trailers is None and not end_with_empty_frame
                                         else 0), 1, encoder.encode(head))
    for i, chunk in enumerate(frames):
        assert len(chunk) <= 16384, "a DATA frame over h2's default size"
        out += frame(DATA, END_STREAM if i == last_data else 0, 1, chunk)
    if end_with_empty_frame:
        out += frame(DATA, END_STREAM, 1)
    if trailers is not None:
        out += frame(HEADERS, END_HEADERS | END_STREAM, 1, encoder.encode(list(trailers)))
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(out)
        return read_answer(s, timeout)


def read_answer(sock, timeout) -> Answer:
    decoder, buf, block, blocks, data = hpack.Decoder(), b"", b"", [], b""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            raise AssertionError(f"the connection closed before stream 1 ended: {blocks} {data!r}")
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + length], buf[9 + length:]
            if kind == SETTINGS and not flags & 1:
                sock.sendall(frame(SETTINGS, 1, 0))
            elif kind == PING and not flags & 1:
                sock.sendall(frame(PING, 1, 0, payload))
            elif kind == GOAWAY:
                raise AssertionError(f"GOAWAY {payload!r}")
            elif kind in (HEADERS, CONTINUATION) and stream == 1:
                if kind == HEADERS and flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                if kind == HEADERS and flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                block += payload
                if flags & END_HEADERS:
                    blocks.append(decoder.decode(block))
                    block = b""
            elif kind == DATA and stream == 1:
                data += payload
            elif kind == RST_STREAM and stream == 1:
                return Answer(blocks[0] if blocks else None, data, None, int.from_bytes(payload, "big"))
            if stream == 1 and kind in (HEADERS, DATA) and flags & END_STREAM:
                trailers = blocks[1] if len(blocks) > 1 else None
                return Answer(blocks[0], data, trailers, None)
    raise AssertionError("stream 1 did not end in time")


def both(servers, **call):
    door, tonic = servers
    return raw_call(door.grpc_port, **call), raw_call(tonic.grpc_port, **call)


def assert_same_end(servers, expect_status=None, **call):
    """The same call to the door and to tonic alone ends with the same status and message, and
    (for an OK answer) the same response message; returns the door's answer."""
    door, tonic = both(servers, **call)
    assert door.reset == tonic.reset, (door.reset, tonic.reset)
    assert door.status == tonic.status, (door.status, tonic.status)
    if expect_status is not None:
        assert door.status[0] == expect_status, door.status
    if door.status[0] == "0":
        assert door.response() == tonic.response()
    return door


def via_tonic(headers=()):
    """Headers that send the same call past the door on its own server: the message stays
    uncompressed (flag 0), which gRPC allows whatever `grpc-encoding` says."""
    return [*headers, ("grpc-encoding", "gzip")]


def assert_as_tonic_on_the_same_server(servers, body_frames, headers=(), **call):
    """The whole answer (headers, data, trailers) of the door equals tonic's on one server."""
    door = servers[0]
    by_door = raw_call(door.grpc_port, body_frames, headers=headers, **call)
    by_tonic = raw_call(door.grpc_port, body_frames, headers=via_tonic(headers), **call)
    assert by_door.comparable() == by_tonic.comparable()
    return by_door


def test_a_plain_call_is_answered_as_tonic_answers_it(servers):
    wire = message(add_sub_request().SerializeToString())
    answer = assert_same_end(servers, "0", body_frames=[wire])
    out = answer.response()
    a, b = (np.frombuffer(c, np.float32) for c in add_sub_request().raw_input_contents)
    np.testing.assert_allclose(np.frombuffer(out.raw_output_contents[0], np.float32), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.frombuffer(out.raw_output_contents[1], np.float32), a - b, rtol=1e-6)
    assert_as_tonic_on_the_same_server(servers, [wire])
    assert answer.header("content-type", "headers") == "application/grpc"


@pytest.mark.parametrize("split", [1, 3, 5, 6, 100, 1000], ids=lambda s: f"frames-of-{s}")
def test_a_message_split_over_several_data_frames(servers, split):
    wire = message(add_sub_request(seed=split).SerializeToString())
    frames = [wire[i:i + split] for i in range(0, len(wire), split)]
    assert_same_end(servers, "0", body_frames=frames)
    assert_as_tonic_on_the_same_server(servers, frames)


def test_end_stream_on_an_empty_frame_after_the_message(servers):
    wire = message(add_sub_request().SerializeToString())
    assert_same_end(servers, "0", body_frames=[wire], end_with_empty_frame=True)
    assert_as_tonic_on_the_same_server(servers, [wire], end_with_empty_frame=True)


@pytest.mark.parametrize("encoding,compress", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("identity", gzip.compress),
    (None, gzip.compress),
], ids=["gzip", "deflate-unsupported", "flag-with-identity", "flag-without-encoding"])
def test_compressed_messages(servers, encoding, compress):
    body = compress(add_sub_request().SerializeToString())
    headers = [] if encoding is None else [("grpc-encoding", encoding)]
    answer = assert_same_end(servers, body_frames=[message(body, flag=1)], headers=headers)
    if encoding == "gzip":
        assert answer.status[0] == "0", answer.status
    else:
        assert answer.status[0] != "0", answer.status


def test_an_uncompressed_message_under_grpc_encoding_identity(servers):
    wire = message(add_sub_request().SerializeToString())
    assert_same_end(servers, "0", body_frames=[wire], headers=[("grpc-encoding", "identity")])


@pytest.mark.parametrize("content_type", ["application/grpc+proto", "application/grpc-web", "application/grpcx"])
def test_other_grpc_content_types(servers, content_type):
    wire = message(add_sub_request().SerializeToString())
    assert_same_end(servers, body_frames=[wire], content_type=content_type)
    assert_as_tonic_on_the_same_server(servers, [wire], content_type=content_type)


def test_an_unknown_model(servers):
    wire = message(add_sub_request(model="no_such_model").SerializeToString())
    answer = assert_same_end(servers, body_frames=[wire])
    assert answer.status == ("5", "Request for unknown model: 'no_such_model' is not found"), answer.status
    assert_as_tonic_on_the_same_server(servers, [wire])


@pytest.mark.parametrize("payload", [
    b"\xff\xff\xff",  # a field tag that never ends
    b"\x0a\x10add",  # model_name announces 16 bytes, 3 follow
    b"\x0a\x02\xff\xfe",  # model_name is not UTF-8
], ids=["bad-varint", "short-string", "not-utf8"])
def test_a_malformed_protobuf(servers, payload):
    answer = assert_same_end(servers, "13", body_frames=[message(payload)])
    assert answer.status[1], "a message names the decode error"
    assert_as_tonic_on_the_same_server(servers, [message(payload)])


@pytest.mark.parametrize("case", ["two-messages-one-frame", "two-messages-two-frames", "truncated", "no-message",
                                  "bytes-after-the-message", "trailers"])
def test_bodies_that_are_not_one_message(servers, case):
    one = message(add_sub_request().SerializeToString())
    call = {
        "two-messages-one-frame": dict(body_frames=[one + one]),
        "two-messages-two-frames": dict(body_frames=[one, one]),
        "truncated": dict(body_frames=[one[:20]]),
        "no-message": dict(body_frames=[]),
        "bytes-after-the-message": dict(body_frames=[one + b"\x00\x00"]),
        "trailers": dict(body_frames=[one], trailers=[("x-after", "1")]),
    }[case]
    assert_same_end(servers, **call)
    assert_as_tonic_on_the_same_server(servers, **call)


def test_a_message_over_the_size_limit(servers):
    # The prefix announces more than the limit; what follows does not matter.
    wire = bytes([0]) + (LIMIT + 1).to_bytes(4, "big") + b"\x0a" * 1000
    answer = assert_same_end(servers, "8", body_frames=[wire], end_with_empty_frame=True)
    assert answer.status[1] == f"Received message larger than max ({LIMIT + 1} vs. {LIMIT})", answer.status


@pytest.mark.parametrize("timeout", ["20S", "100000000S", "abc", "5x"], ids=["valid", "too-long", "letters", "unit"])
def test_grpc_timeout_headers_that_do_not_expire(servers, timeout):
    wire = message(add_sub_request().SerializeToString())
    assert_same_end(servers, body_frames=[wire], headers=[("grpc-timeout", timeout)])
    assert_as_tonic_on_the_same_server(servers, [wire], headers=[("grpc-timeout", timeout)])


def slow_request():
    req = service_pb2.ModelInferRequest(model_name="slow")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return req


def test_a_deadline_that_passes_while_the_model_runs(servers):
    wire = message(slow_request().SerializeToString())
    started = time.monotonic()
    answer = assert_same_end(servers, body_frames=[wire], headers=[("grpc-timeout", "300m")])
    assert answer.status[0] not in (None, "0"), answer.status
    assert time.monotonic() - started < 2 * SLOW_MS / 1000 + 1, "neither waited for the model"


def test_metadata_is_kept_and_reserved_headers_are_not_the_clients(servers):
    wire = message(add_sub_request().SerializeToString())
    headers = [("x-custom", "1"), ("user-agent", "raw-h2"), ("grpc-accept-encoding", "identity,gzip")]
    assert_same_end(servers, "0", body_frames=[wire], headers=headers)
    assert_as_tonic_on_the_same_server(servers, [wire], headers=headers)


@pytest.mark.parametrize("algorithm", [None, "gzip", "deflate"])
def test_tritonclient_with_and_without_compression(servers, algorithm):
    a, b = np.full((1, 16), 2.5, np.float32), np.arange(16, dtype=np.float32).reshape(1, 16)
    answers = []
    for srv in servers:
        c = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            if algorithm == "deflate":
                # Tritium, as Triton, accepts gzip only: both refuse it alike.
                with pytest.raises(InferenceServerException) as info:
                    c.infer("add_sub", add_sub_inputs(a, b), compression_algorithm=algorithm)
                answers.append((info.value.status(), info.value.message()))
                continue
            res = c.infer("add_sub", add_sub_inputs(a, b), compression_algorithm=algorithm,
                          headers={"x-client": "test"}, client_timeout=30)
            np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b)
            answers.append(res.get_response())
        finally:
            c.close()
    assert answers[0] == answers[1]


@pytest.mark.parametrize("floats", [LIMIT // 4 - 1000, LIMIT // 4 + 1000], ids=["under-the-limit", "over-the-limit"])
def test_a_very_large_request(servers, floats):
    x = np.random.default_rng(1).standard_normal(floats).astype(np.float32)
    answers = []
    for srv in servers:
        c = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            inp = grpcclient.InferInput("INPUT0", [floats], "FP32")
            inp.set_data_from_numpy(x)
            try:
                res = c.infer("identity", [inp])
            except InferenceServerException as e:
                answers.append((e.status(), e.message()))
                continue
            # The answer is over the limit too when the request is near it: both refuse it.
            np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x)
            answers.append("ok")
        finally:
            c.close()
    assert answers[0] == answers[1], answers


def test_raw_grpcio_calls(servers):
    """grpcio with bytes in and out: a malformed message and an unknown model, both ways."""
    results = []
    for srv in servers:
        with grpc.insecure_channel(srv.grpc_url) as channel:
            call = channel.unary_unary(MODEL_INFER)  # bytes, no serializers
            got = []
            for body in (b"\xff\xff\xff", add_sub_request(model="nope").SerializeToString()):
                with pytest.raises(grpc.RpcError) as info:
                    call(body, timeout=10)
                got.append((info.value.code(), info.value.details()))
            ok = call(add_sub_request().SerializeToString(), timeout=10)
            got.append(service_pb2.ModelInferResponse.FromString(ok))
            results.append(got)
    assert results[0] == results[1]
    assert results[0][0][0] == grpc.StatusCode.INTERNAL
    assert results[0][1] == (grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope' is not found")


def test_response_compression_turns_the_door_off(servers):
    """With `--grpc-infer-response-compression-level`, a client that accepts gzip gets its answer
    compressed (tonic's encoder: the door never compresses); without the flag it does not."""
    wire = message(add_sub_request().SerializeToString())
    accepts = [("grpc-accept-encoding", "gzip")]
    door, tonic = (raw_call(srv.grpc_port, [wire], headers=accepts) for srv in servers)
    assert door.data[0] == 0 and door.header("grpc-encoding", "headers") is None
    assert tonic.data[0] == 1 and tonic.header("grpc-encoding", "headers") == "gzip"
    assert door.response() == tonic.response()
    # A client that does not say it accepts gzip gets it plain from both.
    assert raw_call(servers[1].grpc_port, [wire]).data[0] == 0
