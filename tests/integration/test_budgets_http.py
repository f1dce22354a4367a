"""Identity and budgets through the real HTTP gateway, called with the official openai client.

One in-process gateway (memory stores) in front of the fake upstream; each
test uses its own org so budgets do not interfere. Counters are read back
through the admin API, i.e. from the same store the request path used.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Iterator

import httpx
import openai
import pytest

from gateway.billing.reservation_estimate import REPLY_PRIMING_TOKENS
from gateway.config.settings import Settings
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, MODEL, admin_headers, chat_body, org_counter
from tests.support import NO_PRUNING, openai_client

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
KEYS = {
    "sk-acme-bot": {"org": "acme", "team": "search", "name": "bot"},
    "sk-tight": {"org": "tight"},
    "sk-meter": {"org": "meter"},
    "sk-stream": {"org": "stream"},
    "sk-free": {"org": "free"},       # no budget applies
}
BUDGETS = {
    "orgs": {"acme": {"day": 100_000}, "tight": {"day": 100}, "meter": {"day": 10_000},
             "stream": {"hour": 50_000}},
    "teams": {"acme/search": {"hour": 50_000}},
    "keys": {"bot": {"month": 20_000}},
}

# Calendar-window budgets charged, then read back; the module's gateway has its own fake upstream.
pytestmark = [pytest.mark.usefixtures("clear_of_a_minute_edge"),
              pytest.mark.upstream_default(Reply(content="hello", usage=USAGE))]


@pytest.fixture(scope="module")
def gateway(module_upstream_server: FakeUpstream) -> Iterator[GatewayServer]:
    settings = Settings(upstream_base_url=module_upstream_server.base_url, admin_key=ADMIN_KEY, budgets=BUDGETS,
                        virtual_keys=tuple({"key": k, **v} for k, v in KEYS.items()))
    with GatewayServer(settings) as gw:
        yield gw


def counters(gw: GatewayServer, org: str) -> list[dict]:
    gw.wait_idle()
    response = gw.get(f"/admin/usage/{org}", headers=admin_headers())
    assert response.status_code == 200, response.text
    return response.json()["counters"]


def test_virtual_key_maps_to_org_team_and_key(gateway: GatewayServer) -> None:
    reply = openai_client(gateway, "sk-acme-bot", headers=NO_PRUNING).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "who am I?"}], max_tokens=32)
    assert reply.choices[0].message.content == "hello"
    found = {c["budget"]: c for c in counters(gateway, "acme")}
    # Org, team and key budgets were all charged: the key resolved to acme / search / bot.
    assert set(found) == {"org:acme:day", "team:acme/search:hour", "key:acme/bot:month"}
    assert all(c["settled"] == USAGE["total_tokens"] and c["reserved"] == 0 for c in found.values())


def test_missing_or_bad_key_is_401(gateway: GatewayServer, module_upstream: FakeUpstream) -> None:
    before = len(module_upstream.requests)
    missing = gateway.post("/v1/chat/completions", json=chat_body())
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "authentication_error"
    assert "Missing API key" in missing.json()["error"]["message"]
    with pytest.raises(openai.AuthenticationError) as bad:
        openai_client(gateway, "sk-not-a-key", headers=NO_PRUNING).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert bad.value.status_code == 401
    assert bad.value.body["type"] == "authentication_error"
    assert len(module_upstream.requests) == before  # nothing was forwarded


def test_budget_exceeded_is_a_429_naming_the_budget(gateway: GatewayServer, module_upstream: FakeUpstream) -> None:
    before = len(module_upstream.requests)
    with pytest.raises(openai.RateLimitError) as caught:
        openai_client(gateway, "sk-tight", headers=NO_PRUNING).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=200)
    error = caught.value.body
    assert caught.value.status_code == 429
    assert error["type"] == "budget_exceeded" and error["code"] == "budget_exceeded"
    assert error["budget"] == "org:tight:day" and error["scope"] == "org" and error["window"] == "day"
    assert error["limit"] == 100 and error["remaining"] == 100 and error["requested"] > 200
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    assert error["reset_at"] == tomorrow
    assert "org 'tight' day budget of 100 tokens has 100 remaining" in error["message"]
    assert tomorrow in error["message"]
    headers = caught.value.response.headers
    assert headers["x-sieve-budget-remaining-tokens"] == "100"
    assert int(headers["retry-after"]) >= 1
    assert len(module_upstream.requests) == before  # rejected before forwarding
    assert counters(gateway, "tight") == []  # nothing held


def test_remaining_tokens_header_follows_reservation_and_settlement(gateway: GatewayServer) -> None:
    llm = openai_client(gateway, "sk-meter", headers=NO_PRUNING)
    first = llm.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "count me"}], max_tokens=100)
    # The header is what remains right after this request's reservation: the prompt as billed
    # (the messages, and the tokens priming the reply) + max_tokens.
    reserved = int(first.headers["x-sieve-forwarded-tokens"]) + REPLY_PRIMING_TOKENS + 100
    assert int(first.headers["x-sieve-budget-remaining-tokens"]) == 10_000 - reserved
    gateway.wait_idle()
    second = llm.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "count me"}], max_tokens=100)
    # The first request settled to the provider's usage (18), not to its reservation.
    assert int(second.headers["x-sieve-budget-remaining-tokens"]) == 10_000 - 18 - reserved
    free = openai_client(gateway, "sk-free", headers=NO_PRUNING).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert "x-sieve-budget-remaining-tokens" not in free.headers  # no budget applies to this org
    status = org_counter(counters(gateway, "meter"), "org:meter:day")
    assert status["settled"] == 36 and status["reserved"] == 0


def test_stream_settles_from_usage_chunk_the_client_never_sees(gateway: GatewayServer,
                                                               module_upstream: FakeUpstream) -> None:
    module_upstream.enqueue(Reply(chunks=["a", "b", "c", "d"], usage=USAGE))
    stream = openai_client(gateway, "sk-stream", headers=NO_PRUNING).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stream please"}], max_tokens=500, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "abcd"
    assert all(c.usage is None and c.choices for c in chunks)  # the usage-only chunk was stripped
    sent = module_upstream.requests[-1].json
    assert sent["stream_options"] == {"include_usage": True}  # asked for on the client's behalf
    status = org_counter(counters(gateway, "stream"), "org:stream:hour")
    assert status["settled"] == USAGE["total_tokens"] and status["reserved"] == 0


def test_stream_client_that_asked_for_usage_gets_it(gateway: GatewayServer, module_upstream: FakeUpstream) -> None:
    module_upstream.enqueue(Reply(chunks=["x", "y"], usage=USAGE))
    before = org_counter(counters(gateway, "stream"), "org:stream:hour")["settled"]
    stream = openai_client(gateway, "sk-stream", headers=NO_PRUNING).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stream please"}], max_tokens=500, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 18 and chunks[-1].choices == []
    after = org_counter(counters(gateway, "stream"), "org:stream:hour")
    assert after["settled"] - before == 18 and after["reserved"] == 0


def test_upstream_error_status_passes_through_and_releases(gateway: GatewayServer,
                                                           module_upstream: FakeUpstream) -> None:
    body = {"error": {"message": "model overloaded", "type": "server_error", "param": None, "code": None}}
    module_upstream.enqueue(Reply(status=503, json_body=body))
    before = org_counter(counters(gateway, "meter"), "org:meter:day")
    response = httpx.post(gateway.base_url + "/v1/chat/completions", json=chat_body(max_tokens=50),
                          headers={"authorization": "Bearer sk-meter", **NO_PRUNING}, timeout=10)
    assert response.status_code == 503 and response.json() == body  # the provider's answer, unchanged
    after = org_counter(counters(gateway, "meter"), "org:meter:day")
    assert (after["settled"], after["reserved"]) == (before["settled"], 0)


@pytest.mark.parametrize("max_tokens", [b"18446744073709551615", b"1e300"])
def test_an_absurd_max_tokens_is_a_400_not_a_500(gateway: GatewayServer, max_tokens: bytes) -> None:
    # Found by fuzzing: the reservation (prompt + max_tokens) outgrew 64 bits, and the 429
    # naming it could not be rendered.
    body = b'{"model": "%s", "max_tokens": %s, "messages": [{"role": "user", "content": "x"}]}' % (
        MODEL.encode(), max_tokens)
    response = gateway.post("/v1/chat/completions", content=body, headers={"authorization": "Bearer sk-meter"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "max_tokens"
