"""Budgets and savings of the Anthropic Messages and OpenAI Responses routes, through the real routes,
with budgets in a real redis-server.

A request reserves its forwarded prompt plus its answer's cap (``max_tokens`` /
``max_output_tokens``) and is settled at the format's own usage: Anthropic's
``input_tokens`` + cache reads + cache writes + ``output_tokens``
(``message_start`` / ``message_delta`` in a stream), Responses' ``input_tokens``
(cached part included) + ``output_tokens`` (``response.completed`` in a stream).
Savings are priced with each provider's cache rates.
"""

from __future__ import annotations

import asyncio
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from gateway.config.settings import prepare_offline_environment
from gateway.state.protocols import StoredResponse
from gateway.state.redis_registries import RedisResponseRegistry
from gateway.state.redis_store import RedisStores
from gateway.telemetry.pricing import PriceBook
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, admin_headers, org_counter
from tests.integration.conftest import format_settings
from tests.support.redis_server import RedisServer
from tests.support import NO_PRUNING, metric_value, openai_client, read_jsonl

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("clear_of_a_minute_edge")]

CLAUDE, GPT = "claude-sonnet-4-5", "gpt-5"
ANTHROPIC_USAGE = {"input_tokens": 40, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000,
                   "output_tokens": 17}
RESPONSES_USAGE = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 800}, "output_tokens": 23,
                   "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 923}
KEYS = ({"key": "sk-claude", "org": "claude-org"}, {"key": "sk-claude-stream", "org": "claude-stream"},
        {"key": "sk-codex", "org": "codex-org"}, {"key": "sk-codex-stream", "org": "codex-stream"},
        {"key": "sk-tight", "org": "tight"}, {"key": "sk-compact", "org": "compact-org"})
BUDGETS = {"orgs": {"claude-org": {"day": 100_000}, "claude-stream": {"day": 100_000}, "codex-org": {"day": 100_000},
                    "codex-stream": {"day": 100_000}, "tight": {"day": 50},
                    "compact-org": {"day": 1_000_000}}}


