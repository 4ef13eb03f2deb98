"""The OpenAI-compatible endpoints with the real `openai` client: /v1/models, chat completions
non-streaming and streaming on tiny_chat, conversations (X-Conversation-Id) whose turns run only
their new tokens, and OpenAI-shaped errors. Every answer is checked against the reference
decoding loop in Python (tests/chat_reference.py)."""
import json
import re

import openai
import pytest
import requests

from chat_reference import Reference, render
from helpers import wait_until

MODEL = "tiny_chat"


@pytest.fixture(scope="module")
def reference():
    return Reference()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_chat_models_only(client):
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL], ids
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("add_sub")


def test_greedy_completion_matches_the_reference(client, reference):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, model!"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=30, temperature=0)
    text, finish, p, c, cached, _ = reference.generate(render(messages), max_tokens=30, temperature=0.0)
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == text
    assert r.choices[0].finish_reason == finish == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (p, c, p + c)
    assert r.usage.prompt_tokens_details.cached_tokens == 0


@pytest.mark.parametrize("seed,temperature,top_p", [(1, 1.0, 1.0), (7, 0.7, 0.9), (12345, 1.3, 0.5)])
def test_sampling_with_a_seed_matches_the_reference(client, reference, seed, temperature, top_p):
    messages = [{"role": "user", "content": f"Sample {seed}"}]
    kw = dict(max_tokens=60, temperature=temperature, top_p=top_p, seed=seed)
    r = client.chat.completions.create(model=MODEL, messages=messages, **kw)
    text, finish, p, c, _, _ = reference.generate(render(messages), **kw)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (text, finish)
    assert r.usage.completion_tokens == c
    again = client.chat.completions.create(model=MODEL, messages=messages, **kw)
    assert again.choices[0].message.content == text, "the same seed gives the same reply"


def test_a_reply_can_end_on_the_end_token(client, reference):
    # Seed 3 makes the model end its reply itself after two tokens (see the reference).
    messages = [{"role": "user", "content": "Hello there, how are you?"}]
    text, finish, _, c, _, _ = reference.generate(render(messages), max_tokens=100, temperature=1.0, seed=3)
    assert finish == "stop" and c < 100
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=100, temperature=1.0, seed=3)
    assert (r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens) == (text, "stop", c)


def test_stop_strings_end_the_reply_before_them(client, reference):
    messages = [{"role": "user", "content": "stop test"}]
    full, *_ = reference.generate(render(messages), max_tokens=40, temperature=0.0)
    stop = full[5:7]
    assert stop.strip(), full
    text, finish, *_ = reference.generate(render(messages), max_tokens=40, temperature=0.0, stop=[stop])
    assert finish == "stop" and text == full[: full.find(stop)]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, temperature=0, stop=[stop])
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (text, "stop")
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, temperature=0,
                                                 stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert stop not in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_streaming_sends_chunks_then_usage_then_done(client, reference, server):
    messages = [{"role": "user", "content": "Stream please"}]
    text, finish, p, c, _, _ = reference.generate(render(messages), max_tokens=25, temperature=0.0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=25, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert "".join(content) == text and len(content) > 5, "one chunk per token or so"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [finish]
    assert chunks[-1].choices == [] and (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (p, c)
    raw = requests.post(f"{server.base}/v1/chat/completions", json={"model": MODEL, "messages": messages,
                        "max_tokens": 3, "stream": True}, timeout=30)
    assert raw.headers["Content-Type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n")


def conversation_turns(client, reference, conv, turns, stream):
    """Runs `turns` user messages as one conversation; checks every reply and its cache use."""
    messages, cache = [], None
    for k, user in enumerate(turns):
        messages.append({"role": "user", "content": user})
        want, finish, p, c, cached, cache = reference.generate(render(messages), cache=cache, max_tokens=20,
                                                               temperature=0.0)
        kw = dict(model=MODEL, messages=messages, max_tokens=20, temperature=0, extra_headers={"X-Conversation-Id": conv})
        if stream:
            chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
            got, usage = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), chunks[-1].usage
        else:
            r = client.chat.completions.create(**kw)
            got, usage = r.choices[0].message.content, r.usage
        assert got == want, (k, got, want)
        assert (usage.prompt_tokens, usage.completion_tokens) == (p, c)
        assert usage.prompt_tokens_details.cached_tokens == cached, (k, usage)
        if k > 0:
            assert cached == held, "a later turn reuses all the conversation's cache holds"
        held = p + c - 1  # the prompt and the reply but its last token, which the next turn runs
        messages.append({"role": "assistant", "content": got})


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_runs_only_its_new_tokens(client, reference, stream):
    conversation_turns(client, reference, f"conv-{stream}", ["Hi!", "What is an actor?", "And a mailbox?"], stream)


def test_without_an_id_every_request_starts_fresh(client):
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"}]
    for _ in range(2):
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_an_unknown_conversation_with_history_starts_from_it(client, reference):
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"}]
    want, *_ = reference.generate(render(messages), max_tokens=10, temperature=0.0)
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0,
                                       extra_headers={"X-Conversation-Id": "never-seen"})
    assert r.choices[0].message.content == want and r.usage.prompt_tokens_details.cached_tokens == 0


