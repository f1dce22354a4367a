"""Where one request's CPU goes, per route: a py-spy profile of the gateway under load.

    python bench/cpu_budget.py                                   # the three routes, passthrough and pruning, json
    python bench/cpu_budget.py --scenarios chat:none:json,chat:none:stream --payload small
    python bench/cpu_budget.py --scenarios chat:prune:json --payload agent --top 30

Per scenario (route:kind:mode; kind ``none`` is ``x-sieve-strategy: none``, ``prune`` a warm
conversation pruned to ``--prune-target``), starts the route's fake upstream and this tree's
gateway (``python -m gateway.cli serve``, default policy, ``expand_tool: false``), warms it,
then loads it at ``--concurrency`` for ``--seconds`` while ``py-spy record`` samples it (raw
stacks). The gateway's CPU per request is read from ``/proc`` over the same window, and split
by the share of samples in each part of the request path. A sample goes to the part of its
innermost frame that names one (asyncio, contextlib, logging and the like are skipped, so their
time goes to the code that called them): parse, auth, policy, budget, prune, forward, relay,
accounting, metrics, audit (with the secret scrub of every log record), access log, proxy (the sequence itself), framework (uvicorn,
Starlette, FastAPI: reading the request, writing the response) and event loop (nothing of ours
on the stack). Prints ms per request per part and scenario; ``--top N`` also prints the N
functions with the most own samples. See bench/README.md ("cpu_budget.py").
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ab import KINDS, policies_of  # noqa: E402
from bench.overhead import CACHE, Server, agent_request, cpu_seconds, drive, small_request, start_sieve, \
    start_upstream  # noqa: E402
from bench.overhead_routes import ROUTES  # noqa: E402

# (part, pattern on "function (path:line)"), tried in order on each frame from the innermost out.
PARTS: list[tuple[str, re.Pattern[str]]] = [(name, re.compile(pattern)) for name, pattern in (
    ("access log", r"telemetry/access_log\.py"),
    ("audit", r"telemetry/(audit|redaction)\.py"),
    ("metrics", r"telemetry/(recording|metrics)\.py|prometheus_client/"),
    ("accounting", r"gateway/(exchange/)?(accounting|deferred)\.py|telemetry/(savings|pricing|usage|usage_bounds|"
                   r"conversation_signals|signals)\.py"),
    ("budget", r"gateway/(exchange/budget_guard|(billing/)?(budgets|reservation_estimate|image_tokens)|budget_guard)\.py|"
                   r"gateway/state/"),
    ("prune", r"gateway/(exchange/)?(pruner|prune_step|expander|expand_record|big_bodies)\.py|gateway/expand/|"
                "gateway/pruning/|"
                "gateway/scorers/"),
    ("relay", r"^_relay |wire/(sse|event_taps)\.py|^stream_response |^_stream |^(body_iterator|_streamed)"),
    ("forward", r"gateway/upstream/|aiohttp/|yarl/|multidict/"),
    ("policy", r"gateway/(config/)?policies\.py"),
    ("auth", r"api/access\.py|gateway/(identity|auth_throttle|auth/identity|auth/throttle)\.py|wire/keys\.py"),
    ("parse", r"wire/(body|chat|ingress|headers|call|continuation)\.py|wire/formats/|^(_call|_read_json) "),
    ("proxy", r"gateway/(proxy|exchange/forward)\.py|api/(responses|rendering)\.py|api/routes\.py"),
    ("framework", r"starlette/|fastapi/|uvicorn/|httptools|h11/|sse_starlette/"),
)]
SKIPPED = re.compile(r"asyncio/|contextlib\.py|logging/|typing\.py|enum\.py|dataclasses\.py|functools\.py|"
                     r"abc\.py|threading\.py|concurrent/|selectors\.py|<frozen")
PART_NAMES = [name for name, _ in PARTS] + ["event loop"]


def history_request(tokens: int) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    import prune_speed  # noqa: PLC0415 - only for this payload
    from gateway.pruning.tokens import TokenCounters  # noqa: PLC0415

    return {"model": "gpt-4o-mini", "messages": prune_speed.history_of(tokens, TokenCounters().for_model("gpt-4o-mini"))}


def part_of(frames: list[str]) -> str:
    for frame in reversed(frames):  # innermost first
        if SKIPPED.search(frame):
            continue
        for name, pattern in PARTS:
            if pattern.search(frame):
                return name
    return "event loop"


def read_raw(path: Path) -> tuple[collections.Counter, collections.Counter, int]:
    """py-spy's raw output: per part and per innermost function, the samples."""
    parts: collections.Counter = collections.Counter()
    leaves: collections.Counter = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first is the process/thread
        n = int(count)
        total += n
        parts[part_of(frames)] += n
        leaves[frames[-1] if frames else "?"] += n
    return parts, leaves, total


