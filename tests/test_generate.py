"""Triton's generate extension: POST /v2/models/{m}[/versions/{v}]/generate and generate_stream,
with plain `requests` (server-sent events parsed by hand), against a normal model (add_sub),
the built-in decoupled model repeat_int32, and the tiny_chat language model."""
import json

import pytest
import requests

from chat_reference import Reference, render


def sse_events(resp):
    """The `data:` payloads of an event stream, checking Triton's framing (`data: ...\\n\\n`)."""
    body = resp.content.decode()
    assert body == "" or body.endswith("\n\n"), body
    events = []
    for block in body.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        events.append(json.loads(block[len("data: "):]))
    return events


def post(server, model, route, body, version=None, stream=False):
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + f"/{route}"
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(server.base + path, data=data, stream=stream, timeout=60)


def test_generate_maps_fields_to_inputs_and_flattens_outputs(server):
    body = {"INPUT0": [1.0] * 16, "INPUT1": [2.0] * 16, "id": "req-7"}
    r = post(server, "add_sub", "generate", body)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    data = r.json()
    assert data["model_name"] == "add_sub" and data["model_version"] == "1" and data["id"] == "req-7"
    assert data["OUTPUT0"] == [3.0] * 16 and data["OUTPUT1"] == [-1.0] * 16
    r = post(server, "add_sub", "generate", body, version=1)
    assert r.status_code == 200 and r.json()["OUTPUT0"] == [3.0] * 16


def test_generate_stream_sends_one_event_per_response_of_a_decoupled_model(server):
    r = post(server, "repeat_int32", "generate_stream", {"IN": [4, 5, 6], "DELAY": [1, 1, 1]})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    events = sse_events(r)
    assert [(e["OUT"], e["IDX"]) for e in events] == [(4, 0), (5, 1), (6, 2)]
    assert all(e["model_name"] == "repeat_int32" for e in events)
    # A normal model's one response is one event.
    r = post(server, "add_sub", "generate_stream", {"INPUT0": [1.0] * 16, "INPUT1": [1.0] * 16})
    assert [e["OUTPUT0"] for e in sse_events(r)] == [[2.0] * 16]
    # No response at all (an empty IN): the stream ends without an event.
    r = post(server, "repeat_int32", "generate_stream", {"IN": []})
    assert r.status_code == 200 and sse_events(r) == []


def test_events_arrive_as_the_model_sends_them(server):
    r = post(server, "repeat_int32", "generate_stream", {"IN": [1, 2], "DELAY": [10, 800]}, stream=True)
    lines = r.iter_lines()
    first = next(line for line in lines if line)
    assert json.loads(first[len(b"data: "):])["OUT"] == 1, "the first event comes before the second is made"
    r.close()
    assert requests.get(server.base + "/v2/health/live", timeout=5).status_code == 200


def test_generate_needs_exactly_one_response(server):
    r = post(server, "repeat_int32", "generate", {"IN": [1, 2]})
    assert r.status_code == 400 and "exactly 1 response" in r.json()["error"]
    r = post(server, "repeat_int32", "generate", {"IN": [9]})
    assert r.status_code == 200 and r.json()["OUT"] == 9


def test_errors_before_inference_are_json_with_tritons_words(server):
    cases = [
        ("nope", {"x": 1}, 404, "nope"),
        ("add_sub", {"INPUT0": [1.0] * 16, "parameters": 1}, 400, "Expected JSON object for keyword: 'parameters'"),
        ("add_sub", {"parameters": {"nested": {"a": 1}}}, 400,
         "Converting keyword: 'parameters': parameter 'nested' has invalid type."),
        ("add_sub", {"INPUT0": [1.0] * 3, "INPUT1": [1.0] * 16}, 400, "can not convert input 'INPUT0'"),
        ("add_sub", {"INPUT0": [1.0] * 16}, 400, "INPUT1"),
        ("add_sub", "{not json", 400, "failed to parse"),
    ]
    for route in ("generate", "generate_stream"):
        for model, body, status, words in cases:
            r = post(server, model, route, body)
            assert r.status_code == status, (route, body, r.text)
            assert r.headers["Content-Type"] == "application/json", (route, body)
            assert words in r.json()["error"], (route, body, r.text)


def test_an_error_as_first_response_sets_the_stream_status(server):
    # repeat_int32 refuses DELAY of the wrong length once it runs: the first response is the error.
    r = post(server, "repeat_int32", "generate_stream", {"IN": [1, 2], "DELAY": [1]})
    assert r.status_code == 400
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    events = sse_events(r)
    assert len(events) == 1 and "DELAY" in events[0]["error"]


def test_wrong_method_is_405(server):
    r = requests.get(server.base + "/v2/models/add_sub/generate", timeout=5)
    assert r.status_code == 405


@pytest.fixture(scope="module")
def reference():
    return Reference()


