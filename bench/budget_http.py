"""Added latency of budget enforcement per request, measured through the HTTP gateway.

Starts a real ``redis-server`` and the fake upstream (``python -m
tests.support.fake_upstream``, no added latency), then four gateway processes
(``python -m gateway.cli serve``) that differ only in state and budgets:

=================  =====================================================
``plain``          in-memory stores, no budget applies
``memory+budget``  in-memory stores, org minute + org day + team day limits
``redis``          Redis for state (conversation store), no budget applies
``redis+budget``   Redis, the same three limits: reserve + settle in Lua
=================  =====================================================

Every request is a small non-streaming chat with ``x-sieve-strategy: none``,
so the difference between targets is identity, state and budget work only.
At concurrency 1 the targets are interleaved request by request, so machine
noise hits them alike; at higher concurrency each runs a closed loop in turn::

    python bench/budget_http.py [--requests 1000] [--concurrency 1,16] [--json-out FILE]

Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from tests.integration.budget_helpers import GatewayProcess, write_yaml  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support import free_port  # noqa: E402

TARGETS = ("plain", "memory+budget", "redis", "redis+budget")
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are terse."},
                                             {"role": "user", "content": "Name one prime number."}],
        "max_tokens": 32}
HEADERS = {"authorization": "Bearer sk-bench", "x-sieve-strategy": "none"}
BIG = 10**12
BUDGETS = {"orgs": {"acme": {"minute": BIG, "day": BIG}}, "teams": {"search": {"day": BIG}}}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[94]


async def timed(session: aiohttp.ClientSession, url: str, out: list[float]) -> None:
    started = time.perf_counter()
    async with session.post(url, json=BODY, headers=HEADERS) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}")
    out.append(time.perf_counter() - started)


async def interleaved(urls: dict[str, str], requests: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in urls}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for name, url in urls.items():  # warm-up: connections, scripts, lazy imports
            for _ in range(50):
                await timed(session, url, [])
        for _ in range(requests):
            for name, url in urls.items():
                await timed(session, url, samples[name])
    return samples


async def closed_loop(url: str, requests: int, concurrency: int) -> list[float]:
    samples: list[float] = []
    todo = iter(range(requests))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for _ in range(50):
            await timed(session, url, [])

        async def worker() -> None:
            for _ in todo:
                await timed(session, url, samples)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples


def summary(samples: dict[str, list[float]], cpu: dict[str, float]) -> dict[str, dict[str, float]]:
    return {name: {"p50_ms": statistics.median(s) * 1000, "p95_ms": p95(s) * 1000, "n": len(s),
                   "cpu_ms_per_req": cpu[name] * 1000 / len(s)} for name, s in samples.items()}


def print_table(title: str, stats: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    print(f"{'target':<15}{'p50 ms':>9}{'p95 ms':>9}{'cpu ms/req':>12}")
    for name, s in stats.items():
        print(f"{name:<15}{s['p50_ms']:>9.2f}{s['p95_ms']:>9.2f}{s['cpu_ms_per_req']:>12.2f}")
    for a, b in (("redis+budget", "redis"), ("memory+budget", "plain"), ("redis+budget", "plain")):
        print(f"  {a} - {b}: p50 {stats[a]['p50_ms'] - stats[b]['p50_ms']:+.2f} ms, "
              f"p95 {stats[a]['p95_ms'] - stats[b]['p95_ms']:+.2f} ms, "
              f"cpu {stats[a]['cpu_ms_per_req'] - stats[b]['cpu_ms_per_req']:+.2f} ms/req")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="per target and concurrency")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sieve-bench-budget-"))
    port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keys = [{"key": "sk-bench", "org": "acme", "team": "search", "name": "bench"}]
    gateways: dict[str, GatewayProcess] = {}
    results: dict[str, dict[str, dict[str, float]]] = {}
    with RedisServer() as redis:
        try:
            for name in TARGETS:
                config = {"keys": keys, **({"budgets": BUDGETS} if name.endswith("budget") else {})}
                env = {"SIEVE_UPSTREAM_BASE_URL": f"http://127.0.0.1:{port}/v1"}
                if name.startswith("redis"):
                    env["SIEVE_REDIS_URL"] = redis.url
                gateways[name] = GatewayProcess(write_yaml(work / f"{name}.yaml", config), env).spawn()
            for gateway in gateways.values():
                gateway.wait_ready()
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).raise_for_status()
            urls = {name: g.base_url + "/v1/chat/completions" for name, g in gateways.items()}
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                # CPU includes the warm-up requests and the deferred settle; it is per measured request.
                cpu = {name: -cpu_seconds(g.proc.pid) for name, g in gateways.items()}
                if concurrency == 1:
                    samples = asyncio.run(interleaved(urls, args.requests))
                else:
                    samples = {name: asyncio.run(closed_loop(url, args.requests, concurrency))
                               for name, url in urls.items()}
                time.sleep(0.5)  # let deferred accounting finish before reading CPU
                cpu = {name: cpu[name] + cpu_seconds(g.proc.pid) for name, g in gateways.items()}
                results[f"c{concurrency}"] = stats = summary(samples, cpu)
                print_table(f"concurrency {concurrency}, {args.requests} requests per target", stats)
        finally:
            for gateway in gateways.values():
                gateway.stop()
            upstream.terminate()
            upstream.wait(10)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
