"""Stateful sequences through tritonclient over HTTP and over a gRPC stream, on the bundled
accumulator models (the running sum lives in the engine as implicit state): interleaved
sequences with uint64 and string IDs, START/END, idle timeout, backlog order, `oldest`
batching, and 1,000 concurrent sequences with every result checked."""
import asyncio
import queue
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def value_input(proto, v):
    t = proto.InferInput("INPUT", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def step(client, model, seq, v, start=False, end=False):
    res = client.infer(model, [value_input(httpclient, v)], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(res.as_numpy("OUTPUT")[0][0])


def test_interleaved_sequences_over_http_with_int_and_string_ids(server):
    c = server.client
    seqs = {101: [3, 4, 5], "chat-a": [10, 20, 30], 102: [1, 1, 1], "chat-b": [7, 0, -7]}
    totals = {k: 0 for k in seqs}
    for i in range(3):
        for k, values in seqs.items():
            totals[k] += values[i]
            got = step(c, "accumulate", k, values[i], start=i == 0, end=i == 2)
            assert got == totals[k], (k, i, got, totals[k])
    # Only the declared output comes back: the state output is the engine's.
    res = c.infer("accumulate", [value_input(httpclient, 1)], sequence_id=55, sequence_start=True, sequence_end=True)
    assert [o["name"] for o in res.get_response()["outputs"]] == ["OUTPUT"]


def test_sequence_errors_are_tritons(server):
    c = server.client
    with pytest.raises(InferenceServerException) as info:
        step(c, "accumulate", 999, 1)
    assert "must specify the START flag on the first request of the sequence" in info.value.message()
    assert info.value.status() == "400"
    with pytest.raises(InferenceServerException) as info:
        c.infer("accumulate", [value_input(httpclient, 1)])
    assert "must specify a non-zero or non-empty correlation ID" in info.value.message()
    # After END the sequence is gone.
    step(c, "accumulate", 998, 1, start=True, end=True)
    with pytest.raises(InferenceServerException):
        step(c, "accumulate", 998, 1)
    r = server.post("/v2/models/accumulate/infer", {"parameters": {"sequence_id": -4, "sequence_start": True},
                                                    "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}]})
    assert r.status_code == 400 and "sequence_id" in r.json()["error"]


def test_sequences_over_one_grpc_stream(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        expected = {}
        # Sequences of one stream are sent in turn; each sequence's requests run in order.
        for i in range(4):
            for k in (7001, 7002, "s-7003"):
                v = (i + 1) * (2 if k == 7002 else 1)
                expected.setdefault(k, 0)
                expected[k] += v
                c.async_stream_infer("accumulate", [value_input(grpcclient, v)], request_id=f"{k}:{i}",
                                     sequence_id=k, sequence_start=i == 0, sequence_end=i == 3)
        got = {}
        for _ in range(12):
            result, error = answers.get(timeout=30)
            assert error is None, error.message()
            rid = result.get_response().id
            got[rid] = int(result.as_numpy("OUTPUT")[0][0])
        for k in (7001, 7002, "s-7003"):
            assert got[f"{k}:3"] == expected[k]
            partial = [got[f"{k}:{i}"] for i in range(4)]
            assert partial == sorted(partial), "each sequence's requests ran in order"
    finally:
        c.stop_stream()
        c.close()


IDLE_CONFIG = """
name: "acc_idle"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  max_sequence_idle_microseconds: 300000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


@pytest.fixture
def acc_repo(repo_copy):
    repo = repo_copy(["accumulate"])
    (repo / "acc_idle" / "1").mkdir(parents=True)
    (repo / "acc_idle" / "config.pbtxt").write_text(IDLE_CONFIG)
    (repo / "acc_idle" / "1" / "model.onnx").write_bytes((repo / "accumulate" / "1" / "model.onnx").read_bytes())
    # One slot only: max_batch_size 1 with one instance.
    (repo / "acc_one").mkdir()
    (repo / "acc_one" / "1").mkdir()
    (repo / "acc_one" / "1" / "model.onnx").write_bytes((repo / "accumulate" / "1" / "model.onnx").read_bytes())
    (repo / "acc_one" / "config.pbtxt").write_text(
        IDLE_CONFIG.replace('"acc_idle"', '"acc_one"').replace("max_batch_size: 4", "max_batch_size: 1")
        .replace("300000", "10000000")
        + 'parameters { key: "max_sequence_backlog" value: { string_value: "2" } }\n')
    return repo


def test_idle_sequence_loses_its_slot(start_server, acc_repo):
    srv = start_server(acc_repo)
    c = srv.client
    assert step(c, "acc_idle", 1, 5, start=True) == 5
    assert step(c, "acc_idle", 1, 5) == 10
    time.sleep(0.8)
    with pytest.raises(InferenceServerException) as info:
        step(c, "acc_idle", 1, 5)
    assert "START" in info.value.message()
    assert step(c, "acc_idle", 1, 5, start=True) == 5, "a new START works"


def test_backlog_starts_sequences_in_order_as_slots_free(start_server, acc_repo):
    srv = start_server(acc_repo)
    c = srv.client
    assert step(c, "acc_one", 1, 1, start=True) == 1
    done = {}

    def run(seq, v, end):
        client = httpclient.InferenceServerClient(srv.http_url)
        done[seq] = step(client, "acc_one", seq, v, start=True, end=end)
        client.close()

    # Sequence 2 starts and keeps its slot; sequence 3 arrives later and must wait behind it.
    t2 = threading.Thread(target=run, args=(2, 20, False))
    t2.start()
    time.sleep(0.2)
    t3 = threading.Thread(target=run, args=(3, 30, True))
    t3.start()
    time.sleep(0.4)
    assert not done, "sequences 2 and 3 wait for the only slot"
    # The backlog (max_sequence_backlog 2) is full: a fourth sequence is refused at once.
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as info:
        step(c, "acc_one", 4, 1, start=True, end=True)
    assert info.value.status() == "503" and "backlog is full" in info.value.message()
    assert time.monotonic() - started < 1
    assert step(c, "acc_one", 1, 1, end=True) == 2
    t2.join(10)
    assert done.get(2) == 20, "the first sequence in the backlog gets the freed slot"
    time.sleep(0.4)
    assert 3 not in done, "the later sequence still waits: the slot belongs to sequence 2"
    assert step(c, "acc_one", 2, 2, end=True) == 22
    t3.join(10)
    assert done.get(3) == 30


def test_oldest_strategy_batches_sequences_together(server):
    before = server.client.get_inference_statistics("accumulate_oldest")["model_stats"][0]

    def run(seq):
        client = httpclient.InferenceServerClient(server.http_url)
        total = 0
        for i in range(5):
            total += seq
            assert step(client, "accumulate_oldest", seq, seq, start=i == 0, end=i == 4) == total
        client.close()

    threads = [threading.Thread(target=run, args=(s,)) for s in range(1, 17)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    after = server.client.get_inference_statistics("accumulate_oldest")["model_stats"][0]
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 80
    assert executions < inferences, f"{executions} executions for {inferences} inferences"


def test_a_thousand_concurrent_sequences_without_cross_talk(server):
    """1,000 sequences at once on accumulate_oldest (1,024 candidate places), 5 requests each,
    interleaved on one asyncio gRPC client; every running sum is checked."""
    async def main():
        c = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            async def sequence(k):
                total = 0
                for i in range(5):
                    v = (k * 7 + i) % 50
                    total += v
                    res = await c.infer("accumulate_oldest", [value_input(grpcclient, v)], sequence_id=10_000 + k,
                                        sequence_start=i == 0, sequence_end=i == 4)
                    assert int(res.as_numpy("OUTPUT")[0][0]) == total, (k, i)
                return total
            started = time.monotonic()
            totals = await asyncio.wait_for(asyncio.gather(*(sequence(k) for k in range(1000))), timeout=240)
            return totals, time.monotonic() - started
        finally:
            await c.close()
    totals, elapsed = asyncio.run(main())
    assert len(totals) == 1000
    print(f"1000 sequences x 5 requests in {elapsed:.1f}s")
