"""Soak: one real gateway under steady mixed traffic for a long time. Does anything leak or break?

    python bench/soak.py                                  # 20 minutes at 20 req/s
    python bench/soak.py --duration 120 --report-every 15 # a short check

Starts, like a deployment: ``redis-server``; a fakes process (the fake upstream
and a flaky fake scorer model, tests/support/fake_upstream.py and tests/support/fake_scorer.py,
in their own process so they do not share a CPU-bound loop with the load
generator); and ``python -m gateway.cli serve`` with virtual keys, budgets, an
audit log, and an LLM-scorer policy for one org. Then an open-loop aiohttp
generator sends ``--rate`` requests/s (a request is due at t0 + i/rate whether
or not earlier ones finished; latency is counted from that due time, so a
stalled gateway shows up as latency instead of silently lowering the load).

Every ``--report-every`` seconds: requests by outcome, latency, gateway RSS
and open file descriptors. At the end: a table per kind of traffic, whether
RSS and fds grew (median of the first minute vs the last), reservations left
in Redis, the gateway's own counters, errors in its log, and a SIGTERM that
must end it with status 0. Writes JSON to bench/results/ and exits 1 if a
check failed. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import Server, cpu_seconds, pct, rss_mb  # noqa: E402
from tests.support.conversations import agent_history  # noqa: E402
from tests.support import free_port  # noqa: E402

WORK = ROOT / "bench" / ".cache" / "soak"
RESULTS = ROOT / "bench" / "results"
MODEL = "gpt-4o-mini"
KEYS = {"main": "sk-soak-main", "scored": "sk-soak-scored", "tiny": "sk-soak-tiny"}
# kind: (weight, what it exercises)
KINDS = {
    "chat": (25, "non-streaming two-message chat"),
    "stream": (20, "streaming chat, read to [DONE]"),
    "agent": (25, "tool-calling agent history, growing per conversation, pruned (local scorer)"),
    "scored": (10, "agent history pruned by the LLM scorer policy; the scorer fails or hangs 40 %"),
    "budget": (10, "org with a 1,000 tokens/minute budget: mostly 429"),
    "disconnect": (10, "streaming chat, the client walks away after the first chunk"),
}
AGENT_STEPS = (6, 28)        # an agent conversation grows from 6 to 28 tool steps, then starts over
AGENT_CONVERSATIONS = 12
SCORER_TIMEOUT_S = 0.5


# -- the fakes process (python bench/soak.py --serve-fakes UP_PORT SCORER_PORT) -------------------
def serve_fakes(up_port: int, scorer_port: int, latency_ms: float, chunks: int, chunk_delay_ms: float) -> None:
    from tests.support.fake_scorer import ScorerModel, answer  # noqa: PLC0415
    from tests.support.fake_upstream import FakeUpstream, Reply  # noqa: PLC0415

    # A client of the gateway walking away makes the gateway drop its upstream stream: aiohttp
    # would log each as an error with a traceback, which is expected here.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    pieces = [f"tok{i} " for i in range(chunks)]
    upstream = FakeUpstream(port=up_port, record=False, default=Reply(
        content="".join(pieces), chunks=pieces, delay_s=latency_ms / 1000, chunk_delay_s=chunk_delay_ms / 1000))
    flaky = random.Random(7)

    def respond(ids: list[int], attempt: int, request: dict) -> Reply:
        roll = flaky.random()
        if roll < 0.2:
            return Reply(status=500)
        if roll < 0.4:
            return Reply(delay_s=SCORER_TIMEOUT_S * 4)  # hangs past the batch timeout
        return Reply(content=answer({i: 1 + (i * 7) % 5 for i in ids}))

    scorer = ScorerModel(respond, port=scorer_port, record=False)

    async def run() -> None:
        await upstream.start_async()
        await scorer.start_async()
        print(f"fakes: upstream {upstream.base_url}, scorer {scorer.base_url}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


# -- configuration and processes ---------------------------------------------------------------
def write_config(scorer_port: int) -> dict[str, str]:
    WORK.mkdir(parents=True, exist_ok=True)
    policies = WORK / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "default.yaml").write_text((ROOT / "policies" / "default.yaml").read_text())
    # The LLM scorer on every candidate, no score cache, and each request its own short-lived
    # conversation, so the scorer is asked every time; short timeouts: failures and hangs
    # fall back to the local scores.
    (policies / "scored.yaml").write_text(json.dumps({
        "strategy": "relevance", "scorer": "llm", "scorer_api_base": f"http://127.0.0.1:{scorer_port}/v1",
        "scorer_min_history_tokens": 0, "scorer_cost_check": False, "scorer_cache_ttl_s": 0,
        "scorer_batch_timeout_s": SCORER_TIMEOUT_S, "scorer_deadline_s": SCORER_TIMEOUT_S * 2,
        "state_ttl_s": 120}))
    config = WORK / "sieve.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "keys": [{"key": key, "org": org} for org, key in KEYS.items()],
        "org_policies": {"scored": "scored"},
        "budgets": {"orgs": {"main": {"day": 10**12}, "scored": {"day": 10**12}, "tiny": {"minute": 1000}}},
    }))
    audit = WORK / "audit.jsonl"
    audit.unlink(missing_ok=True)
    return {"SIEVE_CONFIG": str(config), "SIEVE_POLICIES_DIR": str(policies), "SIEVE_AUDIT_LOG": str(audit),
            "SIEVE_LOG_LEVEL": "warning", "SIEVE_SHUTDOWN_GRACE_S": "30"}


def gateway_env(extra: dict[str, str]) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SIEVE_")}  # only ours
    env.update(extra)
    return env


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


# -- workload ----------------------------------------------------------------------------------
class Workload:
    """Request bodies; agent conversations grow turn by turn, then restart as new ones.

    A new conversation takes one of ``histories`` distinct texts in rotation (0: text
    never seen before, every time). The gateway caches per content (token counts keep
    each message text), so with fresh text its RSS climbs toward those caches' caps
    for the whole run, which says nothing about leaks; a small rotation fills them in
    the first minutes, after which growth is a leak."""

    def __init__(self, seed: int, histories: int = 12) -> None:
        self.rng = random.Random(seed)
        self.distinct = histories
        full = agent_history(AGENT_STEPS[1])
        # agent_history(k) is a prefix of agent_history(K): every step ends on a user message.
        self.agent_bodies = {k: len(agent_history(k)) for k in range(*AGENT_STEPS)}
        self.agent_full = full
        self.convs = [[0, AGENT_STEPS[0]] for _ in range(AGENT_CONVERSATIONS)]  # [generation, step]
        self.histories = [self.history(c, 0) for c in range(AGENT_CONVERSATIONS)]
        small = {"model": MODEL, "max_tokens": 64, "messages": [
            {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say ok."}]}
        self.small = orjson.dumps(small)
        self.small_stream = orjson.dumps({**small, "stream": True})
        self.greedy = orjson.dumps({**small, "max_tokens": 256})  # reserves 276 of the tiny org's 1,000/min
        self.scored = [orjson.dumps({"model": MODEL, "max_tokens": 256,
                                     "messages": full[:self.agent_bodies[k]]}) for k in (10, 14, 18)]
        self.scored_n = 0

    def history(self, conversation: int, generation: int) -> list[dict]:
        n = conversation + AGENT_CONVERSATIONS * generation
        tag = f"[{n % self.distinct if self.distinct else n}] "
        return [{**m, "content": tag + m["content"]} if m["role"] in ("tool", "user") and m.get("content") else m
                for m in self.agent_full]

    def pick(self) -> str:
        return self.rng.choices(list(KINDS), weights=[w for w, _ in KINDS.values()])[0]

    def request(self, kind: str) -> tuple[bytes, dict[str, str]]:
        auth = {"authorization": f"Bearer {KEYS['main']}", "content-type": "application/json"}
        if kind == "chat":
            return self.small, auth
        if kind in ("stream", "disconnect"):
            return self.small_stream, auth
        if kind == "budget":
            return self.greedy, {**auth, "authorization": f"Bearer {KEYS['tiny']}"}
        if kind == "scored":
            self.scored_n += 1
            return self.rng.choice(self.scored), {**auth, "authorization": f"Bearer {KEYS['scored']}",
                                                  "x-sieve-conversation-id": f"soak-scored-{self.scored_n}",
                                                  "x-sieve-target-tokens": "3000"}
        c = self.rng.randrange(AGENT_CONVERSATIONS)
        generation, step = self.convs[c]
        if step + 1 >= AGENT_STEPS[1]:
            self.convs[c] = [generation + 1, AGENT_STEPS[0]]
            self.histories[c] = self.history(c, generation + 1)
        else:
            self.convs[c] = [generation, step + 1]
        body = {"model": MODEL, "max_tokens": 256, "stream": self.rng.random() < 0.5,
                "messages": self.histories[c][:self.agent_bodies[step]]}
        return orjson.dumps(body), {**auth, "x-sieve-conversation-id": f"soak-{c}-{generation}",
                                    "x-sieve-target-tokens": "6000"}


# -- load --------------------------------------------------------------------------------------
@dataclass
class Result:
    at: float           # seconds since the start, when it ended
    kind: str
    outcome: str        # ok | rejected_429 | disconnected | error:<what>
    latency_s: float    # from the due time to the last byte
    pruned: bool = False


@dataclass
class Run:
    results: list[Result] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)  # t, rss_mib, fds, redis_keys
    error_samples: list[str] = field(default_factory=list)
    skipped: int = 0    # not sent: too many in flight (the gateway fell behind)
    max_lag_s: float = 0.0


async def one(session: aiohttp.ClientSession, url: str, kind: str, body: bytes, headers: dict[str, str],
              due: float, t0: float, run: Run) -> None:
    loop = asyncio.get_running_loop()
    outcome, pruned, detail = "ok", False, ""
    try:
        async with session.post(url, data=body, headers=headers) as r:
            if kind == "disconnect" and r.status == 200:
                await r.content.readany()
                r.close()  # walk away mid-stream: the connection is dropped, not returned to the pool
                outcome = "disconnected"
            else:
                data = await r.read()
                pruned = int(r.headers.get("x-sieve-saved-tokens", "0") or 0) > 0
                if r.status == 429 and kind == "budget" and b'"budget_exceeded"' in data:
                    outcome = "rejected_429"
                elif r.status != 200:
                    outcome, detail = f"error:{r.status}", data[:300].decode(errors="replace")
                elif r.headers.get("content-type", "").startswith("text/event-stream") \
                        and not data.rstrip().endswith(b"data: [DONE]"):
                    outcome, detail = "error:truncated", data[-300:].decode(errors="replace")
    except asyncio.TimeoutError:
        outcome = "error:timeout"
    except aiohttp.ClientError as exc:
        outcome, detail = f"error:{type(exc).__name__}", str(exc)[:300]
    end = loop.time()
    run.results.append(Result(end - t0, kind, outcome, end - due, pruned))
    if outcome.startswith("error") and len(run.error_samples) < 20:
        run.error_samples.append(f"{kind} {outcome} {detail}")


async def generate(a: argparse.Namespace, url: str, workload: Workload, run: Run, t0: float) -> None:
    loop = asyncio.get_running_loop()
    in_flight: set[asyncio.Task] = set()
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        for i in range(int(a.duration * a.rate)):
            due = t0 + i / a.rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            run.max_lag_s = max(run.max_lag_s, loop.time() - due)
            if len(in_flight) >= a.max_in_flight:
                run.skipped += 1
                continue
            kind = workload.pick()
            body, headers = workload.request(kind)
            task = loop.create_task(one(session, url, kind, body, headers, due, t0, run))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight, timeout=150)


async def sample(pid: int, redis_url: str, run: Run, t0: float, every_s: float) -> None:
    import redis.asyncio as aioredis  # noqa: PLC0415

    client = aioredis.Redis.from_url(redis_url)
    loop = asyncio.get_running_loop()
    cpu, at = cpu_seconds(pid), loop.time()
    try:
        while True:
            await asyncio.sleep(every_s)
            cpu_now, now = cpu_seconds(pid), loop.time()
            run.samples.append({"t": round(now - t0, 1), "rss_mib": round(rss_mb(pid), 1), "fds": open_fds(pid),
                                "cpu_pct": round((cpu_now - cpu) / (now - at) * 100, 1),
                                "redis_keys": await client.dbsize()})
            cpu, at = cpu_now, now
    finally:
        await client.aclose()


def summary(results: list[Result]) -> dict:
    by = {}
    for r in results:
        by[r.outcome] = by.get(r.outcome, 0) + 1
    answered = [r.latency_s for r in results if r.outcome in ("ok", "rejected_429")]

    def ms(q: float) -> float | None:
        return round(pct(answered, q) * 1e3, 1) if answered else None

    return {"n": len(results), "outcomes": by, "errors": sum(v for k, v in by.items() if k.startswith("error")),
            "pruned": sum(r.pruned for r in results), "p50_ms": ms(0.50), "p95_ms": ms(0.95), "p99_ms": ms(0.99)}


def fmt(x: float | None, width: int) -> str:
    return f"{x:{width}.1f}" if x is not None else "-".rjust(width)


async def report(run: Run, t0: float, every_s: float, rate: float) -> None:
    loop = asyncio.get_running_loop()
    print(f"{'t s':>6} {'done':>6} {'req/s':>6} {'ok':>5} {'429':>4} {'disc':>4} {'err':>4} "
          f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'rss MiB':>8} {'fds':>4} {'cpu %':>5}", flush=True)
    seen = 0
    while True:
        await asyncio.sleep(every_s)
        now = loop.time() - t0
        window, seen = run.results[seen:], len(run.results)
        s = summary(window)
        o = s["outcomes"]
        last = run.samples[-1] if run.samples else {"rss_mib": 0, "fds": 0, "cpu_pct": 0}
        print(f"{now:6.0f} {len(run.results):6d} {len(window) / every_s:6.1f} {o.get('ok', 0):5d} "
              f"{o.get('rejected_429', 0):4d} {o.get('disconnected', 0):4d} {s['errors']:4d} "
              f"{fmt(s['p50_ms'], 7)} {fmt(s['p95_ms'], 7)} {fmt(s['p99_ms'], 7)} {last['rss_mib']:8.1f} "
              f"{last['fds']:4d} {last['cpu_pct']:5.0f}", flush=True)


# -- checks at the end -------------------------------------------------------------------------
async def redis_leftovers(redis_url: str) -> dict:
    """Reservations still held, read raw (the store's own status script would sweep expired ones)."""
    import redis.asyncio as aioredis  # noqa: PLC0415

    client = aioredis.Redis.from_url(redis_url)
    try:
        reserved, holds = 0, 0
        async for key in client.scan_iter(match="sieve:{org:*}:*", count=1000):
            name = key.decode()
            if ":budget:" in name:
                reserved += int(await client.hget(key, "reserved") or 0)
            elif ":resv:" in name:
                holds += 1
        return {"reserved_tokens": reserved, "reservation_keys": holds}
    finally:
        await client.aclose()


async def wait_for_no_leftovers(redis_url: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        left = await redis_leftovers(redis_url)
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.5)


async def gateway_counters(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    wanted = {"sieve_requests": "outcome", "sieve_scorer_failures": "reason",
              "sieve_budget_rejections": "org", "sieve_fail_open": "reason"}
    out: dict[str, dict[str, float]] = {name: {} for name in wanted}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    for family in text_string_to_metric_families(text):
        if family.name in wanted:
            for smp in family.samples:
                if smp.name.endswith("_total"):
                    label = smp.labels.get(wanted[family.name], "")
                    out[family.name][label] = out[family.name].get(label, 0) + smp.value
    return out


async def settled_counters(port: int, expected: int, timeout_s: float) -> dict:
    """The gateway's counters once every request is counted (accounting runs after the response)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counters = await gateway_counters(port)
        if sum(counters["sieve_requests"].values()) >= expected or time.monotonic() > deadline:
            return counters
        await asyncio.sleep(0.5)


def growth(samples: list[dict], key: str, window_s: float = 60.0) -> dict:
    """First minute, the minute around a quarter of the run, and the last minute (medians).

    The leak check reads ``steady_delta``, the growth after the first quarter: bounded
    caches (token counts, scorer features, conversation state) fill during warm-up, and a
    leak keeps growing after it."""
    end = samples[-1]["t"] if samples else 0
    first = [s[key] for s in samples if s["t"] <= window_s]
    quarter = [s[key] for s in samples if abs(s["t"] - end / 4) <= window_s / 2]
    last = [s[key] for s in samples if s["t"] >= end - window_s]
    if not first or not last:
        return {"first": None, "steady": None, "last": None, "delta": None, "steady_delta": None}
    f, la = statistics.median(first), statistics.median(last)
    q = statistics.median(quarter) if quarter else f
    return {"first": f, "steady": q, "last": la, "delta": round(la - f, 1), "steady_delta": round(la - q, 1),
            "pct": round((la - f) / f * 100, 1) if f else None}


def print_final(res: dict) -> None:
    print("\nkind          n      ok   429  disc  err  pruned  p50 ms  p95 ms  p99 ms")
    for kind, s in [*res["by_kind"].items(), ("all", res["all"])]:
        o = s["outcomes"]
        print(f"{kind:<10} {s['n']:6d} {o.get('ok', 0):7d} {o.get('rejected_429', 0):5d} "
              f"{o.get('disconnected', 0):5d} {s['errors']:4d} {s['pruned']:7d} {fmt(s['p50_ms'], 7)} "
              f"{fmt(s['p95_ms'], 7)} {fmt(s['p99_ms'], 7)}")
    rss, fds = res["growth"]["rss_mib"], res["growth"]["fds"]
    print(f"\nrate {res['config']['rate']}/s for {res['config']['duration']:.0f} s; not sent (too many in "
          f"flight): {res['skipped']}; worst generator lag {res['max_lag_ms']:.0f} ms")
    cpu = [x["cpu_pct"] for x in res["samples"]]
    print(f"gateway RSS MiB: first-minute median {rss['first']}, at a quarter of the run {rss['steady']}, "
          f"last-minute {rss['last']} (growth after warm-up {rss['steady_delta']}); "
          f"fds: {fds['first']} -> {fds['last']}; CPU {statistics.mean(cpu) if cpu else 0:.0f} % of a core")
    print(f"Redis after the load: {res['leftovers_after_load']}; after shutdown: "
          f"{res['leftovers_after_shutdown']}")
    print(f"gateway counters: {json.dumps(res['gateway_counters'])}")
    print(f"SIGTERM: exit status {res['shutdown']['status']} in {res['shutdown']['seconds']} s; "
          f"gateway log error lines: {res['gateway_log_errors']}; audit lines: {res['audit_lines']}")
    for line in res["error_samples"][:5]:
        print(f"! {line}", file=sys.stderr)
    print("\n" + ("PASS" if not res["failed"] else "FAIL: " + "; ".join(res["failed"])))


def checks(res: dict, a: argparse.Namespace) -> list[str]:
    failed = []
    if res["all"]["errors"]:
        failed.append(f"{res['all']['errors']} unexpected errors")
    if res["skipped"]:
        failed.append(f"{res['skipped']} requests not sent (the gateway fell behind)")
    for when in ("leftovers_after_load", "leftovers_after_shutdown"):
        if any(res[when].values()):
            failed.append(f"reservations left in Redis ({when}): {res[when]}")
    rss, fds = res["growth"]["rss_mib"], res["growth"]["fds"]
    if rss["steady_delta"] is not None and rss["steady_delta"] > max(a.rss_slack_mib, rss["steady"] * 0.10):
        failed.append(f"RSS grew {rss['steady_delta']} MiB after warm-up")
    if fds["delta"] is not None and fds["delta"] > max(20, fds["first"] * 0.2):
        failed.append(f"open fds grew by {fds['delta']}")
    if res["shutdown"]["status"] != 0:
        failed.append(f"SIGTERM ended the gateway with status {res['shutdown']['status']}")
    # Accounting exactly once: every request counted once by outcome, and every request
    # that got past the budget (answered, cut or failed) has one audit line. Only exact
    # when no request failed on the client side (a connection error may or may not have
    # reached the gateway).
    if not res["all"]["errors"]:
        counted = sum(res["gateway_counters"]["sieve_requests"].values())
        if counted != res["all"]["n"]:
            failed.append(f"sieve_requests_total counts {counted:.0f} requests, {res['all']['n']} were sent")
        admitted = res["all"]["n"] - res["all"]["outcomes"].get("rejected_429", 0)
        if res["audit_lines"] != admitted:
            failed.append(f"{res['audit_lines']} audit lines for {admitted} requests past the budget")
    if res["gateway_log_errors"]:
        failed.append(f"{res['gateway_log_errors']} error lines in the gateway log")
    return failed


# -- main --------------------------------------------------------------------------------------
async def soak(a: argparse.Namespace) -> dict:
    from tests.support.redis_server import RedisServer  # noqa: PLC0415

    up_port, scorer_port, gw_port = free_port(), free_port(), free_port()
    servers: list[Server] = []
    with RedisServer() as redis:
        try:
            fakes = Server("soak-fakes", [sys.executable, str(Path(__file__).resolve()), "--serve-fakes",
                                          str(up_port), str(scorer_port), "--latency-ms", str(a.latency_ms),
                                          "--chunks", str(a.chunks), "--chunk-delay-ms", str(a.chunk_delay_ms)],
                           up_port, "/v1/models")
            servers.append(fakes)
            await fakes.wait_ready(30)
            env = gateway_env({**write_config(scorer_port), "SIEVE_REDIS_URL": redis.url,
                               "SIEVE_UPSTREAM_BASE_URL": f"http://127.0.0.1:{up_port}/v1"})
            gw = Server("soak-sieve", [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1",
                                       "--port", str(gw_port)], gw_port, "/readyz", env=env)
            servers.append(gw)
            await gw.wait_ready(60)
            print(f"# soak: {a.rate} req/s for {a.duration:.0f} s against sieve pid {gw.pid} on :{gw_port}; "
                  f"logs in {gw.log_path.parent}", file=sys.stderr)
            run, loop = Run(), asyncio.get_running_loop()
            t0 = loop.time()
            background = [loop.create_task(sample(gw.pid, redis.url, run, t0, a.sample_every)),
                          loop.create_task(report(run, t0, a.report_every, a.rate))]
            await generate(a, f"http://127.0.0.1:{gw_port}/v1/chat/completions",
                           Workload(a.seed, a.histories), run, t0)
            for task in background:
                task.cancel()
            after_load = await wait_for_no_leftovers(redis.url, timeout_s=15)
            counters = await settled_counters(gw_port, len(run.results), timeout_s=15)
            signalled = time.monotonic()
            gw.proc.send_signal(signal.SIGTERM)
            try:
                status = gw.proc.wait(60)
            except Exception:  # noqa: BLE001 - reported as a failed check, then killed by stop()
                status = None
            shutdown = {"status": status, "seconds": round(time.monotonic() - signalled, 2)}
            after_shutdown = await redis_leftovers(redis.url)
        finally:
            for srv in reversed(servers):
                srv.stop()
    log = gw.log_path.read_text(errors="replace")
    audit_path = Path(env["SIEVE_AUDIT_LOG"] or "")
    with audit_path.open("rb") as f:
        audit_lines = sum(1 for _ in f)
    kinds = sorted({r.kind for r in run.results}, key=list(KINDS).index)
    res = {
        "config": {k: v for k, v in vars(a).items() if k != "json_out"},
        "mix": {k: {"weight": w, "what": what} for k, (w, what) in KINDS.items()},
        "all": summary(run.results), "by_kind": {k: summary([r for r in run.results if r.kind == k]) for k in kinds},
        "skipped": run.skipped, "max_lag_ms": run.max_lag_s * 1e3,
        "growth": {"rss_mib": growth(run.samples, "rss_mib"), "fds": growth(run.samples, "fds")},
        "samples": run.samples, "leftovers_after_load": after_load, "leftovers_after_shutdown": after_shutdown,
        "gateway_counters": counters, "shutdown": shutdown, "audit_lines": audit_lines,
        "gateway_log_errors": sum(1 for line in log.splitlines() if " ERROR " in line or "Traceback" in line
                                  or line.startswith("ERROR:")),
        "error_samples": run.error_samples,
    }
    res["failed"] = checks(res, a)
    return res


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=1200.0, help="seconds of load (default 20 minutes)")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second, steady (open loop)")
    p.add_argument("--report-every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--sample-every", type=float, default=2.0, help="seconds between RSS/fd samples")
    p.add_argument("--max-in-flight", type=int, default=1000, help="beyond this, due requests are skipped")
    p.add_argument("--rss-slack-mib", type=float, default=10.0, help="RSS growth tolerated (or 10 %%)")
    p.add_argument("--latency-ms", type=float, default=50.0, help="fake upstream: delay before answering")
    p.add_argument("--chunks", type=int, default=16, help="fake upstream: content pieces per stream")
    p.add_argument("--chunk-delay-ms", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--histories", type=int, default=12,
                   help="distinct agent histories in rotation; 0 = fresh text for every conversation "
                        "(shows per-content caches filling, not leaks)")
    p.add_argument("--json-out", type=Path, help="default: bench/results/soak-<UTC time>.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-fakes"]:  # the fakes subprocess
        p = argparse.ArgumentParser()
        p.add_argument("--serve-fakes", nargs=2, type=int)
        p.add_argument("--latency-ms", type=float)
        p.add_argument("--chunks", type=int)
        p.add_argument("--chunk-delay-ms", type=float)
        f = p.parse_args(argv)
        serve_fakes(*f.serve_fakes, f.latency_ms, f.chunks, f.chunk_delay_ms)
        return 0
    a = parse_args(argv)
    res = asyncio.run(soak(a))
    print_final(res)
    out = a.json_out or RESULTS / f"soak-{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    print(f"# wrote {out}", file=sys.stderr)
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
