"""The provider fails: refused, hung, erroring, cut off mid-stream, or speaking broken SSE.

One Redis-metered gateway (real uvicorn, real redis-server, the fake upstream
as a real HTTP server). Each test asserts what the caller gets (status and an
OpenAI-shaped error, or the provider's own error unchanged), how the request
is counted in ``sieve_requests_total{outcome}``, and the Redis budget state
afterwards: nothing left reserved, and only what the provider reported charged.

Stream accounting (``gateway.exchange.accounting``): a stream is settled at the usage the
provider reported, even when it failed after reporting it; without it, a stream
the provider started and that ended anyhow (cut by the upstream, by the client,
or never carrying usage) is settled at its prompt and what it streamed (issue 28:
the provider bills that), and one refused in-stream before any output is released.
"""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import openai
import orjson
import pytest

from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import MODEL, chat_body
from tests.integration.fault_helpers import (
    AUTH, DEAD_MODEL, LIMIT, USAGE, assert_openai_error, metered_settings, outcomes, settle_down,
)
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import NO_PRUNING, openai_client

pytestmark = [pytest.mark.redis, needs_redis, pytest.mark.upstream_default(Reply(content="ok", usage=USAGE))]


@pytest.fixture(scope="module")
def gw(module_upstream_server: FakeUpstream, redis: RedisServer) -> Iterator[GatewayServer]:
    with GatewayServer(metered_settings(module_upstream_server, redis)) as server:
        yield server


@pytest.fixture
def before(gw: GatewayServer, redis: RedisServer) -> tuple[int, int]:
    """(reserved, settled) before the test: reserved is always 0 between tests."""
    state = settle_down(gw, redis)
    assert state[0] == 0
    return state


def post(gw: GatewayServer, stream: bool = False, model: str = MODEL, **extra) -> httpx.Response:
    body = chat_body(max_tokens=5000, stream=stream, **extra)
    body["model"] = model
    return httpx.post(gw.base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10)


def counted(gw: GatewayServer, previous: dict[str, float], model: str = MODEL) -> dict[str, float]:
    """Outcomes counted since ``previous`` (only those that moved)."""
    gw.wait_idle()
    now = outcomes(gw, model)
    return {k: v - previous.get(k, 0.0) for k, v in now.items() if v != previous.get(k, 0.0)}