@pytest.fixture(scope="module")
def gateway(redis: RedisServer, providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    settings = format_settings(providers_server, redis_url=redis.url, admin_key=ADMIN_KEY, budgets=BUDGETS,
                               virtual_keys=KEYS, audit_log=str(audit))
    with GatewayServer(settings) as gw:
        gw.audit_path = audit
        yield gw


def day_counter(gw: GatewayServer, org: str) -> dict:
    gw.wait_idle()
    response = gw.get(f"/admin/usage/{org}", headers=admin_headers())
    assert response.status_code == 200, response.text
    return org_counter(response.json()["counters"], f"org:{org}:day")


def claude(gw: GatewayServer, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30,
                               default_headers=NO_PRUNING)


def test_messages_reserve_the_cap_and_settle_on_anthropic_usage(gateway, providers):
    providers.enqueue(Reply(usage=ANTHROPIC_USAGE))
    response = claude(gateway, "sk-claude").messages.with_raw_response.create(
        # A prompt of the size the fake's usage reports (2,340 prompt tokens, cache included):
        # a usage over 4x the reservation is charged as the reservation (an anomaly).
        model=CLAUDE, max_tokens=500, messages=[{"role": "user", "content": "hello " * 1000}])
    forwarded = int(response.headers["x-sieve-forwarded-tokens"])
    # The reservation covers at least the forwarded prompt and the answer's cap (the estimate
    # of the native body adds what else can be billed: gateway/billing/reservation_estimate.py).
    held = 100_000 - int(response.headers["x-sieve-budget-remaining-tokens"])
    assert forwarded + 500 <= held <= 2 * forwarded + 500 + 100
    status = day_counter(gateway, "claude-org")
    assert status["settled"] == 40 + 300 + 2000 + 17 and status["reserved"] == 0


def test_a_messages_stream_settles_on_the_usage_of_its_events(gateway, providers):
    providers.enqueue(Reply(chunks=["a", "b"], usage=ANTHROPIC_USAGE))
    with claude(gateway, "sk-claude-stream").messages.stream(
            model=CLAUDE, max_tokens=500, messages=[{"role": "user", "content": "hello " * 1000}]) as stream:
        stream.until_done()
    status = day_counter(gateway, "claude-stream")
    assert status["settled"] == 40 + 300 + 2000 + 17 and status["reserved"] == 0


def test_responses_reserve_the_cap_and_settle_on_responses_usage(gateway, providers):
    providers.enqueue(Reply(usage=RESPONSES_USAGE))
    response = openai_client(gateway, "sk-codex", headers=NO_PRUNING).responses.with_raw_response.create(
        model=GPT, input="hello " * 1000, max_output_tokens=300)
    forwarded = int(response.headers["x-sieve-forwarded-tokens"])
    # The reservation covers at least the forwarded prompt and the answer's cap (the estimate
    # of the native body adds what else can be billed: gateway/billing/reservation_estimate.py).
    held = 100_000 - int(response.headers["x-sieve-budget-remaining-tokens"])
    assert forwarded + 300 <= held <= 2 * forwarded + 300 + 100
    status = day_counter(gateway, "codex-org")
    assert status["settled"] == 900 + 23 and status["reserved"] == 0


def test_a_responses_stream_settles_on_response_completed(gateway, providers):
    providers.enqueue(Reply(chunks=["a", "b"], usage=RESPONSES_USAGE))
    for _ in openai_client(gateway, "sk-codex-stream", headers=NO_PRUNING).responses.create(
            model=GPT, input="hello " * 1000, max_output_tokens=300, stream=True):
        pass
    status = day_counter(gateway, "codex-stream")
    assert status["settled"] == 900 + 23 and status["reserved"] == 0


def test_an_exceeded_budget_is_a_429_in_each_formats_shape(gateway, providers):
    before = len(providers.requests)
    with pytest.raises(anthropic.RateLimitError) as caught:
        claude(gateway, "sk-tight").messages.create(model=CLAUDE, max_tokens=200,
                                                    messages=[{"role": "user", "content": "hi"}])
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "budget_exceeded" and body["error"]["budget"] == "org:tight:day"
    refused = httpx.post(gateway.base_url + "/v1/responses", timeout=30, headers={"authorization": "Bearer sk-tight"},
                         json={"model": GPT, "input": "hi", "max_output_tokens": 200})
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "budget_exceeded"
    assert len(providers.requests) == before


def test_savings_are_priced_with_anthropics_cache_rates(gateway, providers):
    providers.enqueue(Reply(usage=ANTHROPIC_USAGE))
    response = claude(gateway, "sk-claude").messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "priced"}])
    gateway.wait_idle()
    line = next(line for line in read_jsonl(gateway.audit_path)
                if line["request_id"] == response.headers["x-sieve-request-id"])
    prepare_offline_environment()
    rates = PriceBook.from_litellm({}).lookup(CLAUDE).base
    expected = 40 * rates.input + 2000 * rates.cache_read + 300 * rates.cache_write + 17 * rates.output
    assert line["cost"]["priced"] and line["cost"]["actual_usd"] == pytest.approx(expected)
    assert line["cost"]["actual_usd"] < 2357 * rates.input  # the cache rates, not the input rate


# -- the pass-through routes ------------------------------------------------------------------------
# Compaction runs the model (billed: reserved and settled); the others cost nothing at the provider
# (never refused by a budget). All are counted and audited (docs/contracts.md, Budgets).

COMPACT_USAGE = {"input_tokens": 1500, "output_tokens": 40}


def passed_through(gw: GatewayServer, org: str, route: str, outcome: str) -> float:
    gw.wait_idle()
    return metric_value(gw.metrics, "sieve_passthrough_requests_total", org=org, route=route, outcome=outcome)


def audit_line(gw: GatewayServer, request_id: str) -> dict:
    gw.wait_idle()
    lines = [line for line in read_jsonl(gw.audit_path) if line["request_id"] == request_id]
    assert len(lines) == 1, lines
    return lines[0]


