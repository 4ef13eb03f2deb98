"""A sequence backlog whose clients all go away gives its memory back (issue 16, point 4): 10,000
sequence STARTs wait for the one slot of a model, each carrying 8 KiB, over 40 gRPC streams; the
clients cancel their streams; the backlog and the pending count return to 0 and the server's RSS
returns to within a quarter of what the backlog took (the allocator's free pages are handed back
to the system by the server's trimmer, src/memory.rs), round after round."""
import queue
import time

import grpc
import pytest
import requests
from tritonclient.grpc import service_pb2, service_pb2_grpc

from helpers import wait_until

STARTS = 10_000
PER_STREAM = 250  # within a stream's 256 requests in the engine at once
PAD = "x" * 8192


@pytest.fixture
def srv(start_server, repo_copy):
    repo = repo_copy(["accumulate"])
    one = repo / "acc_one"
    (one / "1").mkdir(parents=True)
    (one / "1" / "model.onnx").write_bytes((repo / "accumulate" / "1" / "model.onnx").read_bytes())
    (one / "config.pbtxt").write_text(
        (repo / "accumulate" / "config.pbtxt").read_text()
        .replace('name: "accumulate"', 'name: "acc_one"').replace("max_batch_size: 4", "max_batch_size: 1")
        .replace("count: 2", "count: 1").replace("5000000", "600000000")
        + 'parameters { key: "max_sequence_backlog" value: { string_value: "20000" } }\n')
    return start_server(repo)


def rss_mib(srv):
    for line in open(f"/proc/{srv.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def metric(srv, name):
    for line in requests.get(srv.metrics_url, timeout=10).text.splitlines():
        if line.startswith(name + "{") and 'model="acc_one"' in line:
            return float(line.split()[-1])
    raise AssertionError(f"no {name} for acc_one")


def start(sid, pad=""):
    r = service_pb2.ModelInferRequest(model_name="acc_one", id=str(sid))
    r.parameters["sequence_id"].int64_param = sid
    r.parameters["sequence_start"].bool_param = True
    r.parameters["pad"].string_param = pad
    r.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1]).contents.int_contents.append(1)
    return r


def test_ten_thousand_cancelled_starts_give_their_memory_back(srv):
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.ModelInfer(start(1), timeout=30)  # sequence 1 holds the only slot throughout
        before = rss_mib(srv)
        for rnd in range(2):
            streams = []
            for k in range(STARTS // PER_STREAM):
                q = queue.Queue()
                answers = stub.ModelStreamInfer(iter(q.get, None))
                for i in range(PER_STREAM):
                    q.put(start(1_000_000 * (rnd + 1) + k * PER_STREAM + i, PAD))
                streams.append((q, answers))
            wait_until(lambda: metric(srv, "tritium_sequence_backlog") == STARTS, 120, "the backlog to fill")
            peak = rss_mib(srv)
            took = peak - before
            assert took >= 80, f"the backlog took only {took:.0f} MiB: the test would prove nothing"
            for q, answers in streams:
                answers.cancel()
                q.put(None)
            wait_until(lambda: metric(srv, "tritium_sequence_backlog") == 0
                       and metric(srv, "nv_inference_pending_request_count") == 0, 60, "the backlog to empty")
            assert metric(srv, "tritium_sequence_active") == 1
            deadline = time.monotonic() + 20
            while rss_mib(srv) > before + took / 4 and time.monotonic() < deadline:
                time.sleep(0.5)
            after = rss_mib(srv)
            assert after <= before + took / 4, \
                f"round {rnd}: RSS {before:.0f} MiB, {peak:.0f} with the backlog, {after:.0f} after it was cancelled"
        # The slot's sequence carries on; a new sequence is served once it ends.
        nxt = start(2)
        nxt.parameters["sequence_start"].bool_param = False
        nxt.parameters["sequence_id"].int64_param = 1
        nxt.parameters["sequence_end"].bool_param = True
        assert stub.ModelInfer(nxt, timeout=30).outputs[0].name == "OUTPUT"
        assert stub.ModelInfer(start(3), timeout=30).outputs[0].name == "OUTPUT"