def error_of(exc):
    body = exc.value.response.json()
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    return body["error"]


def test_bad_requests_get_openai_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert error_of(e)["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="add_sub", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}])
    assert error_of(e)["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=100000)
    assert error_of(e)["param"] == "max_tokens" and "512" in error_of(e)["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 1900}], max_tokens=500)
    assert "maximum context length is 2048" in error_of(e)["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=5)


def test_an_evicted_conversation_is_gone_until_started_again(start_server, repo_copy):
    repo = repo_copy(["tiny_chat"])
    config = repo / "tiny_chat" / "config.pbtxt"
    # Room for one conversation's cache (4 KiB a token), not two: the second evicts the first.
    text = re.sub(r'"max_sequence_state_bytes" value: \{ string_value: "\d+" \}',
                  '"max_sequence_state_bytes" value: { string_value: "450000" }', config.read_text())
    config.write_text(text)
    srv = start_server(repo)
    client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="unused", max_retries=0, timeout=60)
    first = [{"role": "user", "content": "first conversation"}]
    a = client.chat.completions.create(model=MODEL, messages=first, max_tokens=30, temperature=0,
                                       extra_headers={"X-Conversation-Id": "A"})
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "second one " * 4}], max_tokens=30,
                                   temperature=0, extra_headers={"X-Conversation-Id": "B"})
    # The eviction happens once B's turn has finished in the engine, just after its answer left.
    evicted = re.compile(r'tritium_sequence_evictions_total\{[^}]*model="tiny_chat"[^}]*\} [1-9]')
    wait_until(lambda: evicted.search(requests.get(srv.metrics_url, timeout=5).text), what="the eviction")
    follow = first + [{"role": "assistant", "content": a.choices[0].message.content}, {"role": "user", "content": "more"}]
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=MODEL, messages=follow, max_tokens=5, extra_headers={"X-Conversation-Id": "A"})
    assert e.value.status_code == 410
    err = error_of(e)
    assert err["code"] == "conversation_evicted" and "max_sequence_state_bytes" in err["message"]
    # Starting it again (no assistant message) is allowed.
    r = client.chat.completions.create(model=MODEL, messages=first, max_tokens=5, temperature=0,
                                       extra_headers={"X-Conversation-Id": "A"})
    assert r.choices[0].finish_reason == "length"


def test_concurrent_conversations_keep_to_their_own_history(client, reference):
    """Four conversations at once, interleaved turn by turn in the engine: every reply is the
    one the reference gives for that conversation's own history and cache."""
    from concurrent.futures import ThreadPoolExecutor

    def run(n):
        try:
            conversation_turns(client, reference, f"parallel-{n}", [f"I am conversation {n}.", "What did I say?",
                                                                   f"Number {n * 7}!"], stream=n % 2 == 0)
            return None
        except AssertionError as e:
            return f"conversation {n}: {e}"

    # The reference's onnxruntime session may run from several threads at once.
    with ThreadPoolExecutor(4) as pool:
        failures = [f for f in pool.map(run, range(4)) if f]
    assert not failures, failures
