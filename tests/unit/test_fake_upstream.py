"""The fake provider speaks OpenAI's protocol, as the official client sees it."""

from __future__ import annotations

import json

import openai
import pytest

from tests.fake_upstream import FakeUpstream, Reply


@pytest.fixture(scope="module")
def upstream():
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def client(upstream):
    upstream.clear()
    upstream.default = Reply()
    with openai.OpenAI(base_url=upstream.base_url, api_key="sk-test", max_retries=0) as c:
        yield c


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]


def test_non_streaming_completion_and_recording(client, upstream):
    r = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert r.object == "chat.completion"
    assert r.model == "gpt-4o-mini"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "ok"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == (8 + 8) // 4 + 4 * 2
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    (rec,) = upstream.requests
    assert (rec.method, rec.path) == ("POST", "/v1/chat/completions")
    assert rec.headers["authorization"] == "Bearer sk-test"
    assert rec.json["messages"] == MESSAGES
    assert json.loads(rec.body) == rec.json


def test_streaming_with_usage(client, upstream):
    upstream.enqueue(Reply(chunks=["Hel", "lo", "!"], usage={
        "prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103,
        "prompt_tokens_details": {"cached_tokens": 64}}))
    stream = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello!"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 64
    # without include_usage, no usage chunk
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert all(c.choices for c in chunks)


def test_scripted_error_surfaces_as_openai_error(client, upstream):
    upstream.enqueue(Reply(status=500))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    upstream.enqueue(Reply(status=429, json_body={"error": {
        "message": "slow down", "type": "rate_limit_error", "param": None, "code": None}}))
    with pytest.raises(openai.RateLimitError, match="slow down"):
        client.chat.completions.create(model="m", messages=MESSAGES)
    # queue empty: back to the default
    assert client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content == "ok"


def test_scripted_tool_calls(client, upstream):
    calls = [{"id": "call_1", "function": {"name": "get_order", "arguments": '{"id": "W1"}'}},
             {"function": {"name": "lookup", "arguments": {"q": "x"}}}]
    upstream.enqueue(Reply(tool_calls=calls), Reply(tool_calls=calls))
    r = client.chat.completions.create(model="m", messages=MESSAGES)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content is None
    assert [(t.id, t.function.name, t.function.arguments) for t in msg.tool_calls] == [
        ("call_1", "get_order", '{"id": "W1"}'), ("call_fake_1", "lookup", '{"q":"x"}')]
    # streamed as tool_call deltas; reassemble like a client would
    acc: dict[int, dict] = {}
    for c in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            slot = acc.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            slot["id"] = tc.id or slot["id"]
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["args"] += (tc.function.arguments or "") if tc.function else ""
    assert acc[0] == {"id": "call_1", "name": "get_order", "args": '{"id": "W1"}'}
    assert acc[1]["name"] == "lookup"


def test_models_and_dropped_stream(client, upstream):
    assert "gpt-4o-mini" in [m.id for m in client.models.list()]
    upstream.enqueue(Reply(chunks=["a", "b", "c", "d"], drop_connection=True))
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