def sse_events(raw: bytes) -> list[bytes]:
    return [e for e in raw.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


# -- no answer -------------------------------------------------------------------------------------

def test_refused_connection_is_a_502_and_releases(gw, redis, before) -> None:
    seen = outcomes(gw, DEAD_MODEL)
    response = post(gw, model=DEAD_MODEL)
    assert response.status_code == 502
    assert_openai_error(response.json(), type="upstream_error", code="upstream_unavailable",
                        says="cannot reach upstream")
    assert int(response.headers["x-sieve-budget-remaining-tokens"]) > 0  # it was metered, then given back
    assert counted(gw, seen, DEAD_MODEL) == {"upstream_error": 1}
    assert settle_down(gw, redis) == before


@pytest.mark.parametrize("stream", [False, True])
def test_hang_before_headers_is_a_504(gw, module_upstream, redis, before, stream) -> None:
    module_upstream.enqueue(Reply(delay_s=1.5))
    seen = outcomes(gw)
    started = time.monotonic()
    response = post(gw, stream=stream)
    assert time.monotonic() - started < 1.4  # the read timeout (0.5 s), not the provider's 1.5 s
    assert response.status_code == 504
    assert_openai_error(response.json(), type="upstream_timeout", code="upstream_timeout",
                        says="did not answer in time")
    assert counted(gw, seen) == {"upstream_error": 1}
    assert settle_down(gw, redis) == before


def test_hang_mid_body_is_a_504(gw, module_upstream, redis, before) -> None:
    module_upstream.enqueue(Reply(stall_mid_body_s=1.5, usage=USAGE))
    seen = outcomes(gw)
    response = post(gw)
    assert response.status_code == 504
    assert_openai_error(response.json(), type="upstream_timeout", code="upstream_timeout",
                        says="stopped answering")
    assert counted(gw, seen) == {"upstream_error": 1}
    assert settle_down(gw, redis) == before


# -- the provider's own errors -----------------------------------------------------------------------

@pytest.mark.parametrize("status,headers,error", [
    (500, {}, {"message": "The server had an error", "type": "server_error", "param": None, "code": None}),
    (429, {"retry-after": "7", "x-ratelimit-remaining-requests": "0"},
     {"message": "Rate limit reached for gpt-4o-mini", "type": "requests", "param": None,
      "code": "rate_limit_exceeded"}),
    (400, {}, {"message": "'messages' must contain the word 'json'", "type": "invalid_request_error",
               "param": "messages", "code": None}),
])
@pytest.mark.parametrize("stream", [False, True])
def test_provider_errors_pass_through_unchanged(gw, module_upstream, redis, before, status, headers, error,
                                                stream) -> None:
    module_upstream.enqueue(Reply(status=status, json_body={"error": error}, headers=headers))
    seen = outcomes(gw)
    response = post(gw, stream=stream)
    assert response.status_code == status
    assert response.json() == {"error": error}  # byte for byte the provider's body
    for name, value in headers.items():
        assert response.headers[name] == value
    assert int(response.headers["x-sieve-budget-remaining-tokens"]) <= LIMIT - before[1] - 5000  # held, then:
    assert response.headers["x-sieve-request-id"].startswith("req_")
    assert counted(gw, seen) == {"upstream_error": 1}
    assert settle_down(gw, redis) == before


def test_non_json_error_page_becomes_an_openai_error(gw, module_upstream, redis, before) -> None:
    page = b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>"
    module_upstream.enqueue(Reply(status=503, raw_body=page, headers={"retry-after": "30"}))
    seen = outcomes(gw)
    response = post(gw)
    assert response.status_code == 503  # the provider's status stays
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["retry-after"] == "30"
    error = assert_openai_error(response.json(), type="upstream_error", code="upstream_error_body",
                                says="upstream answered 503 with a non-JSON body (text/html")
    assert "503 Service Temporarily Unavailable" in error["message"]  # the gist of what it said
    assert counted(gw, seen) == {"upstream_error": 1}
    assert settle_down(gw, redis) == before


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_that_compresses_never_reaches_the_client_undeclared(gw, module_upstream, redis, before,
                                                                        stream) -> None:
    """Providers gzip whatever the request accepts; the gateway relays bytes as they come."""
    module_upstream.enqueue(Reply(content="hello", usage=USAGE, compress=True))
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    response = post(gw, stream=stream, **extra)
    assert response.status_code == 200
    if stream:
        assert b"hello" in response.content and sse_events(response.content)[-1] == b"data: [DONE]"
    else:
        assert response.json()["choices"][0]["message"]["content"] == "hello"
    assert settle_down(gw, redis) == (0, before[1] + USAGE["total_tokens"])  # and its usage was read


@pytest.mark.parametrize("body", [
    {"id": "c", "object": "chat.completion", "model": MODEL,
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 400}, "finish_reason": "stop"}]},
    {"id": "c", "object": "chat.completion", "model": MODEL, "usage": None,
     "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
         {"id": "t", "type": "function", "function": {"name": "f", "arguments": "y" * 399}}]}}]},
], ids=["content", "tool_call"])
def test_an_answer_without_usage_is_charged_at_an_estimate(gw, module_upstream, redis, before, body) -> None:
    """Served is spent: a provider that reports no usage must not make requests free."""
    module_upstream.enqueue(Reply(json_body=body))
    seen = outcomes(gw)
    response = post(gw)
    assert response.status_code == 200 and response.json() == body
    assert counted(gw, seen) == {"passthrough": 1}
    # The prompt as reserved (its estimate: the most it was billed) + 400 chars / 4 of the answer.
    assert settle_down(gw, redis) == (0, before[1] + prompt_held(response, before) + 100)


# -- streams cut short or malformed ------------------------------------------------------------------

def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> bytes:
    body = {"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE_CHUNK = b"data: " + orjson.dumps({"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1,
                                        "model": MODEL, "choices": [], "usage": USAGE}) + b"\n\n"
HEAD = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"})]


def stream_raw(gw: GatewayServer, include_usage: bool) -> tuple[int, bytes]:
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", headers=AUTH, timeout=10,
                      json=chat_body(max_tokens=5000, stream=True, **extra)) as response:
        return response.status_code, response.read()


def prompt_held(response: httpx.Response, before: tuple[int, int]) -> int:
    """The prompt part of the request's reservation (its estimate; the answer's cap is 5,000)."""
    return LIMIT - before[1] - int(response.headers["x-sieve-budget-remaining-tokens"]) - 5000


def charged_what_was_streamed(gw: GatewayServer, redis: RedisServer, before: tuple[int, int]) -> int:
    """A stream cut without its usage: settled at its prompt and what it streamed ("Hel", "lo"):
    more than nothing, far less than the reservation, nothing left reserved."""
    reserved, settled = settle_down(gw, redis)
    charged = settled - before[1]
    assert reserved == 0 and 2 < charged < 5000, (reserved, charged)
    return charged


