"""Gateway overhead: Sieve vs. LiteLLM's proxy vs. the upstream itself, on loopback.

Starts the fake upstream (``python -m tests.support.fake_upstream``; ``tests.support.scripted_provider`` for the
``messages`` and ``responses`` routes, see bench/overhead_routes.py), Sieve
(``python -m gateway.cli serve``) and LiteLLM's proxy (in its own virtualenv under
``bench/.cache``), then drives each with the same bounded aiohttp load generator::

    python bench/overhead.py --quick                 # smoke run, ~1-2 minutes
    python bench/overhead.py --repeats 3 --json-out bench/results/overhead.json
    python bench/overhead.py --memory                # RSS after 1k and 10k requests
    python bench/overhead.py --against 99e55f9 --targets direct,sieve-none,sieve-prune,base-none,base-prune
                                                     # this tree beside another revision (or tree path)
    python bench/overhead.py --route messages        # Anthropic Messages (/v1/messages), or --route responses
    python bench/overhead.py --targets direct,sieve-none,sieve-shadow --repeats 3
                                                     # shadow mode beside passthrough
    python bench/overhead.py --targets sieve-prune,sieve-expand --repeats 3
                                                     # the sieve_expand tool on, beside it off

Every figure is the median over ``--repeats`` runs; ratios compare targets of the
same run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from bench.overhead_routes import ROUTES, Route  # noqa: E402
from bench.shared import require, shared_data  # noqa: E402
from tests.support import free_port  # noqa: E402

CACHE = ROOT / "bench" / ".cache"
VENV = CACHE / "litellm-venv"
DATA = shared_data("dev-sessions-retail.jsonl.gz")
MODEL = "gpt-4o-mini"
KEY = "sk-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGETS = ("direct", "sieve-none", "sieve-prune", "litellm")
AGAINST_TARGETS = ("base-none", "base-prune")  # the same two, served by the --against tree
# Sieve under a shadow policy (this tree's policies/default.yaml plus ``mode: shadow``), sent the
# sieve-prune headers: forwarded as it came, the same decision made after each response.
SHADOW_TARGET = "sieve-shadow"
# Sieve with the sieve_expand tool on (policies/default.yaml, where it is on by default), sent the
# sieve-prune headers: the same decision, its markers decorated and the tool added; the fake
# upstream never calls the tool, so this is what the tool costs a request that does not use it.
EXPAND_TARGET = "sieve-expand"
# sieve-none and sieve-prune run the default policy with the tool off: pruning's own overhead,
# the tool's measured apart (sieve-expand against sieve-prune).
NO_EXPAND = "expand_tool: false"


# -- processes --------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    """pid and all its descendants (LiteLLM/uvicorn may fork workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def cpu_seconds(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLK_TCK


def rss_mb(pid: int) -> float:
    kb = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kb += int(line.split()[1])
    return kb / 1024


class Server:
    """A subprocess in its own session, stopped by its pid; logs to bench/.cache."""

    def __init__(self, name: str, argv: list[str], port: int, ready_path: str,
                 env: dict[str, str | None] | None = None, headers: dict | None = None,
                 cwd: Path = ROOT) -> None:
        self.name, self.port, self.ready_path, self.headers = name, port, ready_path, headers
        CACHE.mkdir(parents=True, exist_ok=True)
        self.log_path = CACHE / f"{name}.log"
        self._log = open(self.log_path, "wb")
        full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
        self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait_ready(self, timeout: float) -> None:
        url = f"http://127.0.0.1:{self.port}{self.ready_path}"
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with s.get(url, headers=self.headers,
                                     timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.25)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"{self.name} not ready on :{self.port}; log tail:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # our own session only
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def start_upstream(a: argparse.Namespace) -> Server:
    port = free_port()
    route: Route = ROUTES[a.route]
    return Server("fake-upstream", route.upstream_argv(port, a), port, route.ready_path)


def policies_with(extra: str) -> Path:
    """A policies folder whose default policy is this tree's plus ``extra``."""
    folder = Path(tempfile.mkdtemp(prefix="sieve-bench-policies-"))
    (folder / "default.yaml").write_text((ROOT / "policies" / "default.yaml").read_text() + f"\n{extra}\n")
    return folder


def start_sieve(a: argparse.Namespace, upstream_port: int, tree: Path = ROOT, name: str = "sieve",
                policies: Path | None = None) -> Server | None:
    """Sieve from ``tree`` (this one, or the --against tree, whose package goes first on
    the path so that the editable install of this one does not shadow it)."""
    if not a.sieve_cmd and not any((tree / "gateway" / cli).exists() for cli in ("cli.py", "cli/__main__.py")):
        print(f"# {tree}/gateway/cli missing: {name} targets skipped", file=sys.stderr)
        return None
    port = free_port()
    cmd = shlex.split(a.sieve_cmd) if a.sieve_cmd and tree == ROOT else \
        [sys.executable, "-m", "gateway.cli", "serve"]
    return Server(name, cmd + ["--host", "127.0.0.1", "--port", str(port)], port, "/readyz",
                  env={**ROUTES[a.route].sieve_env(upstream_port),
                       "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true",
                       "PYTHONPATH": str(tree)} | ({"SIEVE_POLICIES_DIR": str(policies)} if policies else {}),
                  cwd=tree)


@contextlib.contextmanager
def against_tree(against: str | None):
    """The tree to compare with: a path as it is, or a git revision checked out into a
    temporary worktree (removed afterwards); None without --against."""
    if not against:
        yield None
        return
    if Path(against).is_dir():
        yield Path(against).resolve()
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "against"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), against], cwd=ROOT, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


