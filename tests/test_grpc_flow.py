"""Flow control on ModelStreamInfer: a client that sends many large requests on one stream and
does not read the answers makes the server stop taking its requests (HTTP/2 back-pressure
reaches the sender) instead of buffering them without bound; once the client reads, every
request is answered, matched by id."""
import threading
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from helpers import identity_config

MODEL = identity_config("echo")

FLOATS = 64 * 1024           # 256 KiB per request and per answer
REQUESTS = 3000              # 750 MiB each way if the server buffered everything
MAX_IN_FLIGHT = 256          # src/frontends/grpc/stream.rs: requests in the engine or answered, unwritten


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_slow_reader_stops_the_server_taking_more_of_its_requests(start_server, tmp_path):
    repo = tmp_path / "models"
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "config.pbtxt").write_text(MODEL)
    srv = start_server(repo, args=["--grpc-max-message-size", str(8 << 20)])
    pid = srv.proc.pid
    payload = np.arange(FLOATS, dtype=np.float32)
    raw = payload.tobytes()
    sent = [0]

    def requests():
        for i in range(REQUESTS):
            r = service_pb2.ModelInferRequest(model_name="echo", id=str(i))
            r.inputs.add(name="INPUT0", datatype="FP32", shape=[FLOATS])
            r.raw_input_contents.append(raw)
            sent[0] += 1
            yield r

    channel = grpc.insecure_channel(srv.grpc_url, options=[("grpc.max_receive_message_length", 8 << 20),
                                                            ("grpc.max_send_message_length", 8 << 20)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        before = rss_bytes(pid)
        responses = stub.ModelStreamInfer(requests())
        # Not reading: the sender stalls once the server's in-flight and answer bounds (plus the
        # HTTP/2 windows) are full.
        stalled_at, last = None, -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if sent[0] == last:
                stalled_at = sent[0]
                break
            last = sent[0]
        assert stalled_at is not None, f"the sender never stalled ({sent[0]} sent)"
        assert stalled_at < REQUESTS // 3, f"{stalled_at} of {REQUESTS} requests taken while nobody read"
        grown = rss_bytes(pid) - before
        print(f"stalled at {stalled_at}, grown {grown >> 20} MiB")
        # Bounded: what the places allow (a request and its answer each, a place given back only
        # when its answer is written), with room for the allocator; nowhere near the 1.5 GiB of
        # buffering everything.
        bound = 2 * MAX_IN_FLIGHT * len(raw) * 2
        assert grown < bound, f"server grew {grown >> 20} MiB with {stalled_at} requests taken (bound {bound >> 20} MiB)"

        # Reading now: every request is answered, once, with its own data.
        seen = set()
        for r in responses:
            assert not r.error_message, r.error_message
            ir = r.infer_response
            assert ir.id not in seen, ir.id
            seen.add(ir.id)
            out = np.frombuffer(ir.raw_output_contents[0], dtype=np.float32)
            assert out.shape == (FLOATS,) and out[-1] == FLOATS - 1
            if len(seen) == REQUESTS:
                break
        assert seen == {str(i) for i in range(REQUESTS)}
        assert srv.alive()
    finally:
        channel.close()


def test_unary_calls_of_a_sequence_on_one_connection_keep_their_order(server):
    """perf_analyzer ends each open sequence with an END sent while that sequence's previous
    request is still in flight, on another unary call of the same connection. The server takes
    a connection's calls in the order they arrive, so the middle request runs before its END
    and neither fails ("must specify the START flag" when the END overtook it)."""
    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

    def request(seq, v, start=False, end=False):
        r = service_pb2.ModelInferRequest(model_name="accumulate")
        r.parameters["sequence_id"].uint64_param = seq
        r.parameters["sequence_start"].bool_param = start
        r.parameters["sequence_end"].bool_param = end
        r.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1]).contents.int_contents.append(v)
        return r

    def value(response):
        return int(np.frombuffer(response.raw_output_contents[0], dtype=np.int32)[0])

    try:
        for seq in range(5000, 5300):
            assert value(stub.ModelInfer(request(seq, 1, start=True))) == 1
            middle = stub.ModelInfer.future(request(seq, 2))
            end = stub.ModelInfer.future(request(seq, 3, end=True))
            assert value(middle.result(timeout=10)) == 3, seq
            assert value(end.result(timeout=10)) == 6, seq
        # Harder: every request of 32 sequences in flight at once, the sequences interleaved,
        # START to END; 8 sequences fit the model's slots, the others wait in the backlog.
        # Each answer is its sequence's running sum only if the server ran them in order.
        sequences, length = range(7000, 7032), 8
        futures = {}
        for step in range(length):
            for seq in sequences:
                v = seq % 97 + step
                futures[seq, step] = stub.ModelInfer.future(
                    request(seq, v, start=step == 0, end=step == length - 1))
        for seq in sequences:
            got = [value(futures[seq, step].result(timeout=60)) for step in range(length)]
            want = list(np.cumsum([seq % 97 + step for step in range(length)]))
            assert got == want, (seq, got, want)
    finally:
        channel.close()
