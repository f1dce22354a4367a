"""The fake provider speaks OpenAI's protocol, as the official client sees it."""

from __future__ import annotations

import json

import openai
import pytest

from gateway.telemetry.usage import Usage, usage_from_provider
from tests.support.fake_upstream import PromptCache, Reply, estimate_prompt_tokens, estimate_tools_tokens
from tests.support import openai_client


@pytest.fixture
def client(upstream):
    """The official client, straight to the fake (the shared one, cleared for each test)."""
    with openai_client(upstream, "sk-test") as c:
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


# -- prompt-cache simulation -------------------------------------------------

def _long_history(n: int, chars: int = 2000) -> list[dict]:
    msgs = [{"role": "system", "content": "s" * chars}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i:04d}" + "x" * (chars - 4)})
    return msgs


def test_openai_cache_rounds_down_to_128_token_blocks_above_1024():
    cache = PromptCache("openai")
    first = _long_history(5)
    per = [estimate(m) for m in first]  # 504 tokens each
    u1 = cache.usage({"model": "gpt-4o-mini", "messages": first}, 7)
    assert u1 == {"prompt_tokens": sum(per), "completion_tokens": 7, "total_tokens": sum(per) + 7,
                  "prompt_tokens_details": {"cached_tokens": 0}}
    second = first + [{"role": "user", "content": "y" * 400}]
    u2 = cache.usage({"model": "gpt-4o-mini", "messages": second}, 7)
    matched = sum(per)  # 6 × 504 = 3024 -> 1024 + 15 × 128 = 2944
    assert u2["prompt_tokens_details"]["cached_tokens"] == 1024 + (matched - 1024) // 128 * 128 == 2944
    # An edit in message 2 keeps only messages 0-1 (1008 tokens: under 1024, so nothing).
    edited = [dict(m) for m in second]
    edited[2] = {"role": "assistant", "content": "changed"}
    assert cache.usage({"model": "gpt-4o-mini", "messages": edited}, 1)["prompt_tokens_details"]["cached_tokens"] == 0
    # Another model or other tools: a separate cache.
    assert cache.usage({"model": "gpt-4o", "messages": second}, 1)["prompt_tokens_details"]["cached_tokens"] == 0
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    u = cache.usage({"model": "gpt-4o-mini", "messages": second, "tools": tools}, 1)
    assert u["prompt_tokens"] == u2["prompt_tokens"] + estimate_tools_tokens(tools)
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    # Small prompts are never cached.
    small = [{"role": "user", "content": "hi"}]
    cache.usage({"model": "m", "messages": small}, 1)
    assert cache.usage({"model": "m", "messages": small}, 1)["prompt_tokens_details"]["cached_tokens"] == 0


def test_anthropic_cache_reads_the_prefix_and_writes_the_rest():
    cache = PromptCache("anthropic")
    first = _long_history(3)
    p1 = sum(estimate(m) for m in first)
    u1 = cache.usage({"model": "claude-haiku-4-5", "messages": first}, 5)
    assert (u1["cache_read_input_tokens"], u1["cache_creation_input_tokens"]) == (0, p1)
    second = first + [{"role": "user", "content": "z" * 800}]
    u2 = cache.usage({"model": "claude-haiku-4-5", "messages": second}, 5)
    p2 = p1 + estimate(second[-1])
    assert u2["prompt_tokens"] == p2
    assert (u2["cache_read_input_tokens"], u2["cache_creation_input_tokens"]) == (p1, p2 - p1)
    assert u2["prompt_tokens_details"] == {"cached_tokens": p1, "cache_creation_tokens": p2 - p1, "text_tokens": 0}
    # The gateway's reading: the same tokens named twice are counted once.
    assert usage_from_provider(u2) == Usage(
        prompt_tokens=p2, completion_tokens=5, cached_read_tokens=p1, cache_write_tokens=p2 - p1)
    # Lookback: a hit further than 20 blocks before the breakpoint is not found.
    long = second + [{"role": "user", "content": f"m{i}"} for i in range(21)]
    assert cache.usage({"model": "claude-haiku-4-5", "messages": long}, 1)["cache_read_input_tokens"] == 0


def test_cache_entries_expire_after_the_ttl():
    now = [0.0]
    cache = PromptCache("openai", ttl_s=300, clock=lambda: now[0])
    msgs = _long_history(4)
    cache.usage({"model": "m", "messages": msgs}, 1)
    now[0] = 299.0
    assert cache.usage({"model": "m", "messages": msgs}, 1)["prompt_tokens_details"]["cached_tokens"] > 0
    now[0] = 299.0 + 301
    assert cache.usage({"model": "m", "messages": msgs}, 1)["prompt_tokens_details"]["cached_tokens"] == 0


def test_server_reports_simulated_usage_stream_and_not(client, upstream):
    upstream.prompt_cache = PromptCache("openai")
    try:
        msgs = _long_history(4)
        r1 = client.chat.completions.create(model="gpt-4o-mini", messages=msgs)
        assert r1.usage.prompt_tokens_details.cached_tokens == 0
        upstream.enqueue(Reply(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
        assert client.chat.completions.create(model="gpt-4o-mini", messages=msgs).usage.prompt_tokens == 1
        chunks = list(client.chat.completions.create(
            model="gpt-4o-mini", messages=msgs + [{"role": "user", "content": "more"}], stream=True,
            stream_options={"include_usage": True}))
        expected = 1024 + (r1.usage.prompt_tokens - 1024) // 128 * 128
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens == expected
        upstream.clear()  # forgets cached prefixes too
        r = client.chat.completions.create(model="gpt-4o-mini", messages=msgs)
        assert r.usage.prompt_tokens_details.cached_tokens == 0
    finally:
        upstream.prompt_cache = None



def estimate(message: dict) -> int:
    return estimate_prompt_tokens([message])