# The proxy's own requirements, as litellm's metadata lists them for its [proxy] extra, except
# the companion packages (litellm-proxy, litellm-proxy-extras, litellm-enterprise) pinned to the
# release: a package index that lacks them still serves the proxy (they add the database and
# enterprise features, unused here).
_PROXY_REQUIREMENTS = """import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for line in md.requires("litellm") or ():
    r = Requirement(line)
    if r.marker and r.marker.evaluate({"extra": "proxy"}) and not r.name.startswith("litellm-"):
        print(f"{r.name}{r.specifier}")"""


def litellm_version() -> str:
    """The litellm release Sieve itself is pinned to (.ci/constraints.txt): both sides run the same."""
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        if line.startswith("litellm=="):
            return line.split("==", 1)[1].strip()
    raise RuntimeError("litellm is not pinned in .ci/constraints.txt")


def ensure_litellm_venv() -> Path:
    exe = VENV / "bin" / "litellm"
    if not exe.exists():
        version = litellm_version()
        print(f"# creating {VENV} and installing litellm {version} with its proxy (first run only)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip, python = str(VENV / "bin" / "pip"), str(VENV / "bin" / "python")
        if subprocess.run([pip, "install", "-q", f"litellm[proxy]=={version}"]).returncode != 0:
            subprocess.run([pip, "install", "-q", f"litellm=={version}"], check=True)
            wanted = subprocess.run([python, "-c", _PROXY_REQUIREMENTS], check=True, capture_output=True,
                                    text=True).stdout.split()
            subprocess.run([pip, "install", "-q", *wanted], check=True)
    return exe


def start_litellm(upstream_port: int, route: Route) -> Server:
    exe = ensure_litellm_venv()
    port = free_port()
    cfg = CACHE / "litellm-config.yaml"
    cfg.write_text(json.dumps({  # JSON is YAML
        "model_list": [route.litellm_model(MODEL, upstream_port)],
        "general_settings": {"master_key": KEY},
        "litellm_settings": {"telemetry": False},
    }, indent=1))
    return Server("litellm", [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port",
                              str(port), "--num_workers", "1"], port, "/health/liveliness",
                  env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true",
                       "DATABASE_URL": None, "LITELLM_LOG": "ERROR"},
                  headers={"Authorization": f"Bearer {KEY}"})


# -- workload ---------------------------------------------------------------
def approx_tokens(m: dict) -> int:
    text = (m.get("content") or "") + "".join(
        tc["function"]["name"] + tc["function"]["arguments"] for tc in m.get("tool_calls") or [])
    return len(text) // 4 + 4


