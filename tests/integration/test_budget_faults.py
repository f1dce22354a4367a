"""Budget accounting under faults: a settle charged once whatever the network loses, a
reserve Redis ran late given back, a provider's absurd usage figure kept from poisoning
the replica.

The gateway runs under uvicorn against a real redis-server, through a TCP proxy
(``tests.support.redis_proxy``) where a test needs a reply lost or a command delayed.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.state.redis_store import RedisStores
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import admin_headers, chat_body
from tests.integration.fault_helpers import (
    AUTH, LIMIT, ORG, USAGE, budget, budget_settings, fail_open, settle_down,
)
from tests.support.redis_proxy import RedisProxy
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import bearer, metric_value, wait_until

pytestmark = [pytest.mark.redis, needs_redis]

TOTAL = USAGE["total_tokens"]


def script_shas(redis: RedisServer) -> dict[str, str]:
    """The SHA-1 the store's scripts run under (``EVALSHA``): how the proxy spots them."""
    budgets = RedisStores.from_url(redis.url).budgets  # computes the hashes; connects to nothing
    return {"reserve": budgets._reserve.sha, "settle": budgets._settle.sha}


def post_chat(gw: GatewayServer, user: str, headers: dict[str, str] = AUTH, **extra: Any) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", json=chat_body(user=user, **extra),
                      headers=headers, timeout=15)


def test_a_settle_whose_reply_is_lost_is_charged_once() -> None:
    """Redis runs the settle and the connection dies before its reply arrives, on the first
    try and on redis-py's retry; the settle is owed and sent again before the next
    reservation. It must find the reservation already settled, not unknown (which was
    answered with a second charge of the same usage)."""
    with RedisServer() as redis, RedisProxy(redis) as proxy, \
            FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(budget_settings(up, redis, redis_url=proxy.url)) as gw:
        assert post_chat(gw, "warm").status_code == 200  # loads the scripts into Redis
        assert settle_down(gw, redis) == (0, TOTAL)

        lost = proxy.drop_reply(script_shas(redis)["settle"], times=2)
        assert post_chat(gw, "lost").status_code == 200
        gw.wait_idle()
        assert lost.done == 2  # both tries ran into the cut
        assert budget(redis) == (0, 2 * TOTAL)  # Redis applied it once

        assert post_chat(gw, "next").status_code == 200  # the owed settle is sent again first
        assert settle_down(gw, redis) == (0, 3 * TOTAL)
        assert fail_open(gw, "budget_store") == 0


def test_a_reserve_that_redis_ran_late_is_released_when_it_answers() -> None:
    """Redis hangs with a reserve in its socket: the replica gives up on it (and on the
    retry), serves the request unmetered (fail-open), and Redis runs both copies when it
    wakes up. The reservation must be given back as soon as Redis answers, not held until
    its 15-minute TTL; the request is charged once, at its usage."""
    with RedisServer() as redis, RedisProxy(redis) as proxy, \
            FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(budget_settings(up, redis, redis_url=proxy.url)) as gw:
        assert post_chat(gw, "warm").status_code == 200
        assert settle_down(gw, redis) == (0, TOTAL)

        hung = proxy.delay_command(script_shas(redis)["reserve"], delay_s=3.0, times=2)
        served = post_chat(gw, "hung")
        assert served.status_code == 200 and "x-sieve-budget-remaining-tokens" not in served.headers
        assert fail_open(gw, "budget_store") == 1
        wait_until(lambda: hung.done == 2, timeout_s=10)
        reserved, _ = budget(redis)
        assert reserved > 0  # Redis holds what the replica gave up on

        wait_until(lambda: "x-sieve-budget-remaining-tokens" in post_chat(gw, "back").headers, timeout_s=10)
        assert settle_down(gw, redis, timeout_s=5) == (0, 3 * TOTAL)


def test_an_absurd_usage_figure_is_clamped_and_blocks_nothing() -> None:
    """A provider reports 1e20 prompt tokens (HINCRBY's range ends at 2^63), then -5. The first is
    charged at the sanity ceiling (SIEVE_MAX_BILLED_TOKENS), the second (junk) at the
    reservation's estimate, each counted in sieve_usage_anomalies_total; every later request,
    of this org and another, is metered as before, and the admin API answers."""
    absurd = {"prompt_tokens": 1e20, "completion_tokens": 10, "total_tokens": 1e20}
    junk = {"prompt_tokens": -5, "completion_tokens": 10, "total_tokens": 5}
    ceiling = 100_000
    two_orgs = dict(budgets={"orgs": {ORG: {"day": LIMIT}, "other": {"day": LIMIT}}}, max_billed_tokens=ceiling,
                    virtual_keys=({"key": "sk-acme", "org": ORG}, {"key": "sk-other", "org": "other"}))
    with RedisServer() as redis, FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(budget_settings(up, redis, **two_orgs)) as gw:
        charged = 0
        for usage, reason in ((absurd, "ceiling"), (junk, "junk")):
            up.enqueue(Reply(content="ok", usage=usage))
            response = post_chat(gw, f"bad-{reason}")
            assert response.status_code == 200
            estimate = LIMIT - charged - int(response.headers["x-sieve-budget-remaining-tokens"])
            charged += ceiling if reason == "ceiling" else estimate
            assert settle_down(gw, redis) == (0, charged)
            assert metric_value(gw.metrics, "sieve_usage_anomalies_total", reason=reason) == 1
        for headers in (AUTH, {**AUTH, **bearer("sk-other")}):
            metered = post_chat(gw, "after", headers=headers)
            assert metered.status_code == 200 and "x-sieve-budget-remaining-tokens" in metered.headers
        assert settle_down(gw, redis) == (0, charged + TOTAL)
        assert fail_open(gw, "budget_store") == 0
        usage = gw.get(f"/admin/usage/{ORG}", headers=admin_headers())
        assert usage.status_code == 200, usage.text
