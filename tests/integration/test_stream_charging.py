"""A stream cut at any point, by the client or the upstream, in every format, is charged at least
what was streamed (issue 28); so is one whose provider never sends its usage, and an answer too
large to read.

The gateway runs under uvicorn with a budget; the provider
(:class:`tests.support.billing_provider.BillingProvider`) bills real token counts and streams the
answer a few tokens an event, cut where a test says (``x-stainless-fault``). The charge is
read from the budget's counter (``/admin/usage``). Before: a Messages stream cut before its
final usage was charged its input and 1 output token; a Chat or Responses stream the upstream
cut after output, 0; a 502 for an answer too large to read, 0.
"""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest

from gateway.config.settings import Settings
from tests.support.billing_provider import TOKEN, BillingProvider
from tests.support.gateway_server import GatewayServer

ADMIN = "sieve-admin-stream-charging"
KEY = "sk-sieve-streams-0123456789abcdef"
ORG = "streams"
OUTPUT = 400  # tokens the answer has, 7 an event
PROMPT = "Write the report on the quarterly figures, section by section. " * 20


@pytest.fixture(scope="module")
def provider() -> Iterator[BillingProvider]:
    with BillingProvider() as server:
        yield server


@pytest.fixture(scope="module")
def gw(provider: BillingProvider) -> Iterator[GatewayServer]:
    settings = Settings(upstream_base_url=provider.base_url, anthropic_base_url=provider.anthropic_base_url,
                        upstream_api_key="sk-gateway-openai", anthropic_api_key="sk-gateway-anthropic",
                        admin_key=ADMIN, virtual_keys=({"key": KEY, "org": ORG},), max_upstream_body_bytes=1_000_000,
                        budgets={"orgs": {ORG: {"day": 100_000_000}}})
    with GatewayServer(settings) as server:
        yield server


def request(fmt: str, stream: bool = True) -> tuple[str, dict[str, Any]]:
    if fmt == "chat":
        return "/v1/chat/completions", {"model": "gpt-4o-mini", "max_tokens": OUTPUT, "stream": stream,
                                        "messages": [{"role": "user", "content": PROMPT}]}
    if fmt == "messages":
        return "/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": OUTPUT, "stream": stream,
                                "messages": [{"role": "user", "content": PROMPT}]}
    return "/v1/responses", {"model": "gpt-5", "max_output_tokens": OUTPUT, "stream": stream, "input": PROMPT,
                             "store": False}


def headers(fault: str = "") -> dict[str, str]:
    out = {"authorization": f"Bearer {KEY}", "x-sieve-strategy": "none", "anthropic-version": "2023-06-01",
           "x-stainless-billing-org": ORG}
    return {**out, "x-stainless-fault": fault} if fault else out


def charged(gw: GatewayServer) -> int:
    gw.wait_idle(10)
    usage = httpx.get(gw.base_url + f"/admin/usage/{ORG}", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    counter = next((c for c in usage.json()["counters"] if c["budget"] == f"org:{ORG}:day"), None)
    if counter is None:
        return 0  # nothing reserved yet today
    assert counter["reserved"] == 0, counter  # nothing is left held
    return counter["settled"]


def streamed(raw: bytes) -> int:
    """Output tokens in a stream's delta events (a Responses stream repeats its text in its end events)."""
    events = raw.replace(b"\r\n", b"\n").split(b"\n\n")
    return sum(event.count(TOKEN.encode()) for event in events if b"delta" in event)


def billed(provider: BillingProvider) -> int:
    return provider.billed[ORG]


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
@pytest.mark.parametrize("cut_after", [0, 1, 5, 40])
def test_a_stream_the_upstream_cuts_is_charged_what_the_provider_billed(gw, provider, fmt: str,
                                                                         cut_after: int) -> None:
    before, billed_before = charged(gw), billed(provider)
    path, body = request(fmt)
    with httpx.stream("POST", gw.base_url + path, json=body, headers=headers(f"cut:{cut_after}"), timeout=30) as r:
        assert r.status_code == 200
        raw = r.read()
    assert streamed(raw) == 7 * cut_after  # what was streamed before the cut
    bill = billed(provider) - billed_before  # its prompt and the tokens it generated
    assert charged(gw) - before >= bill, (fmt, cut_after, bill)


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
@pytest.mark.parametrize("events", [1, 5, 30])
def test_a_stream_the_client_leaves_is_charged_at_least_what_it_received(gw, provider, fmt: str,
                                                                        events: int) -> None:
    before = charged(gw)
    path, body = request(fmt)
    body[{"chat": "max_tokens", "messages": "max_tokens", "responses": "max_output_tokens"}[fmt]] = 5_000
    received = b""
    with httpx.stream("POST", gw.base_url + path, json=body, headers=headers("slow:3"), timeout=30) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            received += chunk
            if streamed(received) >= 7 * events:
                break  # walk away: the context manager closes the connection
    prompt = provider.bills[-1].input
    assert charged(gw) - before >= prompt + streamed(received), (fmt, events)


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
def test_a_stream_that_never_carries_its_usage_is_charged_what_it_streamed(gw, provider, fmt: str) -> None:
    before, billed_before = charged(gw), billed(provider)
    path, body = request(fmt)
    with httpx.stream("POST", gw.base_url + path, json=body, headers=headers("no-usage"), timeout=30) as r:
        assert r.status_code == 200
        assert streamed(r.read()) == OUTPUT
    assert charged(gw) - before >= billed(provider) - billed_before


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
def test_an_answer_too_large_to_read_is_charged_what_it_was_billed(gw, provider, fmt: str) -> None:
    """A 502 for an answer past SIEVE_MAX_UPSTREAM_BODY_BYTES: the provider billed it all the same."""
    before, billed_before = charged(gw), billed(provider)
    path, body = request(fmt, stream=False)
    answer = httpx.post(gw.base_url + path, json=body, headers=headers("huge:2000000"), timeout=30)
    assert answer.status_code == 502 and "upstream_response_too_large" in answer.text
    assert charged(gw) - before >= billed(provider) - billed_before > 0