def agent_request(target_tokens: int) -> tuple[dict, int]:
    """The longest step request of the largest session that stays under target_tokens
    (approx. chars/4): a real tool-calling history ending on a user or tool message."""
    with gzip.open(require(DATA, "the retail dev sessions (the agent payload)", "--payload small"), "rt") as f:
        session = max((json.loads(line) for line in f), key=lambda s: s["meta"]["tokens"])
    msgs = session["messages"]
    best, total, running = 1, 0, 0
    for k, m in enumerate(msgs):
        if m["role"] == "assistant" and running <= target_tokens:
            best, total = k, running
        running += approx_tokens(m)
    return {"model": MODEL, "tools": session["tools"], "messages": msgs[:best]}, total


def small_request() -> dict:
    return {"model": MODEL, "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "Say ok."}]}


@dataclass
class Cell:
    target: str
    stream: bool
    concurrency: int
    n: int = 0
    errors: int = 0
    wall_s: float = 0.0
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    ttfb_p50_ms: float | None = None
    cpu_ms_per_req: float = 0.0
    forwarded_tokens: str | None = None  # x-sieve-forwarded-tokens of the last reply
    first_error: str | None = None
    lat: list[float] = field(default_factory=list, repr=False)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def one(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict,
              stream: bool, cell: Cell, ttfb: list[float], end_marker: bytes = b"[DONE]") -> None:
    t0 = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as r:
            if stream:
                first, tail, ended = None, b"", False
                async for piece in r.content.iter_any():
                    if first is None:
                        first = time.perf_counter()
                    ended = ended or end_marker in tail + piece  # the last event may be long (Responses)
                    tail = (tail + piece)[-64:]
                ok = r.status == 200 and ended
            else:
                payload = await r.read()
                ok = r.status == 200
            if ok:
                cell.lat.append(time.perf_counter() - t0)
                if stream and first is not None:
                    ttfb.append(first - t0)
                cell.forwarded_tokens = r.headers.get("x-sieve-forwarded-tokens")
                return
            cell.first_error = cell.first_error or f"{r.status} {(tail if stream else payload)[:200]!r}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        cell.first_error = cell.first_error or repr(e)
    cell.errors += 1


async def drive(url: str, body: dict, headers: dict, stream: bool, concurrency: int,
                requests: int, duration: float, pid: int, target: str,
                warmup: bool = True, route: Route = ROUTES["chat"]) -> Cell:
    """Closed loop: `concurrency` workers until `requests` done or `duration` elapsed."""
    if stream:
        body = route.streamed(body)
    raw = orjson.dumps(body)
    hdrs = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **headers}
    cell, ttfb = Cell(target, stream, concurrency), []
    conn = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        for _ in range(min(concurrency, 4) if warmup else 0):  # warm connections (and Sieve's conversation)
            await one(s, url, raw, hdrs, stream, Cell(target, stream, 1), [], route.end_marker)
        issued = 0
        deadline = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal issued
            while issued < requests and time.perf_counter() < deadline:
                issued += 1
                await one(s, url, raw, hdrs, stream, cell, ttfb, route.end_marker)

        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cell.wall_s, cpu1 = time.perf_counter() - t0, cpu_seconds(pid)
    cell.n = len(cell.lat)
    cell.rps = cell.n / cell.wall_s if cell.wall_s else 0.0
    cell.p50_ms, cell.p99_ms = pct(cell.lat, 0.5) * 1e3, pct(cell.lat, 0.99) * 1e3
    cell.ttfb_p50_ms = pct(ttfb, 0.5) * 1e3 if stream else None
    cell.cpu_ms_per_req = (cpu1 - cpu0) * 1e3 / max(1, cell.n + cell.errors)
    return cell


# -- report -----------------------------------------------------------------
def med(cells: list[Cell], attr: str) -> float | None:
    xs = [getattr(c, attr) for c in cells if getattr(c, attr) is not None and c.n]
    return statistics.median(xs) if xs else None