def assert_ends_with_error(raw: bytes, says: str) -> list[dict]:
    """Every event is whole JSON (no torn event), and the last one is an OpenAI error."""
    events = [orjson.loads(e.removeprefix(b"data: ")) for e in sse_events(raw)]
    assert_openai_error(events[-1], type="upstream_error", code="upstream_unavailable", says=says)
    return events[:-1]


@pytest.mark.parametrize("include_usage", [False, True])
def test_stream_cut_mid_event_ends_with_an_openai_error(gw, module_upstream, redis, before, include_usage) -> None:
    torn = chunk({"content": " world"})[:25]  # half an event, then the connection drops
    module_upstream.enqueue(Reply(sse_frames=[*HEAD, torn], drop_after=4))
    seen = outcomes(gw)
    status, raw = stream_raw(gw, include_usage)
    assert status == 200
    arrived = assert_ends_with_error(raw, says="upstream stream broke")
    assert [e["choices"][0]["delta"].get("content") for e in arrived] == ["", "Hel", "lo"]
    assert counted(gw, seen) == {"upstream_error": 1}
    charged_what_was_streamed(gw, redis, before)  # no usage was reported: what was streamed


def test_stream_cut_is_an_error_for_the_openai_client(gw, module_upstream, redis, before) -> None:
    module_upstream.enqueue(Reply(sse_frames=HEAD + [chunk({"content": "!"})], drop_after=3))
    stream = openai_client(gw, "sk-acme", headers=NO_PRUNING, timeout=10).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5000, stream=True)
    got = []
    with pytest.raises(openai.APIError, match="upstream stream broke"):
        for event in stream:
            got.append(event.choices[0].delta.content)
    assert got == ["", "Hel", "lo"]
    charged_what_was_streamed(gw, redis, before)


def test_stream_cut_after_the_usage_settles_it(gw, module_upstream, redis, before) -> None:
    module_upstream.enqueue(Reply(sse_frames=[*HEAD, chunk(finish="stop"), USAGE_CHUNK, b"data: [DONE]\n\n"],
                                  drop_after=5))
    seen = outcomes(gw)
    status, raw = stream_raw(gw, include_usage=False)
    assert status == 200 and b'"usage"' not in raw  # still stripped: the client did not ask for it
    assert_ends_with_error(raw, says="upstream stream broke")
    assert counted(gw, seen) == {"upstream_error": 1}
    assert settle_down(gw, redis) == (0, before[1] + USAGE["total_tokens"])  # what the provider reported


@pytest.mark.parametrize("frames,complete", [
    ([*HEAD], False),                                             # cut: no finish_reason, no [DONE]
    ([*HEAD, chunk(finish="stop"), USAGE_CHUNK], True),           # finished, only [DONE] missing
    ([*HEAD, chunk(finish="stop"), USAGE_CHUNK, b"data: [DONE]\n\n"], True),
], ids=["cut", "no-done", "whole"])
def test_stream_ending_in_a_clean_close(gw, module_upstream, redis, before, frames, complete) -> None:
    """Without chunked framing a cut stream ends like a whole one: [DONE] or a finish_reason tells."""
    module_upstream.enqueue(Reply(sse_frames=frames, eof_framing=True))
    seen = outcomes(gw)
    status, raw = stream_raw(gw, include_usage=True)
    assert status == 200
    if complete:
        assert raw == b"".join(frames)
        assert counted(gw, seen) == {"passthrough": 1}
        assert settle_down(gw, redis) == (0, before[1] + USAGE["total_tokens"])
    else:
        assert_ends_with_error(raw, says="ended without [DONE]")
        assert counted(gw, seen) == {"upstream_error": 1}
        charged_what_was_streamed(gw, redis, before)


PROVIDER_ERROR = {"message": "The server had an error while processing your request.", "type": "server_error",
                  "param": None, "code": None}


@pytest.mark.parametrize("then", [[], [b"data: [DONE]\n\n"]], ids=["closed", "done"])
def test_an_error_event_from_the_provider_is_relayed_and_counted(gw, module_upstream, redis, before, then) -> None:
    frames = [*HEAD, b"data: " + orjson.dumps({"error": PROVIDER_ERROR}) + b"\n\n", *then]
    module_upstream.enqueue(Reply(sse_frames=frames))
    seen = outcomes(gw)
    status, raw = stream_raw(gw, include_usage=True)
    assert status == 200 and raw == b"".join(frames)  # the provider's own error, once, unchanged
    assert counted(gw, seen) == {"upstream_error": 1}
    charged_what_was_streamed(gw, redis, before)  # it had streamed "Hello" before its error


