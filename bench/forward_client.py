"""The forwarding client: Sieve's own (gateway.upstream.http1), aiohttp and httpx, posting the same bodies.

    python bench/forward_client.py [--requests 3000] [--concurrency 16] [--rounds 3]

A gateway's forwarding client sits on every request, so its own cost bounds the
gateway's throughput. This starts the fake upstream as its own process (no added
latency, so the client is what is measured), then, in one process and one event
loop, posts a two-message chat completion ``--requests`` times at
``--concurrency`` with each client: ``Http1Client`` (what Sieve forwards with),
``aiohttp.ClientSession`` (what it forwarded with before) and ``httpx.AsyncClient``
(what the design card named), each with
its default pool sized to the concurrency, keep-alive on. The clients alternate
for ``--rounds`` rounds; medians of req/s and of the client process's CPU per
request, and their ratios, are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.upstream.http1 import Http1Client  # noqa: E402
from tests.support import free_port, wait_until  # noqa: E402

BODY = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are terse."},
                                                          {"role": "user", "content": "Say ok."}]})
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


async def with_aiohttp(url: str, requests: int, concurrency: int) -> None:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def post() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as response:
                await response.read()
                assert response.status == 200, response.status
        await _drive(post, requests, concurrency)


async def with_http1(url: str, requests: int, concurrency: int) -> None:
    client = Http1Client(connect_timeout_s=10)
    try:
        async def post() -> None:
            response = await client.request("POST", url, HEADERS, BODY, read_timeout_s=60)
            await response.read()
            response.release()
            assert response.status == 200, response.status
        await _drive(post, requests, concurrency)
    finally:
        await client.close()


async def with_httpx(url: str, requests: int, concurrency: int) -> None:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        async def post() -> None:
            response = await client.post(url, content=BODY, headers=HEADERS)
            assert response.status_code == 200, response.status_code
        await _drive(post, requests, concurrency)


async def _drive(post, requests: int, concurrency: int) -> None:
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await post()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def measure(client, url: str, requests: int, concurrency: int) -> tuple[float, float]:
    """req/s, and this process's CPU ms per request."""
    asyncio.run(client(url, min(200, requests), concurrency))  # warm: connections, imports
    cpu0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(client(url, requests, concurrency))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return requests / wall, cpu * 1000 / requests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.support.fake_upstream", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        if not wait_until(lambda: _answers(port), timeout_s=30, interval_s=0.1):
            raise SystemExit("the fake upstream did not start")
        clients = (("http1", with_http1), ("aiohttp", with_aiohttp), ("httpx", with_httpx))
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in clients}
        for _ in range(args.rounds):
            for name, client in clients:
                results[name].append(measure(client, url, args.requests, args.concurrency))
    finally:
        server.terminate()
        server.wait(10)
    print(f"{args.requests} chat completions per round at concurrency {args.concurrency}, "
          f"medians of {args.rounds} alternating rounds:")
    medians = {name: (statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs))
               for name, runs in results.items()}
    for name, (rps, cpu) in medians.items():
        print(f"  {name:<8} {rps:8.0f} req/s   {cpu:6.3f} client CPU ms/request")
    (s_rps, s_cpu), (a_rps, a_cpu), (h_rps, h_cpu) = medians["http1"], medians["aiohttp"], medians["httpx"]
    print(f"  http1 / aiohttp: req/s x{s_rps / a_rps:.2f}, CPU per request x{s_cpu / a_cpu:.2f}")
    print(f"  aiohttp / httpx: req/s x{a_rps / h_rps:.2f}, CPU per request x{a_cpu / h_cpu:.2f}")
    return 0


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