def summarize(runs: dict[tuple, list[Cell]]) -> list[dict]:
    rows = []
    for (target, stream, conc), cells in runs.items():
        row = {"target": target, "stream": stream, "concurrency": conc,
               "runs": len(cells), "n": sum(c.n for c in cells),
               "errors": sum(c.errors for c in cells),
               "first_error": next((c.first_error for c in cells if c.first_error), None),
               "forwarded_tokens": cells[-1].forwarded_tokens}
        for attr in ("rps", "p50_ms", "p99_ms", "ttfb_p50_ms", "cpu_ms_per_req"):
            row[attr] = med(cells, attr)
        rows.append(row)
    by = {(r["target"], r["stream"], r["concurrency"]): r for r in rows}
    for r in rows:
        d = by.get(("direct", r["stream"], r["concurrency"]))
        for attr, out in (("p50_ms", "added_p50_ms"), ("ttfb_p50_ms", "added_ttfb_ms")):
            r[out] = (r[attr] - d[attr]) if d and None not in (r[attr], d[attr]) else None
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """Sieve targets over LiteLLM, same mode and concurrency (< 1 means Sieve is cheaper)."""
    by = {(r["target"], r["stream"], r["concurrency"]): r for r in rows}
    out = []
    for r in rows:
        lit = by.get(("litellm", r["stream"], r["concurrency"]))
        if not r["target"].startswith("sieve") or not lit:
            continue
        q = {"target": r["target"], "stream": r["stream"], "concurrency": r["concurrency"]}
        for attr in ("rps", "added_p50_ms", "cpu_ms_per_req", "added_ttfb_ms"):
            a, b = r.get(attr), lit.get(attr)
            q[attr] = a / b if a is not None and b not in (None, 0) else None
        out.append(q)
    return out


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict], rat: list[dict]) -> None:
    cols = ("target", "mode", "conc", "req/s", "p50 ms", "p99 ms", "+p50 ms", "ttfb ms",
            "+ttfb ms", "cpu ms/req", "fwd tok", "err")
    lines = [cols]
    for r in rows:
        lines.append((r["target"], "stream" if r["stream"] else "json", str(r["concurrency"]),
                      fmt(r["rps"]), fmt(r["p50_ms"]), fmt(r["p99_ms"]), fmt(r["added_p50_ms"]),
                      fmt(r["ttfb_p50_ms"]), fmt(r["added_ttfb_ms"]), fmt(r["cpu_ms_per_req"], ".2f"),
                      r["forwarded_tokens"] or "-", str(r["errors"])))
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    for line in lines:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths)))
    if rat:
        print("\nSieve / LiteLLM (same run; <1 = Sieve cheaper or faster, except req/s)")
        for q in rat:
            print(f"  {q['target']:<12} {'stream' if q['stream'] else 'json':<6} "
                  f"c={q['concurrency']:<3} req/s x{fmt(q['rps'], '.2f')}  "
                  f"+p50 x{fmt(q['added_p50_ms'], '.2f')}  cpu/req x{fmt(q['cpu_ms_per_req'], '.2f')}"
                  f"  +ttfb x{fmt(q['added_ttfb_ms'], '.2f')}")
    for r in rows:
        if r["first_error"]:
            print(f"! {r['target']} {'stream' if r['stream'] else 'json'} c={r['concurrency']}: "
                  f"{r['first_error']}", file=sys.stderr)


def print_against(rows: list[dict], against: str | None) -> None:
    """This tree's Sieve against the --against tree's, same mode and concurrency."""
    by = {(r["target"], r["stream"], r["concurrency"]): r for r in rows}
    lines = []
    for r in rows:
        if not r["target"].startswith("sieve-"):
            continue
        base = by.get(("base-" + r["target"][len("sieve-"):], r["stream"], r["concurrency"]))
        if base is None or None in (r["added_p50_ms"], base["added_p50_ms"]) or not base["rps"]:
            continue
        lines.append(f"  {r['target']:<12} {'stream' if r['stream'] else 'json':<6} c={r['concurrency']:<3} "
                     f"+p50 {r['added_p50_ms']:.2f} vs {base['added_p50_ms']:.2f} ms "
                     f"(diff {r['added_p50_ms'] - base['added_p50_ms']:+.2f} ms)  "
                     f"req/s x{r['rps'] / base['rps']:.3f}")
    if lines:
        print(f"\nthis tree / {against} (same run; +p50 = added latency over direct)")
        print("\n".join(lines))