def test_compact_reserves_its_input_and_settles_on_its_usage(gateway, providers):
    providers.enqueue(Reply(usage=COMPACT_USAGE))
    seen = passed_through(gateway, "compact-org", "/v1/responses/compact", "ok")
    response = openai_client(gateway, "sk-compact").responses.with_raw_response.compact(
        model=GPT, input="hello " * 1000)
    assert response.parse().usage.input_tokens == 1500
    # Compaction takes no output cap: its input's estimate plus the model's whole output limit is held.
    held = 1_000_000 - int(response.headers["x-sieve-budget-remaining-tokens"])
    assert 128_000 + 1000 <= held <= 128_000 + 2000
    status = day_counter(gateway, "compact-org")
    assert status["settled"] == 1500 + 40 and status["reserved"] == 0
    assert passed_through(gateway, "compact-org", "/v1/responses/compact", "ok") == seen + 1
    line = audit_line(gateway, response.headers["x-sieve-request-id"])
    assert (line["route"], line["outcome"], line["org"], line["model"]) == (
        "/v1/responses/compact", "ok", "compact-org", GPT)
    assert line["tokens"]["forwarded"] == 1500


def test_a_compact_the_provider_fails_is_released(gateway, providers):
    before = day_counter(gateway, "compact-org")
    providers.enqueue(Reply(status=503, raw_body=b"<html>503 Service Unavailable</html>"))
    seen = passed_through(gateway, "compact-org", "/v1/responses/compact", "upstream_error")
    with pytest.raises(openai.InternalServerError) as caught:
        openai_client(gateway, "sk-compact").responses.compact(model=GPT, input="hello")
    assert caught.value.status_code == 503 and caught.value.body["code"] == "upstream_error_body"
    after = day_counter(gateway, "compact-org")
    assert (after["settled"], after["reserved"]) == (before["settled"], 0)
    assert passed_through(gateway, "compact-org", "/v1/responses/compact", "upstream_error") == seen + 1


def test_a_spent_budget_refuses_compact_but_not_the_free_routes(gateway, providers):
    """A budget too small for any billed request: compaction is refused before the provider sees it,
    while counting tokens and reading, cancelling or deleting a stored response cost nothing, so they
    are served; each is counted by route and outcome and has an audit line."""
    before = len(providers.requests)
    refused = httpx.post(gateway.base_url + "/v1/responses/compact", timeout=30,
                         headers={"authorization": "Bearer sk-tight"}, json={"model": GPT, "input": "hi"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    assert len(providers.requests) == before
    assert passed_through(gateway, "tight", "/v1/responses/compact", "budget_rejected") >= 1
    assert audit_line(gateway, refused.headers["x-sieve-request-id"])["outcome"] == "budget_rejected"
    seen = {route: passed_through(gateway, "tight", route, "ok") for route in FREE_ROUTES}
    stored_for(gateway, "tight", "resp_1")  # its response (this budget never lets one be made through Sieve)
    gpt = openai_client(gateway, "sk-tight")
    answers = [
        claude(gateway, "sk-tight").messages.with_raw_response.count_tokens(
            model=CLAUDE, messages=[{"role": "user", "content": "hi"}]),
        gpt.responses.input_tokens.with_raw_response.count(model=GPT, input="hi"),
        gpt.responses.with_raw_response.retrieve("resp_1"),
        gpt.responses.input_items.with_raw_response.list("resp_1"),
        gpt.responses.with_raw_response.cancel("resp_1"),
        gpt.responses.with_raw_response.delete("resp_1"),
    ]
    assert [a.status_code for a in answers] == [200] * 6
    assert len(providers.requests) == before + 6
    for route, answer in zip(FREE_ROUTES, answers):
        assert passed_through(gateway, "tight", route, "ok") == seen[route] + (2 if route == STORED else 1)
        line = audit_line(gateway, answer.headers["x-sieve-request-id"])
        assert (line["org"], line["outcome"]) == ("tight", "ok") and line["route"] == route
    usage = gateway.get("/admin/usage/tight", headers=admin_headers()).json()
    assert not any(c.get("settled") or c.get("reserved") for c in usage["counters"])  # nothing was charged


def stored_for(gw: GatewayServer, org: str, response_id: str) -> None:
    """``response_id`` recorded as ``org``'s in the gateway's registry (its Redis), as a relayed one is."""
    async def claim() -> None:
        stores = RedisStores.from_url(gw.settings.redis_url)
        try:
            await RedisResponseRegistry(stores.client).claim(response_id, StoredResponse(org, 0), 600)
        finally:
            await stores.aclose()

    asyncio.run(claim())


STORED = "/v1/responses/{response_id}"
FREE_ROUTES = ("/v1/messages/count_tokens", "/v1/responses/input_tokens", STORED,
               "/v1/responses/{response_id}/input_items", "/v1/responses/{response_id}/cancel", STORED)
