"""The state store fails: Redis dies and comes back, Redis runs out of memory, the in-memory
store fills up. Requests are served throughout (``store_fail_open``), every one is counted
(``sieve_requests_total{outcome="fail_open"}`` and ``sieve_fail_open_total{reason}``), and
once the store is back budgets are enforced again and no reservation is left behind.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis as redis_py

from tests.support.conversations import agent_history
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import MODEL, chat_body, write_yaml
from tests.integration.fault_helpers import (
    AUTH, ORG, USAGE, assert_openai_error, budget, fail_open, metered_settings, outcomes, settle_down,
)
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import metric_value, wait_until

TOTAL = USAGE["total_tokens"]


def post_chat(gw: GatewayServer, max_tokens: int = 20, **extra: Any) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", json=chat_body(max_tokens=max_tokens, **extra),
                      headers=AUTH, timeout=10)


# A conversation's keys: its frozen plan, and its sieve_expand record (whether it carries the
# tool, decided on its first request: gateway.expand.record).
KEYS_PER_CONVERSATION = 2


def conversation_keys(redis: RedisServer) -> int:
    """The conversations the store holds (not the gateway's cohort secret, kept in the same store)."""
    with redis_py.Redis.from_url(redis.url) as client:
        keys = [k for k in client.keys("sieve:conv:*") if b"cohort-secret" not in k]
        return len(keys) // KEYS_PER_CONVERSATION


def degraded(gw: GatewayServer) -> tuple[float, float, float]:
    """(fail_open outcomes, budget store fail-opens, state store fail-opens) so far."""
    return outcomes(gw).get("fail_open", 0.0), fail_open(gw, "budget_store"), fail_open(gw, "state_store")


@pytest.mark.redis
@needs_redis
def test_redis_goes_away_and_comes_back() -> None:
    with RedisServer() as redis, FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(metered_settings(up, redis, budgets={"orgs": {ORG: {"day": 400}}})) as gw:
        assert post_chat(gw).status_code == 200
        assert settle_down(gw, redis) == (0, TOTAL) and conversation_keys(redis) == 1

        redis.kill()
        served = [post_chat(gw, user=f"u{i}") for i in range(3)]  # distinct bodies: distinct conversations
        assert [r.status_code for r in served] == [200] * 3
        assert all("x-sieve-budget-remaining-tokens" not in r.headers for r in served)  # unmetered
        gw.wait_idle()
        assert degraded(gw) == (3, 3, 3)
        assert gw.get("/readyz").status_code == 200  # fail-open: a pod without Redis still serves

        redis.start()  # same port, empty
        back = post_chat(gw, user="back")
        assert back.status_code == 200 and "x-sieve-budget-remaining-tokens" in back.headers
        gw.wait_idle()
        assert degraded(gw) == (3, 3, 3)  # nothing degraded any more
        assert conversation_keys(redis) == 1  # the state store is written again
        # The outage's tokens were charged on return, so the 400-token budget is nearly spent:
        assert settle_down(gw, redis) == (0, 4 * TOTAL)
        refused = post_chat(gw, max_tokens=400 - 4 * TOTAL)  # the prompt no longer fits beside it
        assert refused.status_code == 429
        assert_openai_error(refused.json(), type="budget_exceeded", code="budget_exceeded",
                            says="Budget exceeded: org 'acme' day budget of 400 tokens")
        gw.wait_idle()
        assert metric_value(gw.metrics, "sieve_budget_rejections_total", org=ORG) == 1
        assert outcomes(gw).get("budget_rejected") == 1
        assert budget(redis) == (0, 4 * TOTAL)


@pytest.mark.redis
@needs_redis
def test_redis_out_of_memory_fails_open_and_recovers() -> None:
    """maxmemory with noeviction: every write (the budget scripts, state puts) fails with OOM."""
    with RedisServer() as redis, FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(metered_settings(up, redis, upstream_timeout_s=5.0)) as gw, \
            redis_py.Redis.from_url(redis.url) as admin:
        admin.config_set("maxmemory-policy", "noeviction")
        assert post_chat(gw).status_code == 200
        assert settle_down(gw, redis) == (0, TOTAL)

        # Reserved before the store filled up, still running when it did: a stream that
        # ends well (settled later) and a request the provider fails (released later).
        up.enqueue(Reply(chunks=["a", "b", "c", "d"], chunk_delay_s=0.2, usage=USAGE),
                   Reply(status=500, delay_s=0.4))
        with httpx.stream("POST", gw.base_url + "/v1/chat/completions", headers=AUTH, timeout=10,
                          json=chat_body(max_tokens=20, stream=True, user="in-flight")) as streaming, \
                ThreadPoolExecutor(1) as pool:
            assert "x-sieve-budget-remaining-tokens" in streaming.headers  # metered
            failing = pool.submit(post_chat, gw, user="failing")
            assert wait_until(lambda: len(up.requests) == 3)
            admin.config_set("maxmemory", 1)
            with pytest.raises(redis_py.exceptions.OutOfMemoryError):
                admin.set("probe", "x")
            served = [post_chat(gw, user=f"oom{i}") for i in range(3)]
            streaming.read()
            assert failing.result().status_code == 500
        assert [r.status_code for r in served] == [200] * 3
        assert all("x-sieve-budget-remaining-tokens" not in r.headers for r in served)
        gw.wait_idle()
        assert degraded(gw) == (3, 3, 3)  # each: unmetered and its decisions not saved
        assert gw.get("/readyz").status_code == 200

        admin.config_set("maxmemory", 0)
        assert post_chat(gw, user="after").status_code == 200
        gw.wait_idle()
        assert degraded(gw) == (3, 3, 3)
        # On return: the stream settled, the failed request released (both held since before the
        # outage, not left to their TTL), the three served unmetered charged; plus the first and this one.
        assert settle_down(gw, redis) == (0, 6 * TOTAL)


# -- the in-memory store fills up ----------------------------------------------------------------------

KEYS = ({"key": "sk-acme", "org": ORG},)


def converse(gw: GatewayServer, conversation: str, route: str = "/v1/chat/completions") -> httpx.Response:
    response = gw.post(route, json={"model": MODEL, "messages": agent_history(6)},
                       headers={"authorization": "Bearer sk-acme", "x-sieve-target-tokens": "3000",
                                "x-sieve-conversation-id": conversation})
    assert response.status_code == 200, response.text
    return response


def mode(gw: GatewayServer, conversation: str) -> str:
    return converse(gw, conversation, "/v1/prune").json()["report"]["mode"]


def test_memory_state_store_evicts_beyond_its_bounds(start_gateway) -> None:
    by_count = start_gateway(virtual_keys=KEYS, state_max_entries=8)
    store = by_count.services.stores.conversations
    for i in range(20):
        assert int(converse(by_count, f"c{i}").headers["x-sieve-saved-tokens"]) > 0  # served, pruned
    assert len(store) == 8
    entry = store.nbytes // len(store)           # one live plan (before the dry runs add rehearsals)
    assert mode(by_count, "c19") == "frozen"     # recent: its decisions replayed
    assert mode(by_count, "c0") == "stateless"   # evicted (least recently used): decided afresh
    by_count.wait_idle()
    assert outcomes(by_count).get("pruned") == 20 and fail_open(by_count, "state_store") == 0

    by_size = start_gateway(virtual_keys=KEYS, state_max_bytes=int(entry * 3.5))
    for i in range(10):
        converse(by_size, f"c{i}")
    assert len(by_size.services.stores.conversations) == 3
    assert by_size.services.stores.conversations.nbytes <= entry * 3.5
    assert mode(by_size, "c9") == "frozen" and mode(by_size, "c0") == "stateless"


@pytest.mark.redis
@needs_redis
def test_a_hung_redis_costs_one_timeout_not_one_per_call() -> None:
    """SIGSTOP: the port is open, nothing answers. Fail-open must stay fast."""
    with RedisServer() as redis, FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(metered_settings(up, redis)) as gw:
        assert post_chat(gw).status_code == 200
        redis.pause()
        try:
            took = []
            for i in range(4):
                started = time.monotonic()
                assert post_chat(gw, user=f"hung{i}").status_code == 200
                took.append(time.monotonic() - started)
            gw.wait_idle()
            assert degraded(gw) == (4, 4, 4)
        finally:
            redis.resume()
        assert took[0] < 5.0  # one store call waits out its timeout (2 s, one retry) ...
        assert max(took[1:]) < 0.5, took  # ... then the store is skipped instead of waited for
        # Once it answers again (within the breaker's cooldown) requests are metered again.
        assert wait_until(lambda: "x-sieve-budget-remaining-tokens" in post_chat(gw, user="back").headers, timeout_s=5)
        assert settle_down(gw, redis)[0] == 0


def readiness_took(gw: GatewayServer) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = gw.get("/readyz")
    return response, time.monotonic() - started


@pytest.mark.redis
@needs_redis
@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_readiness_answers_within_a_second_while_redis_hangs(tmp_path, fail_open: bool) -> None:
    """SIGSTOP: Redis accepts connections and answers nothing. The probe still answers within 1 s
    every time (the chart's readiness timeout is 3 s): under fail-open the pod stays ready and
    says it is degraded, under fail-closed it is unready with a 503 that says why."""
    policies = tmp_path / "policies"
    policies.mkdir()
    write_yaml(policies / "default.yaml", {"store_fail_open": fail_open})
    with RedisServer() as redis, FakeUpstream(default=Reply(content="ok", usage=USAGE)) as up, \
            GatewayServer(metered_settings(up, redis, policies_dir=policies)) as gw:
        ready, _ = readiness_took(gw)
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        redis.pause()
        try:
            probes = [readiness_took(gw) for _ in range(4)]
            if fail_open:  # requests are served meanwhile, and the probe stays quick under them
                assert post_chat(gw, user="during").status_code == 200
                probes.append(readiness_took(gw))
        finally:
            redis.resume()
        assert max(took for _, took in probes) < 1.0, [took for _, took in probes]
        for response, _ in probes:
            if fail_open:
                assert response.status_code == 200, response.text
                body = response.json()
                assert body["status"] == "degraded" and "redis" in body["degraded"][0], body
                assert "fail-open" in body["degraded"][0]
            else:
                assert response.status_code == 503, response.text
                assert_openai_error(response.json(), type="service_unavailable", code="store_unavailable",
                                    says="redis did not answer")
        assert wait_until(lambda: gw.get("/readyz").json() == {"status": "ready"}, timeout_s=5)