# -- modes ------------------------------------------------------------------
async def run_overhead(a: argparse.Namespace, servers: dict[str, Server]) -> dict:
    route = ROUTES[a.route]
    chat_body, approx = (small_request(), 0) if a.payload == "small" else agent_request(a.agent_tokens)
    body = route.payload(chat_body)
    print(f"# route {route.path}; payload: {a.payload} ({len(chat_body['messages'])} chat messages, ~{approx} tokens, "
          f"{len(orjson.dumps(body)) // 1024} KiB); upstream latency {a.latency_ms} ms, "
          f"{a.chunks} chunks x {a.chunk_delay_ms} ms", file=sys.stderr)
    up = servers["upstream"]
    plan = {
        "direct": (up, {}),
        "sieve-none": (servers.get("sieve"), {"x-sieve-strategy": "none"}),
        "sieve-prune": (servers.get("sieve"), {"x-sieve-conversation-id": "bench-overhead-1",
                                               "x-sieve-target-tokens": str(a.prune_target)}
                        | ({"x-sieve-strategy": a.prune_strategy} if a.prune_strategy else {})),
        "litellm": (servers.get("litellm"), {}),
    }
    plan[SHADOW_TARGET] = (servers.get("shadow"), plan["sieve-prune"][1])
    plan[EXPAND_TARGET] = (servers.get("expand"), plan["sieve-prune"][1])
    plan["base-none"] = (servers.get("base"), plan["sieve-none"][1])
    plan["base-prune"] = (servers.get("base"), plan["sieve-prune"][1])
    runs: dict[tuple, list[Cell]] = {}
    for rep in range(a.repeats):
        for stream in a.modes:
            for conc in a.concurrency:
                for target in a.targets:  # interleaved, so drift hits every target alike
                    srv, headers = plan[target]
                    if srv is None:
                        continue
                    url = f"http://127.0.0.1:{srv.port}{route.path}"
                    cell = await drive(url, body, headers, stream, conc, a.requests, a.duration,
                                       srv.pid, target, route=route)
                    runs.setdefault((target, stream, conc), []).append(cell)
                    print(f"# rep {rep + 1} {target:<11} {'stream' if stream else 'json':<6} "
                          f"c={conc:<3} n={cell.n:<5} err={cell.errors} p50={cell.p50_ms:.1f}ms "
                          f"rps={cell.rps:.1f}", file=sys.stderr)
    rows = summarize(runs)
    rat = ratios(rows)
    print_table(rows, rat)
    print_against(rows, a.against)
    return {"config": {k: v for k, v in vars(a).items() if k != "json_out"}, "rows": rows,
            "ratios": rat, "runs": {f"{t}|{s}|{c}": [asdict(x) | {"lat": None} for x in v]
                                    for (t, s, c), v in runs.items()}}


