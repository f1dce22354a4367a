"""A warm step of a long conversation through Sieve, against sending it unpruned to the provider.

    python bench/warm_step.py                       # 100k tokens, pruned to 30 %, 15 alternating rounds
    python bench/warm_step.py --tokens 100000 --against 99e55f9

Builds a tool-calling history of ``--tokens`` tokens from the dev sessions (as
``prune_speed.py`` does), starts the fake upstream (no added latency: what it spends is
reading and answering the body it gets) and Sieve (``python -m gateway.cli serve``, this tree's
default policy, ``expand_tool: false``), and with ``--against`` a second Sieve from that revision
(checked out as ``ab.py`` does). Sieve's conversation (``x-sieve-conversation-id``, target
``--ratio`` of the history) is decided on a first request; every later request is a warm step
(the frozen plan replayed). Then, per round, the same body is sent once unpruned to the
upstream and once through each Sieve, the order alternating. Prints the medians of the
end-to-end times (until the whole answer is read), each Sieve's ratio to direct (the median of
the per-round ratios), each Sieve's own CPU per warm step (user + system time of its process
over the rounds, from ``/proc``: less disturbed by a loaded machine than the end-to-end times,
and it sees what instruction counts do not, page faults) and, from separate ``/v1/prune``
calls, the cold and warm prune through HTTP.

The fake upstream charges nothing per token, so "direct" is only its own read and parse of
the body: the plain ratio is the worst case for Sieve, what it costs against a provider
that answers instantly. ``--prefill-us-per-token X`` (off by default) makes the fake wait X
µs per prompt token (chars // 4) before answering, as a real provider's prefill does; the
output then says so on every line, and it is a second figure beside the plain one, never
instead of it::

    python bench/warm_step.py --against main                               # the plain figure
    python bench/warm_step.py --against main --prefill-us-per-token 1.0    # 100k tokens: +100 ms
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.ab import checkout, policies_of  # noqa: E402
from bench.overhead import Server, start_sieve  # noqa: E402
from bench.overhead_routes import ROUTES  # noqa: E402
from tests.support import free_port  # noqa: E402
from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import prune_speed  # noqa: E402
from gateway.pruning.tokens import TokenCounters  # noqa: E402

KEY = "sk-bench"


async def timed(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                     "Authorization": f"Bearer {KEY}", **headers}) as r:
        payload = await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {payload[:300]!r}")
        return (time.perf_counter() - t0) * 1000, dict(r.headers)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(a: argparse.Namespace) -> None:
    counter = TokenCounters().for_model("gpt-4o-mini")
    messages = prune_speed.history_of(a.tokens, counter)
    tokens = counter.count_messages(messages)
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": messages})
    target = str(int(tokens * a.ratio))
    a.route, a.sieve_cmd = "chat", ""
    servers: dict[str, Server] = {}
    try:
        port = free_port()
        servers["direct"] = Server("fake-upstream", ROUTES["chat"].upstream_argv(port, a) + [
            "--prefill-us-per-token", str(a.prefill_us_per_token)], port, ROUTES["chat"].ready_path)
        await servers["direct"].wait_ready(30)
        trees = {"this": ROOT} | ({"base": checkout(a.against)} if a.against else {})
        for name, tree in trees.items():
            srv = start_sieve(a, servers["direct"].port, tree, name=f"warm-{name}", policies=policies_of(tree))
            assert srv is not None
            servers[name] = srv
        for name in trees:
            await servers[name].wait_ready(90)
        print(f"# {len(messages)} messages, {tokens:,} tokens, {len(body) // 1024} KiB; target {target}",
              file=sys.stderr)
        urls = {"direct": f"http://127.0.0.1:{servers['direct'].port}/v1/chat/completions"} | {
            name: f"http://127.0.0.1:{servers[name].port}/v1/chat/completions" for name in trees}
        steer = {"x-sieve-conversation-id": "bench-warm-step", "x-sieve-target-tokens": target}
        times: dict[str, list[float]] = {name: [] for name in urls}
        prune_ms: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in trees}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            forwarded = {}
            for name in trees:  # the conversation's first decision, then warm
                for _ in range(3):
                    _, headers = await timed(s, urls[name], body, steer)
                forwarded[name] = headers.get("x-sieve-forwarded-tokens")
            cpu = {name: cpu_s(servers[name].pid) for name in trees}
            for rnd in range(a.rounds):
                order = list(urls) if rnd % 2 == 0 else list(urls)[::-1]
                for name in order:
                    ms, _ = await timed(s, urls[name], body, {} if name == "direct" else steer)
                    times[name].append(ms)
            await asyncio.sleep(0.5)  # the last step's deferred accounting
            cpu = {name: (cpu_s(servers[name].pid) - cpu[name]) * 1000 / a.rounds for name in trees}
            for name in trees:  # /v1/prune through HTTP: a new conversation (cold plan), then warm
                prune_url = urls[name].replace("/chat/completions", "/prune")
                for i in range(a.prune_rounds):
                    conv = {"x-sieve-conversation-id": f"bench-prune-{i}", "x-sieve-target-tokens": target}
                    prune_ms[name]["cold"].append((await timed(s, prune_url, body, conv))[0])
                    prune_ms[name]["warm"].append((await timed(s, prune_url, body, conv))[0])
        direct = times["direct"]
        prefill = f"; the fake upstream waits {a.prefill_us_per_token:g} µs per prompt token (prefill model)" \
            if a.prefill_us_per_token else "; the fake upstream charges no time per token"
        print(f"warm step of a {tokens:,}-token conversation pruned to {target} tokens, end to end "
              f"(medians of {a.rounds} alternating rounds, ms{prefill}):")
        print(f"  direct (unpruned)  {statistics.median(direct):8.2f}")
        for name in trees:
            ratios = [t / d for t, d in zip(times[name], direct)]
            print(f"  sieve {name:<12} {statistics.median(times[name]):8.2f}   x{statistics.median(ratios):.3f} "
                  f"of direct (range {min(ratios):.2f}-{max(ratios):.2f}); its CPU {cpu[name]:.2f} ms per step; "
                  f"forwarded {forwarded[name]} tokens; "
                  f"/v1/prune cold {statistics.median(prune_ms[name]['cold']):.1f} ms, "
                  f"warm {statistics.median(prune_ms[name]['warm']):.1f} ms")
    finally:
        for srv in servers.values():
            srv.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=100_000)
    p.add_argument("--ratio", type=float, default=0.3)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--prune-rounds", type=int, default=5)
    p.add_argument("--against", help="also a Sieve from this git revision (or tree path)")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-delay-ms", type=float, default=0.0)
    p.add_argument("--prefill-us-per-token", type=float, default=0.0,
                   help="the fake upstream waits this long per prompt token (a provider's prefill; off: 0)")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
