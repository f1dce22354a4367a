"""The budget is a promise whatever a request carries: two replicas, one Redis, 32 at once.

Every request carries what a provider bills besides its messages: tool schemas,
``n`` choices, images (inline, whose size Sieve can read, and by URL, whose size
it cannot), some a ``response_format`` schema. The fake provider bills each as
OpenAI would (``tests.support.provider_billing``: prompt with tools and images, ``n`` x
``max_tokens`` of completion), and the sum it billed for the admitted requests
must not pass the limit by a single token.

The figure, before and after a change: ``python -m pytest -q -s
tests/integration/test_budget_overspend.py`` prints ``billed ... over budget``.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.fake_upstream import FakeUpstream, Reply
from tests.integration.budget_helpers import GatewayProcess, redis_day_counter, write_yaml
from tests.support.provider_billing import openai_usage, png_data_url
from tests.support.redis_server import RedisServer
from tests.support import NO_PRUNING, bearer, wait_until

pytestmark = pytest.mark.redis

LIMIT = 50_000
REQUESTS = 96
CONCURRENCY = 32
MODEL = "gpt-4o"


def tool(i: int, rng: random.Random) -> dict[str, Any]:
    properties = {
        f"field_{j}": {"type": rng.choice(["string", "integer", "boolean"]),
                       "description": f"Field {j} of the record: " + "words that explain it " * rng.randint(2, 8)}
        for j in range(rng.randint(3, 10))}
    properties["mode"] = {"type": "string", "enum": ["fast", "careful", "exhaustive"]}
    return {"type": "function", "function": {
        "name": f"tool_{i}", "description": "A tool an agent calls. " * rng.randint(3, 12),
        "parameters": {"type": "object", "properties": properties, "required": sorted(properties)[:2]}}}


def request_body(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    content: list[dict[str, Any]] = [{"type": "text", "text": f"Request {i}: look at these and decide."}]
    for _ in range(rng.randint(0, 2)):
        width, height = rng.randint(64, 3000), rng.randint(64, 3000)
        url = png_data_url(width, height) if rng.random() < 0.5 else \
            f"https://images.example/{i}.png?w={width}&h={height}"
        detail = rng.choice([None, "low", "high", "auto"])
        content.append({"type": "image_url", "image_url": {"url": url, **({"detail": detail} if detail else {})}})
    body: dict[str, Any] = {
        "model": MODEL, "n": rng.randint(1, 4), "max_tokens": rng.randint(50, 600),
        "messages": [{"role": "system", "content": "You are a careful agent. " * rng.randint(1, 20)},
                     {"role": "user", "content": content}],
        "tools": [tool(j, rng) for j in range(rng.randint(1, 8))],
    }
    if rng.random() < 0.3:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": body["tools"][0]["function"]["parameters"]}}
    return body


async def fire(urls: list[str], bodies: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    gate = asyncio.Semaphore(CONCURRENCY)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def one(i: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            async with gate, session.post(urls[i % len(urls)] + "/v1/chat/completions", json=body,
                                          headers={**bearer("sk-acme"), **NO_PRUNING}) as resp:
                return resp.status, await resp.json()

        return await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies)))


def test_no_token_over_the_budget_with_tools_n_and_images(tmp_path: Path, redis: RedisServer) -> None:
    # The provider takes a moment to answer, as one does: 32 requests are in flight at once.
    with FakeUpstream(default=Reply(content="ok", delay_s=0.3), usage_for=openai_usage) as provider:
        config = write_yaml(tmp_path / "sieve.yaml", {
            "keys": [{"key": "sk-acme", "org": "acme"}],
            "budgets": {"orgs": {"acme": {"day": LIMIT}}},
        })
        env = {"SIEVE_REDIS_URL": redis.url, "SIEVE_UPSTREAM_BASE_URL": provider.base_url}
        replicas = [GatewayProcess(config, env).spawn(), GatewayProcess(config, env).spawn()]
        try:
            for replica in replicas:
                replica.wait_ready()
            results = asyncio.run(fire([r.base_url for r in replicas],
                                       [request_body(i) for i in range(REQUESTS)]))
        finally:
            for replica in replicas:
                replica.stop()

    accepted = [body for status, body in results if status == 200]
    rejected = [body for status, body in results if status != 200]
    billed = sum(openai_usage(r.json)["total_tokens"] for r in provider.requests)
    print(f"\nbilled {billed} for {len(accepted)} of {REQUESTS} requests under a {LIMIT}-token budget: "
          f"{max(0, billed - LIMIT)} over budget")
    assert all(body["error"]["type"] == "budget_exceeded" for body in rejected), rejected[:1]
    assert len(provider.requests) == len(accepted) and accepted and rejected
    assert billed <= LIMIT  # the promise: not one token over
    wait_until(lambda: redis_day_counter(redis.url, "acme").reserved == 0, timeout_s=10, interval_s=0.1)
    assert redis_day_counter(redis.url, "acme").settled == billed  # charged exactly what was billed
