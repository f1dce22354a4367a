"""Added latency of budget enforcement per request: reserve before, settle after.

Runs the in-memory store and a real ``redis-server`` on loopback side by side,
three limits per request (org minute + org day + team day), sequentially and
with concurrent requests, and prints median and p95 per request::

    python bench/budget_overhead.py [--requests 2000] [--concurrency 1,32]

Not a test: numbers depend on the machine. Redis runs with persistence off.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.billing.budgets import BudgetLimit, Scope, Window, new_reservation_id  # noqa: E402
from gateway.state.memory import MemoryBudgetStore  # noqa: E402
from gateway.state.redis_store import RedisStores  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

LIMITS = (
    BudgetLimit("acme", Scope.ORG, "acme", Window.MINUTE, 10**15),
    BudgetLimit("acme", Scope.ORG, "acme", Window.DAY, 10**15),
    BudgetLimit("acme", Scope.TEAM, "search", Window.DAY, 10**15),
)


async def one_request(store, samples: list[float]) -> None:
    started = time.perf_counter()
    reservation = await store.reserve(new_reservation_id(), LIMITS, 5000, time.time())
    await store.settle(reservation, 1234)
    samples.append(time.perf_counter() - started)


async def run(store, requests: int, concurrency: int) -> tuple[list[float], float]:
    samples: list[float] = []
    queue = iter(range(requests))

    async def worker() -> None:
        for _ in queue:
            await one_request(store, samples)

    for _ in range(min(200, requests // 10)):  # warm-up: script load, pool connections
        await one_request(store, [])
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, time.perf_counter() - started


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[94]


async def main(requests: int, concurrencies: list[int]) -> None:
    rows = []
    with RedisServer() as server:
        stores = RedisStores.from_url(server.url, max_connections=64)
        try:
            for concurrency in concurrencies:
                for name, store in (("memory", MemoryBudgetStore()), ("redis", stores.budgets)):
                    samples, elapsed = await run(store, requests, concurrency)
                    rows.append((name, concurrency, statistics.median(samples) * 1e3, p95(samples) * 1e3,
                                 requests / elapsed))
        finally:
            await stores.aclose()
    print(f"reserve + settle per request, {len(LIMITS)} limits, {requests} requests, redis on loopback")
    print(f"{'store':<8} {'concurrency':>11} {'median ms':>10} {'p95 ms':>8} {'req/s':>9}")
    for name, concurrency, median, tail, rate in rows:
        print(f"{name:<8} {concurrency:>11} {median:>10.3f} {tail:>8.3f} {rate:>9.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,32", help="comma-separated list")
    args = parser.parse_args()
    asyncio.run(main(args.requests, [int(c) for c in args.concurrency.split(",")]))