def test_the_language_model_streams_tokens_that_match_the_reference(server, reference):
    prompt = render([{"role": "user", "content": "Tell me about actors."}])
    body = {"text_input": prompt, "max_tokens": 24, "temperature": 0.0, "stream": True,
            "parameters": {"sequence_id": "gen-1", "sequence_start": True, "sequence_end": True}}
    r = post(server, "tiny_chat", "generate_stream", body)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    text, finish, prompt_tokens, completion_tokens, _, _ = reference.generate(prompt, max_tokens=24, temperature=0.0)
    assert "".join(e["text_output"] for e in events) == text
    assert len(events) >= 2, "one event per token, then the last with the counts"
    assert events[-1]["finish_reason"] == finish
    assert (events[-1]["prompt_tokens"], events[-1]["completion_tokens"]) == (prompt_tokens, completion_tokens)
    # Without `stream`, one response: `generate` takes it.
    body["stream"] = False
    r = post(server, "tiny_chat", "generate", body)
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == text


def test_grpc_stream_clients_get_the_same_decoding(server, reference):
    """ModelStreamInfer on the same decoupled model: one response per token, then the counts;
    a conversation's second turn reuses its cache, as over HTTP."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    results = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))

    def turn(prompt, start):
        text_in = grpcclient.InferInput("text_input", [1], "BYTES")
        text_in.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
        inputs = [text_in]
        for name, dtype, value in [("max_tokens", "INT32", np.int32), ("temperature", "FP32", np.float32),
                                   ("stream", "BOOL", np.bool_)]:
            t = grpcclient.InferInput(name, [1], dtype)
            t.set_data_from_numpy(np.array([{"max_tokens": 16, "temperature": 0, "stream": True}[name]], dtype=value))
            inputs.append(t)
        client.async_stream_infer("tiny_chat", inputs, sequence_id="grpc-conv", sequence_start=start)
        pieces, last = [], None
        while True:
            result, error = results.get(timeout=60)
            assert error is None, error
            pieces.append(result.as_numpy("text_output")[0].decode())
            if result.as_numpy("finish_reason") is not None:
                last = result
                break
        return "".join(pieces), last

    messages = [{"role": "user", "content": "over gRPC"}]
    want, finish, p, c, cached, cache = reference.generate(render(messages), max_tokens=16, temperature=0.0)
    got, last = turn(render(messages), True)
    assert got == want and last.as_numpy("finish_reason")[0].decode() == finish
    assert (last.as_numpy("prompt_tokens")[0], last.as_numpy("completion_tokens")[0]) == (p, c)
    messages += [{"role": "assistant", "content": got}, {"role": "user", "content": "again"}]
    want, _, _, _, cached, _ = reference.generate(render(messages), cache=cache, max_tokens=16, temperature=0.0)
    got, last = turn(render(messages), False)
    assert got == want and last.as_numpy("cached_tokens")[0] == cached > 0
    client.stop_stream()
    client.close()


def metric(text, family, model):
    """The value of `family`'s series for `model` (the first one that matches)."""
    import re

    m = re.search(rf'^{family}\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def test_streaming_figures_per_model(server):
    """Time to first response and between responses (histograms), and the requests in flight."""
    import re
    import threading

    from helpers import wait_until

    url = server.metrics_url
    # Earlier tests' requests (one left by its client) have ended.
    wait_until(lambda: metric(requests.get(url, timeout=5).text, "tritium_inference_in_flight", "repeat_int32") == 0,
               what="no request in flight")
    before = requests.get(url, timeout=5).text
    first0 = metric(before, "tritium_time_to_first_response_us_count", "repeat_int32") or 0
    gaps0 = metric(before, "tritium_inter_response_us_count", "repeat_int32") or 0
    # Three responses 300 ms apart: in flight all the while.
    done = threading.Event()

    def slow():
        post(server, "repeat_int32", "generate_stream", {"IN": [1, 2, 3], "DELAY": [300, 300, 300]})
        done.set()

    threading.Thread(target=slow).start()
    wait_until(lambda: metric(requests.get(url, timeout=5).text, "tritium_inference_in_flight", "repeat_int32") == 1,
               what="the request in flight")
    assert done.wait(10)
    wait_until(lambda: metric(requests.get(url, timeout=5).text, "tritium_inference_in_flight", "repeat_int32") == 0,
               what="no request in flight")
    after = requests.get(url, timeout=5).text
    assert metric(after, "tritium_time_to_first_response_us_count", "repeat_int32") == first0 + 1
    assert metric(after, "tritium_inter_response_us_count", "repeat_int32") == gaps0 + 2
    # Both gaps were about 300 ms: none at or under 250 ms, both at or under 500 ms.
    def buckets(text):
        found = re.findall(r'^tritium_inter_response_us_bucket\{[^}]*model="repeat_int32"[^}]*le="([^"]+)"\} (\S+)$',
                           text, re.M)
        return {le: float(v) for le, v in found}

    b0, b1 = buckets(before), buckets(after)
    assert b1["250000"] - b0.get("250000", 0) == 0 and b1["500000"] - b0.get("500000", 0) == 2, (b0, b1)
    # A non-decoupled model has the first-response histogram and no gaps.
    post(server, "add_sub", "generate", {"INPUT0": [1.0] * 16, "INPUT1": [1.0] * 16})
    text = requests.get(url, timeout=5).text
    assert metric(text, "tritium_time_to_first_response_us_count", "add_sub") >= 1
    assert metric(text, "tritium_inter_response_us_count", "add_sub") is None
