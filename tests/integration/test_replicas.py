"""Two gateway processes, one Redis, 400 concurrent requests: the budget holds exactly.

Two orgs share the load, each through both replicas:

* ``acme`` (default upstream): every request reserves exactly R tokens (the
  prompt as billed + ``max_tokens`` chosen so the sum is R) and the upstream
  reports exactly R, so the budget (100 R + R/2) admits exactly 100 of 200,
  whatever the interleaving, and every 429 sees R/2 remaining.
* ``beta`` (second upstream): prompts of different sizes, usage computed by
  the upstream from each prompt, so the settled total is a sum of different
  numbers, and who gets in depends on the race.

For both: settled never exceeds the limit, nothing stays reserved, every
rejection is a 429 ``budget_exceeded`` naming the org's budget, the upstream
saw exactly the accepted requests, and the settled total read from Redis with
the store's ``usage()`` equals the sum of the usage the upstream reported for
the accepted requests.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from gateway.billing.reservation_estimate import REPLY_PRIMING_TOKENS
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.integration.budget_helpers import (
    ADMIN_KEY, MODEL, GatewayProcess, admin_headers, redis_day_counter, write_yaml,
)
from tests.support.redis_server import RedisServer
from tests.support import NO_PRUNING, bearer, wait_until

pytestmark = pytest.mark.redis

R = 200                       # tokens per acme request, reserved and reported
ACME_LIMIT = 100 * R + R // 2
BETA_LIMIT = 12_000
BETA_MAX_TOKENS = 64
PER_ORG = 200


def beta_prompt(i: int) -> str:
    return "word " * (10 + (i * 37) % 120)


async def fire(requests: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[int, dict[str, str], dict]]:
    """All requests at once (one connection each): (url, key, body) -> (status, headers, json)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def one(url: str, key: str, body: dict[str, Any]) -> tuple[int, dict[str, str], dict]:
            headers = {**bearer(key), **NO_PRUNING}
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
                return resp.status, dict(resp.headers), await resp.json()

        return await asyncio.gather(*(one(*r) for r in requests))


def test_two_replicas_share_one_budget_exactly(tmp_path: Path, redis: RedisServer) -> None:
    with FakeUpstream() as exact, FakeUpstream(default=Reply(content="answer")) as varied:
        config = write_yaml(tmp_path / "sieve.yaml", {
            "models": {"var-model": {"api_base": varied.base_url}},
            "keys": [{"key": "sk-acme", "org": "acme"}, {"key": "sk-beta", "org": "beta", "team": "t"}],
            "budgets": {"orgs": {"acme": {"day": ACME_LIMIT}, "beta": {"day": BETA_LIMIT}}},
            "admin_key_env": "TEST_ADMIN_KEY",
        })
        env = {"SIEVE_REDIS_URL": redis.url, "SIEVE_UPSTREAM_BASE_URL": exact.base_url,
               "TEST_ADMIN_KEY": ADMIN_KEY}
        replicas = [GatewayProcess(config, env).spawn(), GatewayProcess(config, env).spawn()]
        try:
            for replica in replicas:
                replica.wait_ready()
            run_load(replicas, exact, varied, redis)
            keys_are_shared(*replicas)
        finally:
            for replica in replicas:
                replica.stop()


def run_load(replicas: list[GatewayProcess], exact: FakeUpstream, varied: FakeUpstream,
             redis: RedisServer) -> None:
    acme_body = {"model": MODEL, "messages": [{"role": "user", "content": "tell me something useful"}]}
    probe = httpx.post(replicas[0].base_url + "/v1/prune", json=acme_body, timeout=10,
                       headers={"authorization": "Bearer sk-acme", **NO_PRUNING})
    # /v1/prune spends no budget; the prompt as billed is the messages and the reply's priming.
    prompt = int(probe.headers["x-sieve-forwarded-tokens"]) + REPLY_PRIMING_TOKENS
    assert 0 < prompt < R
    acme_body["max_tokens"] = R - prompt
    exact.default = Reply(content="ok", usage={"prompt_tokens": prompt, "completion_tokens": R - prompt,
                                                "total_tokens": R})
    requests = [(replicas[i % 2].base_url, "sk-acme", acme_body) for i in range(PER_ORG)]
    requests += [(replicas[i % 2].base_url, "sk-beta",
                  {"model": "var-model", "messages": [{"role": "user", "content": beta_prompt(i)}],
                   "max_tokens": BETA_MAX_TOKENS}) for i in range(PER_ORG)]
    random.Random(4).shuffle(requests)

    results = asyncio.run(fire(requests))

    by_org: dict[str, list[tuple[int, dict[str, str], dict]]] = {"acme": [], "beta": []}
    for (_, key, _), result in zip(requests, results):
        by_org[key[3:]].append(result)
    for org, limit, upstream in (("acme", ACME_LIMIT, exact), ("beta", BETA_LIMIT, varied)):
        got = by_org[org]
        accepted = [r for r in got if r[0] == 200]
        rejected = [r for r in got if r[0] != 200]
        assert len(accepted) + len(rejected) == PER_ORG
        assert accepted and rejected, f"{org}: the budget should admit a fraction, got {len(accepted)}"
        for status, headers, body in rejected:
            error = body["error"]
            assert status == 429, body
            assert (error["type"], error["budget"], error["limit"]) == ("budget_exceeded", f"org:{org}:day", limit)
            assert error["remaining"] < error["requested"] and error["reset_at"].endswith("T00:00:00Z")
            assert headers["x-sieve-budget-remaining-tokens"] == str(error["remaining"])
        reported = 0
        for _, headers, body in accepted:
            usage = body["usage"]["total_tokens"]
            # Precondition of "never overspends": the provider used no more than was reserved.
            assert usage <= int(headers["x-sieve-forwarded-tokens"]) + body_max_tokens(org)
            reported += usage
        assert len(upstream.requests) == len(accepted)  # every rejection was stopped before the upstream
        settled = wait_settled(redis.url, org)
        assert settled.reserved == 0
        assert settled.settled == reported <= limit
        if org == "acme":
            assert len(accepted) == 100 and settled.settled == 100 * R
            assert {r[2]["error"]["remaining"] for r in rejected} == {R // 2}


def body_max_tokens(org: str) -> int:
    return R if org == "acme" else BETA_MAX_TOKENS  # acme's max_tokens is R - prompt < R


def wait_settled(url: str, org: str):
    """Accounting is deferred a moment past the response: wait until nothing is held."""
    wait_until(lambda: redis_day_counter(url, org).reserved == 0, timeout_s=5.0, interval_s=0.05)
    return redis_day_counter(url, org)


def keys_are_shared(a: GatewayProcess, b: GatewayProcess) -> None:
    """A key added on one replica works on the other; revoked on the other, it is dead on the first."""
    created = httpx.post(a.base_url + "/admin/keys", json={"org": "gamma", "name": "shared"},
                         headers=admin_headers(), timeout=10)
    assert created.status_code == 201, created.text
    key, digest = created.json()["key"], created.json()["key_sha256"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    auth = {**bearer(key), **NO_PRUNING}
    assert httpx.post(b.base_url + "/v1/chat/completions", json=body, headers=auth, timeout=10).status_code == 200
    assert httpx.delete(f"{b.base_url}/admin/keys/{digest}", headers=admin_headers(), timeout=10).status_code == 200
    refused = httpx.post(a.base_url + "/v1/chat/completions", json=body, headers=auth, timeout=10)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
