"""Shared pieces of the dependency-fault tests: a Redis-metered gateway, metric and budget readers.

Every fault test asserts the same four things: the status, the OpenAI-shaped
error (or the upstream's own, unchanged), the counters, and that Redis holds
no reservation afterwards.
"""

from __future__ import annotations

from typing import Any

from gateway.config.settings import ModelRoute, Settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, MODEL, org_counter, redis_usage
from tests.support.redis_server import RedisServer
from tests.support import NO_PRUNING, bearer, free_port, metric_value, wait_until

ORG = "acme"
LIMIT = 1_000_000
USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
AUTH = {**bearer("sk-acme"), **NO_PRUNING}
DEAD_MODEL = "dead-model"  # routed to a loopback port nobody listens on


def budget_settings(upstream: FakeUpstream, redis: RedisServer, **changes: Any) -> Settings:
    """A gateway with one virtual key (org acme) and a daily token budget in Redis."""
    base: dict[str, Any] = dict(
        upstream_base_url=upstream.base_url, redis_url=redis.url, admin_key=ADMIN_KEY,
        budgets={"orgs": {ORG: {"day": LIMIT}}}, virtual_keys=({"key": "sk-acme", "org": ORG},))
    return Settings(**{**base, **changes})


def metered_settings(upstream: FakeUpstream, redis: RedisServer, **changes: Any) -> Settings:
    """``budget_settings`` with short upstream timeouts and a model routed to nowhere (``DEAD_MODEL``)."""
    faults: dict[str, Any] = dict(
        upstream_timeout_s=0.5, upstream_connect_timeout_s=0.5,
        models={DEAD_MODEL: ModelRoute(name=DEAD_MODEL, api_base=f"http://127.0.0.1:{free_port()}/v1")})
    return budget_settings(upstream, redis, **{**faults, **changes})


def outcomes(gw: GatewayServer, model: str = MODEL) -> dict[str, float]:
    """Every outcome counted for acme and ``model`` so far (only non-zero ones)."""
    out = {}
    for metric in gw.metrics.registry.collect():
        if metric.name != "sieve_requests":
            continue
        for s in metric.samples:
            if s.name == "sieve_requests_total" and s.labels["org"] == ORG and s.labels["model"] == model:
                out[s.labels["outcome"]] = s.value
    return out


def fail_open(gw: GatewayServer, reason: str) -> float:
    return metric_value(gw.metrics, "sieve_fail_open_total", reason=reason)


def budget(redis: RedisServer, org: str = ORG) -> tuple[int, int]:
    """(reserved, settled) of the org's day counter, read straight from Redis; (0, 0) before its first charge."""
    counters = redis_usage(redis.url, org)
    if not counters:
        return 0, 0
    day = org_counter(counters, f"org:{org}:day")
    return day.reserved, day.settled


def settle_down(gw: GatewayServer, redis: RedisServer, timeout_s: float = 10.0) -> tuple[int, int]:
    """Wait for the deferred accounting and for nothing to be reserved; the (reserved, settled) then."""
    wait_until(lambda: gw.services.deferred.pending == 0 and budget(redis)[0] == 0, timeout_s=timeout_s)
    return budget(redis)


def assert_openai_error(payload: Any, *, type: str, code: str | None, says: str) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` whose message contains ``says``."""
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    error = payload["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert (error["type"], error["code"]) == (type, code), error
    assert says in error["message"], error["message"]
    return error