def test_an_error_event_before_any_output_releases(gw, module_upstream, redis, before) -> None:
    """The provider refusing in-stream before it streamed anything billed nothing."""
    frames = [b"data: " + orjson.dumps({"error": PROVIDER_ERROR}) + b"\n\n"]
    module_upstream.enqueue(Reply(sse_frames=frames))
    status, raw = stream_raw(gw, include_usage=True)
    assert status == 200 and raw == b"".join(frames)
    assert settle_down(gw, redis) == before


MALFORMED = [
    b": keep-alive\n\n",
    b"event: ping\ndata: not json at all\n\n",
    b'data: {"id": "broken", "choices": [\n\n',
    chunk({"content": "Hel"}),
    b"garbage line without a field\n\n",
    b'data: {"usage": "not a dict", "choices": []}\n\n',
    chunk({"content": "lo"}, finish="stop"),
    USAGE_CHUNK.rstrip(b"\n"),  # the last event has no trailing newline
]


@pytest.mark.parametrize("include_usage", [False, True])
def test_malformed_sse_is_relayed_and_its_usage_still_read(gw, module_upstream, redis, before, include_usage) -> None:
    module_upstream.enqueue(Reply(sse_frames=MALFORMED))
    seen = outcomes(gw)
    status, raw = stream_raw(gw, include_usage)
    assert status == 200
    expected = MALFORMED if include_usage else MALFORMED[:-1]  # the usage chunk Sieve asked for is stripped
    assert raw == b"".join(expected)
    assert counted(gw, seen) == {"passthrough": 1}
    assert settle_down(gw, redis) == (0, before[1] + USAGE["total_tokens"])


def test_crlf_events_stream_as_they_come(gw, module_upstream, redis, before) -> None:
    """SSE allows CRLF line ends; events must still go out one by one, and usage be read."""
    frames = [f.replace(b"\n", b"\r\n") for f in [*HEAD, chunk(finish="stop"), USAGE_CHUNK, b"data: [DONE]\n\n"]]
    module_upstream.enqueue(Reply(sse_frames=frames, chunk_delay_s=0.15))
    arrivals = []
    started = time.monotonic()
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", headers=AUTH, timeout=10,
                      json=chat_body(max_tokens=5000, stream=True)) as response:
        raw = b""
        for piece in response.iter_raw():
            arrivals.append(time.monotonic() - started)
            raw += piece
    assert raw == b"".join(frames[:4] + frames[5:])  # the usage chunk stripped, CRLF kept
    assert len(arrivals) >= 3 and arrivals[0] < arrivals[-1] - 0.3  # not held back to the end
    assert settle_down(gw, redis) == (0, before[1] + USAGE["total_tokens"])


# -- answers too large to hold ------------------------------------------------------------------------

@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_answer_over_the_upstream_body_limit_is_a_502(module_upstream, redis, framing) -> None:
    """A non-stream answer (or error page) past SIEVE_MAX_UPSTREAM_BODY_BYTES is not read on:
    the caller gets a 502 that says why, the gateway serves on. A success was billed though
    never read: it is charged its reservation (issue 28: it was free); an error page is released."""
    limit = 1_000_000
    huge = "x" * (5 * limit)
    with GatewayServer(metered_settings(module_upstream, redis, max_upstream_body_bytes=limit)) as small:
        before = settle_down(small, redis)
        module_upstream.enqueue(Reply(content=huge, usage=USAGE, chunked=framing == "chunked"),
                                Reply(status=500, raw_body=huge.encode()),
                                Reply(content="x" * (limit // 2), usage=USAGE, chunked=framing == "chunked"))
        held = []
        for _ in range(2):
            response = post(small)
            assert response.status_code == 502, response.text[:300]
            assert_openai_error(response.json(), type="upstream_error", code="upstream_response_too_large",
                                says=f"limit of {limit} bytes (SIEVE_MAX_UPSTREAM_BODY_BYTES)")
            held.append(LIMIT - int(response.headers["x-sieve-budget-remaining-tokens"]))
            settle_down(small, redis)
        under = post(small)  # half the limit: relayed whole, on a connection that works
        assert under.status_code == 200 and under.json()["choices"][0]["message"]["content"] == "x" * (limit // 2)
        assert counted(small, {}) == {"upstream_error": 2, "passthrough": 1}
        reservation = held[0] - before[1]  # the success too large to read: charged all it could cost
        assert settle_down(small, redis) == (0, before[1] + reservation + USAGE["total_tokens"])
