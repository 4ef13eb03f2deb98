"""Order on a gRPC stream, through tritonclient's streaming API against the real binary: the
answers of one sequence arrive in the order its requests were sent, and the responses of one
decoupled request in the order the model produced them, however the requests of many sequences
interleave on the stream. Bursts of 8 sequences x 40 steps, sent back to back and repeated, on
the direct strategy with 2 instances and the `oldest` strategy with 1 and 2; a single answer that
overtakes an earlier one of its sequence fails the test.
"""
import queue
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

SEQUENCES = 8
STEPS = 40
ROUNDS = 4


def set_instance_count(model_dir, count):
    config = model_dir / "config.pbtxt"
    text = config.read_text()
    text, n = re.subn(r"count: \d+", f"count: {count}", text)
    assert n == 1, f"expected one instance_group count in {config}"
    config.write_text(text)


def value_input(v):
    t = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def burst(client, answers, model, round_no):
    """Sends every step of every sequence, interleaved across sequences, without waiting; returns
    the answers in the order they arrived as (sequence index, step, value)."""
    ids = [9000 + 100 * round_no + s if s % 2 == 0 else f"conv-{round_no}-{s}" for s in range(SEQUENCES)]
    for step in range(STEPS):
        for s, seq in enumerate(ids):
            client.async_stream_infer(model, [value_input(s + 1)], request_id=f"{s}:{step}", sequence_id=seq,
                                      sequence_start=step == 0, sequence_end=step == STEPS - 1)
    arrived = []
    for _ in range(SEQUENCES * STEPS):
        result, error = answers.get(timeout=60)
        assert error is None, error
        s, step = map(int, result.get_response().id.split(":"))
        arrived.append((s, step, int(result.as_numpy("OUTPUT")[0][0])))
    return arrived


@pytest.mark.parametrize("model,instances", [("accumulate", 2), ("accumulate_oldest", 1), ("accumulate_oldest", 2)])
def test_a_sequences_answers_arrive_in_the_order_sent(start_server, repo_copy, model, instances):
    repo = repo_copy([model])
    set_instance_count(repo / model, instances)
    srv = start_server(repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        overtaken = []
        for round_no in range(ROUNDS):
            arrived = burst(client, answers, model, round_no)
            last_step = [-1] * SEQUENCES
            for position, (s, step, value) in enumerate(arrived):
                # The engine ran each sequence in order: the value is the running sum either way.
                assert value == (s + 1) * (step + 1), f"sequence {s} step {step} answered {value}"
                if step != last_step[s] + 1:
                    overtaken.append(f"round {round_no}: sequence {s} step {step} arrived {position}th, "
                                     f"after step {last_step[s]}")
                last_step[s] = max(last_step[s], step)
            assert last_step == [STEPS - 1] * SEQUENCES
        assert not overtaken, f"{len(overtaken)} answers out of order, e.g. {overtaken[:5]}"
    finally:
        client.stop_stream()
        client.close()


def test_a_decoupled_requests_responses_arrive_in_the_order_produced(server):
    """Many decoupled requests at once on one stream, 2 instances: each request's responses
    (IDX 0, 1, 2, ...) arrive in order, however the requests interleave."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    requests, elements = 16, 20
    try:
        for r in range(requests):
            data = np.arange(r * 100, r * 100 + elements, dtype=np.int32)
            inp = grpcclient.InferInput("IN", [elements], "INT32")
            inp.set_data_from_numpy(data)
            client.async_stream_infer("repeat_int32", [inp], request_id=str(r))
        seen = {r: [] for r in range(requests)}
        for _ in range(requests * elements):
            result, error = answers.get(timeout=60)
            assert error is None, error
            r = int(result.get_response().id)
            seen[r].append((int(result.as_numpy("IDX")[0]), int(result.as_numpy("OUT")[0])))
        for r, got in seen.items():
            assert got == [(i, r * 100 + i) for i in range(elements)], f"request {r}: {got}"
    finally:
        client.stop_stream()
        client.close()