async def profile(a: argparse.Namespace, scenario: str) -> dict:
    route_name, kind, mode = scenario.split(":")
    route = ROUTES[route_name]
    a.route = route_name
    chat_body = small_request() if a.payload == "small" else agent_request(a.agent_tokens)[0] \
        if a.payload == "agent" else history_request(a.agent_tokens)
    body = route.payload(chat_body)
    headers = dict(KINDS[kind]) | ({"x-sieve-target-tokens": str(a.prune_target)} if kind == "prune" else {})
    stream = mode == "stream"
    servers: list[Server] = []
    try:
        up = start_upstream(a)
        servers.append(up)
        await up.wait_ready(30)
        sieve = start_sieve(a, up.port, a.tree, name="cpu-budget", policies=policies_of(a.tree))
        assert sieve is not None
        servers.append(sieve)
        await sieve.wait_ready(90)
        url = f"http://127.0.0.1:{sieve.port}{route.path}"
        await drive(url, body, headers, stream, a.concurrency, 300, 10, sieve.pid, "warm", route=route)
        raw = CACHE / f"cpu-budget-{a.tree.resolve().name}-{route_name}-{kind}-{mode}.txt"
        spy = subprocess.Popen([a.py_spy, "record", "--pid", str(sieve.pid), "--rate", str(a.rate), "--format",
                                "raw", "--gil", "--nonblocking", "--output", str(raw), "--duration", str(int(a.seconds) + 30)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await asyncio.sleep(1.0)  # py-spy attached
        cpu0 = cpu_seconds(sieve.pid)
        cell = await drive(url, body, headers, stream, a.concurrency, 10**9, a.seconds, sieve.pid, scenario,
                           warmup=False, route=route)
        cpu_ms = (cpu_seconds(sieve.pid) - cpu0) * 1e3 / max(1, cell.n)
        spy.send_signal(2)  # SIGINT: py-spy writes what it has
        spy.wait(30)
        parts, leaves, total = read_raw(raw)
        print(f"# {scenario}: {cell.n} requests, {cell.rps:.0f} req/s, {cpu_ms:.3f} CPU ms/request, "
              f"{total} samples, {cell.errors} errors", file=sys.stderr)
        return {"scenario": scenario, "requests": cell.n, "rps": cell.rps, "cpu_ms": cpu_ms, "samples": total,
                "parts": {p: cpu_ms * parts[p] / total for p in PART_NAMES} if total else {},
                "top": [(f, n / total * cpu_ms) for f, n in leaves.most_common(a.top)] if total else []}
    finally:
        for srv in reversed(servers):
            srv.stop()


def print_budget(results: list[dict]) -> None:
    heads = ["part"] + [r["scenario"] for r in results]
    lines = [heads]
    for part in PART_NAMES:
        lines.append([part] + [f"{r['parts'].get(part, 0):.3f}" for r in results])
    lines.append(["total (CPU ms/request)"] + [f"{r['cpu_ms']:.3f}" for r in results])
    lines.append(["req/s"] + [f"{r['rps']:.0f}" for r in results])
    widths = [max(len(line[i]) for line in lines) for i in range(len(heads))]
    for line in lines:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(line, widths))))
    for r in results:
        if r["top"]:
            print(f"\n{r['scenario']}: innermost functions, ms per request")
            for frame, ms in r["top"]:
                print(f"  {ms:7.4f}  {frame}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="chat:none:json,messages:none:json,responses:none:json,"
                                          "chat:prune:json,messages:prune:json,responses:prune:json",
                   help="comma list of route:kind:mode (route: chat, messages, responses; kind: none, prune; "
                        "mode: json, stream)")
    p.add_argument("--payload", choices=("small", "agent", "history"), default="agent",
                   help="small: a two-message chat; agent: the longest dev-session step under --agent-tokens; "
                        "history: prune_speed.py's history of --agent-tokens tokens")
    p.add_argument("--agent-tokens", type=int, default=20_000)
    p.add_argument("--prune-target", type=int, default=8_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rate", type=int, default=400, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--tree", type=Path, default=ROOT, help="the tree whose gateway is profiled (default: this one)")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-delay-ms", type=float, default=0.0)
    a = p.parse_args(argv)
    a.sieve_cmd = ""
    a.py_spy = shutil.which("py-spy")
    if a.py_spy is None:
        p.error("py-spy is not installed (pip install py-spy)")
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    results = [asyncio.run(profile(a, s)) for s in a.scenarios.split(",") if s]
    print_budget(results)


if __name__ == "__main__":
    main()
