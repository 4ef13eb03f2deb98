"""Triton's generate extension, Tritium against real Triton 2.51 (the nvidia-pytriton wheel's
tritonserver) on the same Python-backend models (tests/fixtures/python_models): for each body,
both servers must answer the same status, content type and JSON (each event of a stream), so
the field mapping, the output flattening, the SSE framing and the errors are Triton's."""
import json

import pytest
import requests

from test_python_backend import servers  # noqa: F401  (the fixture: Tritium and Triton 2.51)


def answer(url, model, route, body):
    r = requests.post(f"http://{url}/v2/models/{model}/{route}", data=json.dumps(body), timeout=60)
    kind = r.headers.get("Content-Type")
    if kind.startswith("text/event-stream"):
        text = r.content.decode()
        assert text == "" or text.endswith("\n\n"), text
        events = [json.loads(b[len("data: "):]) for b in text.split("\n\n")[:-1]]
        return r.status_code, kind, events
    return r.status_code, kind, r.json()


CASES = [
    ("add_sub", {"INPUT0": [1, 2, 3, 4], "INPUT1": [0.5, 0.5, 0.5, 0.5]}),
    ("add_sub", {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "id": "7", "extra": "x", "parameters": {"n": 3}}),
    ("add_sub", {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "f": 1.5}),
    ("strings", {"TEXT": ["ab", "cd"]}),
    ("strings", {"TEXT": "one"}),
    ("repeat", {"IN": [3]}),
    ("repeat", {"IN": [1, 2, 3]}),
    ("repeat", {"IN": []}),
]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize("model,body", CASES)
def test_answers_are_tritons(servers, model, body, route):  # noqa: F811
    tritium, triton = servers
    ours = answer(tritium.http_url, model, route, body)
    theirs = answer(triton.http_url, model, route, body)
    if route == "generate" and theirs[0] == 200 and isinstance(theirs[2], dict) and "error" in theirs[2]:
        # Triton sets the status from the first response and so answers 200 with the error when
        # a model sends other than one response; Tritium answers 400 with the same message.
        assert ours[0] == 400 and "exactly 1 response" in ours[2]["error"] and "exactly 1 response" in theirs[2]["error"]
        return
    assert ours == theirs


@pytest.mark.parametrize("body,words,triton_status", [
    # Triton answers 500 here (its JSON library's error keeps its INTERNAL kind); a body the
    # client got wrong is 400 in Tritium, with the same words.
    ({"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "parameters": 1},
     "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object", 500),
    ({"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "parameters": {"p": {"a": 1}}},
     "Converting keyword: 'parameters': parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.",
     400),
    ({"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "f": [1]},
     "parameter 'f' has invalid type. It should be either 'int', 'bool', or 'string'.", 400),
    ({"INPUT0": [1, 2, 3], "INPUT1": [1, 1, 1, 1]},
     "The schema can not convert input 'INPUT0' to tensor with proper shape", 400),
])
def test_refusals_are_tritons(servers, body, words, triton_status):  # noqa: F811
    tritium, triton = servers
    for route in ("generate", "generate_stream"):
        ours = answer(tritium.http_url, "add_sub", route, body)
        theirs = answer(triton.http_url, "add_sub", route, body)
        assert ours[:2] == (400, "application/json") and theirs[:2] == (triton_status, "application/json"), (ours, theirs)
        assert ours[2]["error"] == theirs[2]["error"] == words, (ours, theirs)
