"""Big bodies beside small chats: what a few huge agent histories in flight cost everyone else.

Starts the fake upstream and Sieve (``python -m gateway.cli serve``), then, per tree:

1. small chats alone: a two-message chat, one at a time, for ``--alone-s`` seconds;
2. ``--big`` huge requests at once (``--steps`` tool-calling steps of
   ``tests.support.conversations.agent_history``: about 20,000 messages and 29 MB by default, each
   with its own conversation id), while small chats go on one at a time until the last
   big one is answered;
3. RSS of the Sieve process: before, peak (sampled every 0.1 s), and ``--settle-s`` after.

::

    python bench/big_bodies.py                          # this tree
    python bench/big_bodies.py --against HEAD~3         # and another revision (or tree path), one after the other
    python bench/big_bodies.py --big 2 --steps 1000     # smaller
    python bench/big_bodies.py --env SIEVE_MAX_REQUEST_CHARS=40000000   # a setting for every Sieve started

Prints one table: small-chat p50/p99 alone and with the big bodies in flight, the big
requests' statuses and latencies, RSS. See bench/README.md.

With ``--answer-mb N`` the big part is the provider's instead: the fake upstream (in this
process) answers every chat with about N MB, ``--big`` small requests are sent at once,
and the table has their statuses and Sieve's RSS::

    python bench/big_bodies.py --answer-mb 50 --against f140f64
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from bench.overhead import Server, against_tree, pct, rss_mb  # noqa: E402
from tests.support.conversations import agent_history  # noqa: E402
from tests.support.fake_upstream import FakeUpstream, Reply  # noqa: E402
from tests.support import free_port  # noqa: E402

MODEL = "gpt-4o-mini"
SMALL = orjson.dumps({"model": MODEL, "messages": [{"role": "system", "content": "You are terse."},
                                                   {"role": "user", "content": "Say ok."}]})
HEADERS = {"Authorization": "Bearer sk-bench", "Content-Type": "application/json"}


def start_sieve(tree: Path, upstream_port: int, name: str, env: dict[str, str]) -> Server:
    port = free_port()
    return Server(name, [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                  port, "/readyz", env={"SIEVE_UPSTREAM_BASE_URL": f"http://127.0.0.1:{upstream_port}/v1",
                                        "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true",
                                        "PYTHONPATH": str(tree), **env}, cwd=tree)


async def small_chats(session: aiohttp.ClientSession, url: str, until: asyncio.Event | float) -> list[float]:
    """Small chats one after the other until ``until`` (an event set, or a deadline passed)."""
    latencies = []
    while not (until.is_set() if isinstance(until, asyncio.Event) else time.monotonic() >= until):
        started = time.perf_counter()
        try:
            async with session.post(url, data=SMALL, headers=HEADERS) as response:
                await response.read()
                if response.status == 200:
                    latencies.append(time.perf_counter() - started)
        except aiohttp.ClientError:  # a kept-alive connection the server closed as it was reused
            continue
    return latencies


async def big_request(session: aiohttp.ClientSession, url: str, body: bytes, i: int) -> tuple[int, float, str]:
    started = time.perf_counter()
    headers = {**HEADERS, "x-sieve-conversation-id": f"bench-big-{i}-{time.time_ns()}"}
    try:
        async with session.post(url, data=body, headers=headers) as response:
            payload = await response.read()
            return response.status, time.perf_counter() - started, payload[:160].decode(errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return 0, time.perf_counter() - started, repr(exc)


async def sample_rss(pid: int, peak: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb(pid))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def measure(server: Server, body: bytes, a: argparse.Namespace) -> dict:
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as small, aiohttp.ClientSession(timeout=timeout) as big:
        await small_chats(small, url, time.monotonic() + 1.0)  # warm
        alone = await small_chats(small, url, time.monotonic() + a.alone_s)
        before = rss_mb(server.pid)
        done, peak = asyncio.Event(), [before]
        sampler = asyncio.create_task(sample_rss(server.pid, peak, done))
        during_task = asyncio.create_task(small_chats(small, url, done))
        started = time.perf_counter()
        bigs = await asyncio.gather(*(big_request(big, url, body, i) for i in range(a.big)))
        wall = time.perf_counter() - started
        done.set()
        during = await during_task
        await sampler
        await asyncio.sleep(a.settle_s)
        after = rss_mb(server.pid)
        again = await small_chats(small, url, time.monotonic() + a.alone_s)
    return {"alone": alone, "during": during, "again": again, "bigs": bigs, "wall": wall,
            "rss": (before, peak[0], after)}


async def measure_answers(server: Server, a: argparse.Namespace) -> list[str]:
    """``--big`` small requests at once, each answered with ``--answer-mb`` MB: statuses and RSS."""
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        before = rss_mb(server.pid)
        done, peak = asyncio.Event(), [before]
        sampler = asyncio.create_task(sample_rss(server.pid, peak, done))
        answers = await asyncio.gather(*(big_request(session, url, SMALL, i) for i in range(a.big)))
        done.set()
        await sampler
        await asyncio.sleep(a.settle_s)
        after = rss_mb(server.pid)
    statuses = ",".join(str(status) for status in sorted({status for status, _, _ in answers}))
    took = [t for _, t, _ in answers]
    return [statuses, f"{min(took):.1f}-{max(took):.1f}", f"{before:.0f}", f"{peak[0]:.0f}", f"{after:.0f}"]


def ms(xs: list[float], q: float) -> str:
    return f"{pct(xs, q) * 1e3:.0f}" if xs else "-"


def report(name: str, r: dict) -> list[str]:
    statuses = sorted({status for status, _, _ in r["bigs"]})
    took = [t for _, t, _ in r["bigs"]]
    before, peak, after = r["rss"]
    return [name, ms(r["alone"], 0.5), ms(r["alone"], 0.99), ms(r["during"], 0.5), ms(r["during"], 0.99),
            str(len(r["during"])), ms(r["again"], 0.5), ",".join(map(str, statuses)),
            f"{min(took):.1f}-{max(took):.1f}", f"{before:.0f}", f"{peak:.0f}", f"{after:.0f}"]


def print_table(rows: list[list[str]], answers: bool = False) -> None:
    cols = ["tree", "status", "s", "RSS before MB", "peak", "after"] if answers else [
        "tree", "alone p50 ms", "p99", "in flight p50 ms", "p99", "n", "after p50 ms", "big status", "big s",
        "RSS before MB", "peak", "after"]
    lines = [cols, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    for line in lines:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths)))


async def amain(a: argparse.Namespace, against: Path | None) -> None:
    if a.answer_mb:
        body = b""
        print(f"# {a.big} requests at once, each answered with ~{a.answer_mb} MB", file=sys.stderr)
        answer = Reply(content="x" * int(a.answer_mb * 1e6))
        upstream: Server | FakeUpstream = FakeUpstream(record=False, default=answer).start()
        upstream_port = upstream.port
    else:
        messages = agent_history(a.steps, output_lines=a.output_lines)
        body = orjson.dumps({"model": MODEL, "messages": messages})
        print(f"# big body: {len(messages)} messages, {len(body) / 1e6:.1f} MB; {a.big} at once", file=sys.stderr)
        upstream_port = free_port()
        upstream = Server("fake-upstream", [sys.executable, "-m", "tests.support.fake_upstream", "--port",
                                            str(upstream_port), "--latency-ms", str(a.latency_ms)],
                          upstream_port, "/v1/models")
    rows = []
    try:
        if isinstance(upstream, Server):
            await upstream.wait_ready(30)
        trees = [("this tree", ROOT)] + ([(f"{a.against}", against)] if against is not None else [])
        for name, tree in trees:
            server = start_sieve(tree, upstream_port, "sieve" if tree == ROOT else "base",
                                 dict(pair.split("=", 1) for pair in a.env))
            try:
                await server.wait_ready(60)
                if a.answer_mb:
                    rows.append([name, *await measure_answers(server, a)])
                    continue
                result = await measure(server, body, a)
            finally:
                server.stop()
            for status, took, head in result["bigs"]:
                if status != 200:
                    print(f"# {name}: big request {status} after {took:.1f} s: {head}", file=sys.stderr)
            rows.append(report(name, result))
            print(f"# {name}: done", file=sys.stderr)
    finally:
        upstream.stop()
    print_table(rows, answers=bool(a.answer_mb))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--big", type=int, default=4, help="big requests in flight at once")
    p.add_argument("--steps", type=int, default=4_600, help="agent steps per big body (4,600: ~20k messages)")
    p.add_argument("--output-lines", type=int, default=46, help="lines per tool output (46: ~29 MB at 4,600 steps)")
    p.add_argument("--alone-s", type=float, default=10.0, help="seconds of small chats alone (before and after)")
    p.add_argument("--settle-s", type=float, default=5.0, help="seconds after the last big answer before RSS is read")
    p.add_argument("--latency-ms", type=float, default=20.0, help="the fake upstream's latency")
    p.add_argument("--answer-mb", type=float, default=0.0,
                   help="instead: the provider answers every chat with this many MB (non-stream)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for every Sieve started (repeatable), e.g. a SIEVE_* setting")
    p.add_argument("--against", help="also measure Sieve from this git revision or tree path, after this tree")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    with against_tree(a.against) as against:
        asyncio.run(amain(a, against))


if __name__ == "__main__":
    main()
