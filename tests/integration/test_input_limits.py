"""Hostile and malformed input: a clear OpenAI-shaped 4xx that names the problem, never a crash.

What the provider would accept passes through untouched (tool-call arguments
that are not JSON, unknown fields, image parts); only what is certainly invalid
is refused. Every refusal is counted as a client error.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.support.fake_upstream import Reply
from tests.support import bearer, metric_value

KEY = "sk-sieve-limits-0123456789"
AUTH = {**bearer(KEY), "content-type": "application/json"}
LIMITS = dict(max_messages=50, max_content_parts=8, max_message_chars=10_000, max_header_bytes=8_192,
              max_json_depth=16, max_body_bytes=200_000)


@pytest.fixture
def gw(start_gateway):
    return start_gateway(virtual_keys=({"key": KEY, "org": "acme"},), **LIMITS)


def post(gw, body: bytes | dict, headers: dict | None = None) -> httpx.Response:
    h = {**AUTH, **(headers or {})}
    if isinstance(body, dict):
        return gw.post("/v1/chat/completions", json=body, headers=h)
    return gw.post("/v1/chat/completions", content=body, headers=h)


def user(content) -> dict:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]}


def assert_error(resp: httpx.Response, status: int, *fragments: str) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    return error


def client_errors(gw) -> float:
    return metric_value(gw.metrics, "sieve_requests_total", org="acme", model="gpt-4o-mini", outcome="client_error")


def test_too_many_messages(gw, upstream) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}] * 51}
    error = assert_error(post(gw, body), 400, "51 messages; the limit is 50")
    assert error["code"] == "too_many_messages" and error["param"] == "messages"
    assert not upstream.requests and client_errors(gw) == 1


def test_too_many_content_parts(gw) -> None:
    body = user([{"type": "text", "text": "x"}] * 9)
    assert_error(post(gw, body), 400, "messages[0].content has 9 parts; the limit is 8")


def test_message_too_large_counts_text_parts_and_tool_arguments(gw) -> None:
    assert_error(post(gw, user("x" * 10_001)), 400, "messages[0] has 10001 characters")
    assert_error(post(gw, user([{"type": "text", "text": "x" * 6000}] * 2)), 400, "messages[0] has 12000")
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "y" * 10_500}}]}
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "go"}, call,
                                                 {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    assert_error(post(gw, body), 400, "messages[1] has 10500 characters")


def test_headers_too_large(gw) -> None:
    resp = post(gw, user("hi"), {"x-padding": "p" * 9_000})
    error = assert_error(resp, 431, "request headers are", "the limit is 8192 bytes")
    assert error["code"] == "headers_too_large"


def test_goal_header_too_long(start_gateway) -> None:
    gw = start_gateway(virtual_keys=({"key": KEY, "org": "acme"},))
    assert_error(post(gw, user("hi"), {"x-sieve-goal": "g" * 9_000}), 400, "x-sieve-goal is longer than 8192")


def test_body_too_large(gw) -> None:
    error = assert_error(post(gw, user("x" * 300_000)), 413, "the limit is 200000 bytes")
    assert error["code"] == "request_too_large"


def test_nesting_too_deep(gw) -> None:
    nested: dict = {"type": "object"}
    for _ in range(20):
        nested = {"type": "object", "properties": {"x": nested}}
    body = {**user("hi"), "tools": [{"type": "function", "function": {"name": "f", "parameters": nested}}]}
    assert_error(post(gw, body), 400, "nested too deeply: more than 16 levels")
    # Beyond what the JSON parser itself accepts, the answer is the same kind.
    assert_error(post(gw, b"[" * 5000 + b"]" * 5000), 400, "nested too deeply")


def test_invalid_utf8_and_broken_escapes(gw) -> None:
    assert_error(post(gw, b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "\xff\xfe"}]}'),
                 400, "not valid UTF-8")
    assert_error(post(gw, b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "\\ud800"}]}'),
                 400, "invalid unicode escape")


@pytest.mark.parametrize("body, fragment", [
    (b"", "request body is empty"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"model": "gpt-4o-mini", "messages": "hi"}', "'messages' must be a non-empty array"),
    (b'{"model": "gpt-4o-mini", "messages": [{"role": "wizard", "content": "hi"}]}', "messages[0].role must be one of"),
    (b'{"model": "gpt-4o-mini", "messages": [{"role": "tool", "content": "x"}]}', "tool_call_id is required"),
    (b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": 5}]}', "content must be a string"),
    (b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [7]}]}', "content[0] must be a content part"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}', "'model' is required"),
    (b'{"model": "gpt-4o-mini", "messages": [], "stream": "yes"}', "'messages' must be a non-empty array"),
])
def test_valid_json_but_wrong(gw, upstream, body: bytes, fragment: str) -> None:
    assert_error(post(gw, body), 400, fragment)
    assert not upstream.requests


def test_what_a_provider_accepts_passes_through_unchanged(gw, upstream) -> None:
    upstream.enqueue(Reply())
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json at all"}}]}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"}, image, {"type": "future_part"}]},
                call, {"role": "tool", "tool_call_id": "c1", "content": ""},
                {"role": "user", "content": "🦀 和 ünïcödé"}]
    body = {"model": "gpt-4o-mini", "messages": messages, "vendor_extension": {"deep": [1, {"x": None}]}}
    resp = post(gw, body)
    assert resp.status_code == 200, resp.text
    sent = upstream.requests[-1].json
    assert sent["messages"] == messages and sent["vendor_extension"] == body["vendor_extension"]


def test_a_body_that_never_finishes_is_a_408(start_gateway) -> None:
    gw = start_gateway(virtual_keys=({"key": KEY, "org": "acme"},), body_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as conn:
        answer: bytes | str
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sieve\r\nAuthorization: Bearer " + KEY.encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\": ")
        answer = b""
        while not answer.endswith(b"}}"):  # the head and the body may come in two segments
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 408")
    assert "did not arrive within 0.5 s (10 bytes received)" in answer
    counted = [s for m in gw.metrics.registry.collect() for s in m.samples
               if s.name == "sieve_requests_total" and s.labels["outcome"] == "client_error"]
    assert [(s.labels["org"], s.value) for s in counted] == [("acme", 1.0)], counted


def test_the_text_of_all_messages_together_is_bounded(start_gateway) -> None:
    gw = start_gateway(virtual_keys=({"key": KEY, "org": "acme"},), **{**LIMITS, "max_body_bytes": 1_000_000},
                       max_request_chars=20_000)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "t" * 9_000}] * 3}
    error = assert_error(post(gw, body), 400, "'messages' have 27000 characters of text together",
                         "the limit is 20000")
    assert (error["code"], error["param"]) == ("messages_too_large", "messages")


def test_by_default_a_history_beyond_any_context_window_is_refused(gateway, upstream) -> None:
    """8,000,000 characters (a 2M-token history) by default; a 30 MB history took over half a
    minute of a core to prune, for a request no provider would accept."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "w " * 1_350_000}] * 3}
    resp = gateway.post("/v1/chat/completions", json=body)
    error = assert_error(resp, 400, "'messages' have 8100000 characters of text together", "the limit is 8000000")
    assert error["code"] == "messages_too_large"
    assert upstream.requests == []