async def run_memory(a: argparse.Namespace, servers: dict[str, Server]) -> dict:
    sieve = servers.get("sieve")
    if sieve is None:
        raise SystemExit("--memory needs Sieve (gateway/cli/main.py)")
    body, _ = agent_request(a.agent_tokens)
    url = f"http://127.0.0.1:{sieve.port}/v1/chat/completions"
    # a mix: passthrough, and pruning over a small pool of conversations (bounded state)
    mixes = [({"x-sieve-strategy": "none"}, False), ({"x-sieve-strategy": "none"}, True)] + [
        ({"x-sieve-conversation-id": f"bench-mem-{i}", "x-sieve-target-tokens":
          str(a.prune_target)}, i % 2 == 0) for i in range(8)]
    marks, done, result = (1_000, 10_000), 0, {"rss_mb": {}, "errors": 0}
    result["rss_mb"]["start"] = rss_mb(sieve.pid)
    for mark in marks:
        while done < mark:
            batch = min(500, mark - done)
            per = max(1, batch // len(mixes))
            for headers, stream in mixes:
                c = await drive(url, body, headers, stream, a.memory_concurrency, per, 600,
                                sieve.pid, "sieve", warmup=False)
                done += c.n + c.errors
                result["errors"] += c.errors
                if c.errors:
                    print(f"! errors: {c.errors} {c.first_error}", file=sys.stderr)
        result["rss_mb"][str(mark)] = rss_mb(sieve.pid)
        print(f"# after {done} requests: RSS {result['rss_mb'][str(mark)]:.1f} MiB", file=sys.stderr)
    r1, r10 = result["rss_mb"]["1000"], result["rss_mb"]["10000"]
    result["growth_pct"] = (r10 - r1) / r1 * 100
    print(f"Sieve RSS: start {result['rss_mb']['start']:.1f} MiB, after 1k {r1:.1f} MiB, "
          f"after 10k {r10:.1f} MiB, growth 1k->10k {result['growth_pct']:+.1f} % "
          f"{result['errors']} errors "
          f"({'OK' if abs(result['growth_pct']) <= 10 else 'OVER'} the 10 % goal)")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short smoke run")
    p.add_argument("--memory", action="store_true", help="Sieve RSS after 1k and 10k requests")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="comma list of " + ",".join((*TARGETS, SHADOW_TARGET)))
    p.add_argument("--modes", default="json,stream")
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--requests", type=int, default=400, help="per cell, bound 1")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per cell, bound 2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--route", choices=tuple(ROUTES), default="chat",
                   help="the route loaded: chat (/v1/chat/completions), messages (/v1/messages), "
                        "responses (/v1/responses); the same history in each format")
    p.add_argument("--payload", choices=("agent", "small"), default="agent")
    p.add_argument("--agent-tokens", type=int, default=20_000)
    p.add_argument("--prune-target", type=int, default=8_000)
    p.add_argument("--prune-strategy", default="", help="x-sieve-strategy for sieve-prune")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-delay-ms", type=float, default=2.0)
    p.add_argument("--memory-concurrency", type=int, default=16)
    p.add_argument("--sieve-cmd", default="", help="start Sieve with this command instead of "
                   "`python -m gateway.cli serve` (--host/--port are appended)")
    p.add_argument("--against", help="also run Sieve from this git revision or tree path (targets "
                   + ",".join(AGAINST_TARGETS) + ") and print this tree against it")
    p.add_argument("--json-out", type=Path)
    a = p.parse_args(argv)
    if a.payload == "agent":  # said now, not after the servers (and LiteLLM's virtualenv) are up
        require(DATA, "the retail dev sessions (the agent payload)", "--payload small")
    if a.memory and a.route != "chat":
        p.error("--memory loads the chat route only")
    if a.quick:
        a.requests, a.duration, a.repeats = min(a.requests, 60), min(a.duration, 3.0), 1
    a.targets = [t for t in a.targets.split(",") if t]
    a.modes = [m == "stream" for m in a.modes.split(",")]
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    return a


async def amain(a: argparse.Namespace, against: Path | None) -> dict:
    servers: dict[str, Server] = {}
    try:
        servers["upstream"] = start_upstream(a)
        await servers["upstream"].wait_ready(30)
        want_sieve = a.memory or any(t.startswith("sieve") and t not in (SHADOW_TARGET, EXPAND_TARGET)
                                     for t in a.targets)
        if want_sieve and (s := start_sieve(a, servers["upstream"].port, policies=policies_with(NO_EXPAND))):
            servers["sieve"] = s
        if not a.memory and SHADOW_TARGET in a.targets and \
                (s := start_sieve(a, servers["upstream"].port, name="shadow",
                                  policies=policies_with(f"mode: shadow\n{NO_EXPAND}"))):
            servers["shadow"] = s
        if not a.memory and EXPAND_TARGET in a.targets and (s := start_sieve(
                a, servers["upstream"].port, name="expand", policies=policies_with("expand_tool: true"))):
            servers["expand"] = s
        if against is not None and (s := start_sieve(a, servers["upstream"].port, against, "base")):
            servers["base"] = s
        if not a.memory and "litellm" in a.targets:
            servers["litellm"] = start_litellm(servers["upstream"].port, ROUTES[a.route])
        for name, srv in servers.items():
            try:
                await srv.wait_ready(180 if name == "litellm" else 60)
            except RuntimeError as e:
                if name == "upstream":
                    raise
                print(f"# {e}\n# {name} skipped", file=sys.stderr)
                servers[name] = None  # type: ignore[assignment]
        servers = {k: v for k, v in servers.items() if v is not None}
        return await (run_memory(a, servers) if a.memory else run_overhead(a, servers))
    finally:
        for srv in servers.values():
            if srv is not None:
                srv.stop()


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    with against_tree(a.against) as against:
        result = asyncio.run(amain(a, against))
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        print(f"# wrote {a.json_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
