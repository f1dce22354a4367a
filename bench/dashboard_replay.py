"""What the Grafana dashboard would show after replaying the dev sessions through a gateway.

Starts the fake upstream with its prompt-cache simulation (``tests.support.fake_upstream.PromptCache``)
and a gateway (in-process ``tests.support.gateway_server.GatewayServer``, or ``--cli`` for
``python -m gateway.cli serve`` with a generated config), replays
``shared/data/dev-sessions-retail.jsonl.gz`` (``--data``) step by step through
``POST /v1/chat/completions``, scrapes ``/metrics`` once and evaluates every panel
query of ``helm/sieve/dashboards/sieve-overview.json`` against that scrape::

    python bench/dashboard_replay.py --limit 10              # ~1 minute
    python bench/dashboard_replay.py --prompt-cache anthropic --model claude-haiku-4-5
    python bench/dashboard_replay.py --cli --json-out bench/results/dashboard.json

With ``--cohorts`` the "Does it work?" row gets all three cohorts: org
``retail-east`` runs a policy with ``control_share: 0.5`` (pruned and control
conversations), ``retail-west`` a shadow policy (``mode: shadow``: forwarded as
sent, its decisions measured), both otherwise the default policy::

    python bench/dashboard_replay.py --limit 20 --cohorts

The replay: each session is one conversation (``x-sieve-conversation-id`` = session id,
``x-sieve-target-tokens`` = ``--target-tokens``), its ``model`` (or ``--model``) and
``tools``; step ``k`` sends ``messages[:k]`` and the fake provider answers with the
message that really came next (``messages[k]``, text or tool calls), so completion
tokens are realistic. Every ``--stream-every``-th step streams. Sessions alternate
between two orgs (virtual keys ``retail-east`` / ``retail-west``, each with a day
budget that is not reached); ``--trial-sessions`` more sessions run as org
``trial`` with a 30,000-token day budget, so the budget panels show remaining
tokens and rejections. The provider counts tokens with the gateway's own counter
(per message) plus tool schemas at chars/4, and caches as ``PromptCache`` says
(OpenAI: 1,024-token minimum, 128-token blocks; Anthropic: token-exact reads,
writes up to a breakpoint on the last message).

One scrape, no Prometheus: a panel's PromQL is evaluated by a small evaluator
over that one scrape. ``rate(x[...])`` and ``increase(x[...])`` become ``x``, the
counter's total since the gateway started (the replay is the whole life of the
gateway, so that is the increase over the replay), and a scalar factor applied to
rates (``3600 *``, ``60 *``: per hour, per minute) is dropped, so a "per hour"
panel shows the total over the replay. Ratios and quantiles of rates equal those
of the totals. The ``$org``/``$model`` variables are "All" (``.*``). The
"evaluated as" column prints each rewritten query.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config.settings import Settings, prepare_offline_environment  # noqa: E402

prepare_offline_environment()

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from gateway.pruning.tokens import TokenCounters  # noqa: E402
from tests.support.fake_upstream import CACHE_SHAPES, FakeUpstream, PromptCache, Reply  # noqa: E402
from tests.support.gateway_server import GatewayServer  # noqa: E402
from tests.support import free_port  # noqa: E402
from bench.shared import require, shared_data  # noqa: E402

DATA = shared_data("dev-sessions-retail.jsonl.gz")
DASHBOARD = ROOT / "helm" / "sieve" / "dashboards" / "sieve-overview.json"
UPSTREAM_KEY = "sk-bench-upstream"
ORGS = {"retail-east": "sk-bench-retail-east", "retail-west": "sk-bench-retail-west", "trial": "sk-bench-trial"}
BUDGETS = {"orgs": {"retail-east": {"day": 50_000_000}, "retail-west": {"day": 50_000_000},
                    "trial": {"day": 30_000}}}


# -- replay ------------------------------------------------------------------

def load_sessions(path: Path, limit: int | None) -> list[dict]:
    sessions = []
    with gzip.open(path, "rt") as f:
        for line in f:
            sessions.append(json.loads(line))
            if limit is not None and len(sessions) >= limit:
                break
    return sessions


def reply_for(message: dict, delay_s: float = 0.0) -> Reply:
    """The fake provider answers with what the agent really said next."""
    if message.get("tool_calls"):
        return Reply(content=message.get("content"), tool_calls=message["tool_calls"], delay_s=delay_s)
    return Reply(content=message.get("content") or "ok", delay_s=delay_s)


@dataclass
class ReplayStats:
    requests: int = 0
    streamed: int = 0
    by_status: dict[int, int] | None = None
    seconds: float = 0.0

    def count(self, status: int) -> None:
        self.by_status = self.by_status or {}
        self.by_status[status] = self.by_status.get(status, 0) + 1


def replay(base_url: str, upstream: FakeUpstream, sessions: list[tuple[str, dict]], *, model: str | None,
           target: int, stream_every: int, latency_s: float = 0.0) -> ReplayStats:
    stats = ReplayStats()
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, timeout=120) as http:
        for n, (org, session) in enumerate(sessions, 1):
            headers = {"authorization": f"Bearer {ORGS[org]}", "x-sieve-conversation-id": session["id"],
                       "x-sieve-target-tokens": str(target)}
            for step in session["steps"]:
                k = step["k"]
                body = {"model": model or session["model"], "tools": session["tools"],
                        "messages": session["messages"][:k]}
                stream = stream_every > 0 and stats.requests % stream_every == stream_every - 1
                if stream:
                    body["stream"] = True
                # Sequential replay: the next answered request is this one (a rejected one never arrives).
                upstream.default = reply_for(session["messages"][k], latency_s)
                if stream:
                    with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                        for _ in r.iter_bytes():
                            pass
                    stats.streamed += 1
                else:
                    r = http.post("/v1/chat/completions", json=body, headers=headers)
                stats.requests += 1
                stats.count(r.status_code)
            print(f"  session {n}/{len(sessions)} {session['id']} ({org}): {len(session['steps'])} steps",
                  file=sys.stderr, flush=True)
    stats.seconds = time.perf_counter() - started
    return stats


# -- gateways ------------------------------------------------------------------

COHORT_POLICIES = {"east-control": "control_share: 0.5\n", "west-shadow": "mode: shadow\n"}
COHORT_ORGS = {"retail-east": "east-control", "retail-west": "west-shadow"}


def cohort_policies(workdir: Path) -> Path:
    """The policies of ``--cohorts``: a control group for one org, shadow mode for the other."""
    folder = workdir / "policies"
    folder.mkdir()
    for name, text in COHORT_POLICIES.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


def settings_for(upstream: FakeUpstream, policies: Path | None = None) -> Settings:
    extra: dict[str, Any] = {"policies_dir": policies, "org_policies": COHORT_ORGS} if policies else {}
    return Settings(upstream_base_url=upstream.base_url, upstream_api_key=UPSTREAM_KEY, budgets=BUDGETS,
                    virtual_keys=tuple({"key": key, "org": org} for org, key in ORGS.items()), **extra)


class CliGateway:
    """``python -m gateway.cli serve`` with a generated config file."""

    def __init__(self, upstream: FakeUpstream, workdir: Path) -> None:
        self.port = free_port()
        config = workdir / "sieve.yaml"
        config.write_text(yaml.safe_dump({
            "upstream": {"base_url": upstream.base_url, "api_key_env": "BENCH_UPSTREAM_KEY"},
            "keys": [{"key": key, "org": org} for org, key in ORGS.items()], "budgets": BUDGETS}))
        env = {**os.environ, "BENCH_UPSTREAM_KEY": UPSTREAM_KEY, "SIEVE_LOG_LEVEL": "warning"}
        self.log = open(workdir / "sieve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--config", str(config)],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sieve serve exited ({self.proc.returncode}); see {workdir / 'sieve.log'}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("sieve serve did not become ready in 60 s")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_idle(self) -> None:
        time.sleep(0.5)  # deferred accounting runs right after each response

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# -- one-scrape PromQL ---------------------------------------------------------

Labels = tuple[tuple[str, str], ...]
Vector = dict[Labels, float]
AGGREGATIONS = {"sum", "min", "max", "avg", "count"}
PER_TIME = {"rate", "irate", "increase"}
TOKEN = re.compile(r'\s*(?:(?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?)|(?P<str>"(?:[^"\\]|\\.)*")'
                   r'|(?P<range>\[[^\]]*\])|(?P<op>=~|!~|!=|[-+*/(){},=])|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*))')


@dataclass
class Node:
    kind: str  # num | sel | call | agg | bin | neg
    value: Any = None
    args: tuple = ()
    labels: tuple[str, ...] = ()
    without: bool = False


def tokenize(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read PromQL at {expr[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
    return out


class Parser:
    def __init__(self, expr: str) -> None:
        self.tokens = tokenize(expr)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, text: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (text is not None and tok[1] != text):
            raise ValueError(f"expected {text!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.additive()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()!r}")
        return node

    def additive(self) -> Node:
        node = self.multiplicative()
        while self.peek() and self.peek()[1] in "+-":
            node = Node("bin", self.take()[1], (node, self.multiplicative()))
        return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while self.peek() and self.peek()[1] in "*/":
            node = Node("bin", self.take()[1], (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek() and self.peek()[1] == "-":
            self.take()
            return Node("neg", args=(self.unary(),))
        return self.primary()

    def grouping(self) -> tuple[tuple[str, ...], bool] | None:
        tok = self.peek()
        if tok and tok[1] in ("by", "without"):
            self.take()
            self.take("(")
            labels = []
            while self.peek()[1] != ")":
                labels.append(self.take()[1])
                if self.peek()[1] == ",":
                    self.take()
            self.take(")")
            return tuple(labels), tok[1] == "without"
        return None

    def primary(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            return Node("num", float(text))
        if text == "(":
            node = self.additive()
            self.take(")")
            return node
        if kind != "ident":
            raise ValueError(f"unexpected {text!r}")
        if text in AGGREGATIONS:
            grouping = self.grouping()
            self.take("(")
            inner = self.additive()
            self.take(")")
            grouping = grouping or self.grouping() or ((), False)
            return Node("agg", text, (inner,), grouping[0], grouping[1])
        if self.peek() and self.peek()[1] == "(":
            self.take("(")
            args = [self.additive()]
            while self.peek()[1] == ",":
                self.take()
                args.append(self.additive())
            self.take(")")
            return Node("call", text, tuple(args))
        matchers = []
        if self.peek() and self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label = self.take()[1]
                op = self.take()[1]
                literal = json.loads(self.take()[1])
                matchers.append((label, op, literal))
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        if self.peek() and self.peek()[0] == "range":
            self.take()  # the range of rate()/increase(): one scrape has none
        return Node("sel", text, labels=tuple(matchers))


def contains_rate(node: Node) -> bool:
    return (node.kind == "call" and node.value in PER_TIME) or any(
        contains_rate(a) for a in node.args if isinstance(a, Node))


def is_time_factor(node: Node, other: Node) -> bool:
    """``3600 * rate(...)``: a per-second → per-hour factor, meaningless over totals."""
    return node.kind == "num" and contains_rate(other)


def show(node: Node) -> str:
    """The query as evaluated: rates as totals, time factors dropped."""
    if node.kind == "num":
        return f"{node.value:g}"
    if node.kind == "sel":
        matchers = ",".join(f"{l}{op}{json.dumps(v)}" for l, op, v in node.labels)
        return node.value + (f"{{{matchers}}}" if matchers else "")
    if node.kind == "neg":
        return "-" + show(node.args[0])
    if node.kind == "call":
        if node.value in PER_TIME:
            return show(node.args[0])
        return f"{node.value}({', '.join(show(a) for a in node.args)})"
    if node.kind == "agg":
        clause = f" {'without' if node.without else 'by'} ({', '.join(node.labels)})" if node.labels else ""
        return f"{node.value}{clause} ({show(node.args[0])})"
    left, right = node.args
    if node.value == "*" and is_time_factor(left, right):
        return show(right)
    if node.value == "*" and is_time_factor(right, left):
        return show(left)
    wrap = lambda n: f"({show(n)})" if n.kind == "bin" else show(n)  # noqa: E731
    return f"{wrap(left)} {node.value} {wrap(right)}"


def matches(labels: dict[str, str], matchers: tuple) -> bool:
    for label, op, literal in matchers:
        value = labels.get(label, "")
        if op == "=" and value != literal or op == "!=" and value == literal:
            return False
        if op == "=~" and not re.fullmatch(literal, value) or op == "!~" and re.fullmatch(literal, value):
            return False
    return True


def evaluate(node: Node, samples: dict[str, list[tuple[dict[str, str], float]]]) -> float | Vector:
    if node.kind == "num":
        return node.value
    if node.kind == "sel":
        return {tuple(sorted(labels.items())): v for labels, v in samples.get(node.value, ())
                if matches(labels, node.labels)}
    if node.kind == "neg":
        return binary("*", -1.0, evaluate(node.args[0], samples))
    if node.kind == "call":
        if node.value in PER_TIME:
            return evaluate(node.args[0], samples)
        if node.value == "histogram_quantile":
            return histogram_quantile(float(evaluate(node.args[0], samples)), evaluate(node.args[1], samples))
        raise ValueError(f"function {node.value} is not supported")
    if node.kind == "agg":
        return aggregate(node, evaluate(node.args[0], samples))
    left, right = node.args
    if node.value == "*" and is_time_factor(left, right):
        return evaluate(right, samples)
    if node.value == "*" and is_time_factor(right, left):
        return evaluate(left, samples)
    return binary(node.value, evaluate(left, samples), evaluate(right, samples))


def aggregate(node: Node, vector: Vector) -> Vector:
    groups: dict[Labels, list[float]] = defaultdict(list)
    for labels, v in vector.items():
        d = dict(labels)
        keep = [k for k in d if k not in node.labels] if node.without else [k for k in node.labels if k in d]
        groups[tuple(sorted((k, d[k]) for k in keep))].append(v)
    fn = {"sum": sum, "min": min, "max": max, "count": len, "avg": lambda xs: sum(xs) / len(xs)}[node.value]
    return {k: float(fn(vs)) for k, vs in groups.items()}


def binary(op: str, a: float | Vector, b: float | Vector) -> float | Vector:
    def apply(x: float, y: float) -> float:
        if op == "/":
            return x / y if y else (math.nan if x == 0 else math.copysign(math.inf, x))
        return {"+": x + y, "-": x - y, "*": x * y}[op]

    if isinstance(a, dict) and isinstance(b, dict):  # one-to-one on identical label sets
        return {k: apply(v, b[k]) for k, v in a.items() if k in b}
    if isinstance(a, dict):
        return {k: apply(v, b) for k, v in a.items()}
    if isinstance(b, dict):
        return {k: apply(a, v) for k, v in b.items()}
    return apply(a, b)


def histogram_quantile(q: float, buckets: Vector) -> Vector:
    """Prometheus's bucket interpolation, per label set without ``le``."""
    series: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, v in buckets.items():
        d = dict(labels)
        le = float(d.pop("le"))
        series[tuple(sorted(d.items()))].append((le, v))
    out = {}
    for key, points in series.items():
        points.sort()
        total = points[-1][1]
        if total == 0:
            out[key] = math.nan
            continue
        rank = q * total
        lower, below = 0.0, 0.0
        for upper, count in points:
            if count >= rank:
                if math.isinf(upper):
                    out[key] = lower  # the highest finite bucket bound
                else:
                    out[key] = lower + (upper - lower) * (rank - below) / (count - below) if count > below else upper
                break
            lower, below = upper, count
    return out


def scrape(base_url: str) -> tuple[str, dict[str, list[tuple[dict[str, str], float]]]]:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name].append((dict(s.labels), s.value))
    return text, samples


# -- the table ------------------------------------------------------------------

def panel_queries(dashboard: dict) -> Iterator[tuple[dict, dict]]:
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                if target.get("expr"):
                    yield inner, target


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "currencyUSD":
        return f"${value:,.4f}"
    if unit == "percentunit":
        return f"{100 * value:.1f} %"
    if unit == "s":
        return f"{1000 * value:.2f} ms"
    if abs(value) >= 1000 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.4g}"


def legend(fmt_string: str, labels: Labels) -> str:
    d = dict(labels)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: d.get(m.group(1), ""), fmt_string or "") or "value"


def evaluate_dashboard(dashboard: dict, samples) -> list[dict]:
    rows = []
    for panel, target in panel_queries(dashboard):
        expr = target["expr"]
        concrete = expr.replace("$org", ".*").replace("$model", ".*")
        node = Parser(concrete).parse()
        result = evaluate(node, samples)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        for override in panel.get("fieldConfig", {}).get("overrides", []):
            if override["matcher"].get("options") == target.get("legendFormat"):
                unit = next((p["value"] for p in override["properties"] if p["id"] == "unit"), unit)
        if isinstance(result, dict):
            values = [(legend(target.get("legendFormat", ""), k), v) for k, v in sorted(result.items())]
        else:
            values = [(target.get("legendFormat") or "value", result)]
        rows.append({"panel": panel["title"], "expr": " ".join(expr.split()), "evaluated": show(node),
                     "values": [{"series": s, "value": v, "shown": fmt(v, unit)} for s, v in values]})
    return rows


def print_table(rows: list[dict]) -> None:
    print("| Panel | PromQL (dashboard) | Evaluated over one scrape as | Value(s) |")
    print("|---|---|---|---|")
    for row in rows:
        values = "<br>".join(f"{v['series']}: {v['shown']}" for v in row["values"]) or "no data"
        expr = row["expr"].replace("|", "\\|")
        evaluated = row["evaluated"].replace("|", "\\|")
        print(f"| {row['panel']} | `{expr}` | `{evaluated}` | {values} |")


# -- main -------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--limit", type=int, default=None, help="sessions to replay (default: all)")
    p.add_argument("--target-tokens", type=int, default=4000)
    p.add_argument("--model", default=None, help="override each session's model")
    p.add_argument("--prompt-cache", choices=CACHE_SHAPES, default="openai")
    p.add_argument("--stream-every", type=int, default=3, help="stream every Nth request (0: never)")
    p.add_argument("--trial-sessions", type=int, default=1,
                   help="extra sessions as org 'trial' (30k-token day budget: shows rejections)")
    p.add_argument("--upstream-latency-ms", type=float, default=0.0, help="fake provider delay per request")
    p.add_argument("--cli", action="store_true", help="run `python -m gateway.cli serve` instead of in-process")
    p.add_argument("--cohorts", action="store_true",
                   help="retail-east with a 50%% control group, retail-west in shadow mode (in-process only)")
    p.add_argument("--json-out", type=Path, default=None)
    a = p.parse_args(argv)
    require(a.data, "the retail dev sessions", "--data FILE (bench/data/dev-sessions-*.jsonl.gz are shipped)")
    if a.cohorts and a.cli:
        p.error("--cohorts runs the in-process gateway")

    sessions = load_sessions(a.data, a.limit)
    plan = [("retail-east" if i % 2 == 0 else "retail-west", s) for i, s in enumerate(sessions)]
    plan += [("trial", sessions[i % len(sessions)]) for i in range(a.trial_sessions)]
    plan = [(org, {**s, "id": f"{s['id']}#{org}" if org == "trial" else s["id"]}) for org, s in plan]
    counter = TokenCounters().for_model(a.model or sessions[0]["model"])
    cache = PromptCache(a.prompt_cache, count_message=counter.count_message)
    with FakeUpstream(record=False, prompt_cache=cache) as upstream, tempfile.TemporaryDirectory() as tmp:
        policies = cohort_policies(Path(tmp)) if a.cohorts else None
        gateway = CliGateway(upstream, Path(tmp)) if a.cli else GatewayServer(settings_for(upstream, policies)).start()
        try:
            print(f"replaying {len(plan)} sessions ({sum(len(s['steps']) for _, s in plan)} steps) through "
                  f"{'sieve serve' if a.cli else 'in-process gateway'} at {gateway.base_url}", file=sys.stderr)
            stats = replay(gateway.base_url, upstream, plan, model=a.model, target=a.target_tokens,
                           stream_every=a.stream_every, latency_s=a.upstream_latency_ms / 1000)
            gateway.wait_idle()
            _, samples = scrape(gateway.base_url)
        finally:
            gateway.stop()
    rows = evaluate_dashboard(json.loads(DASHBOARD.read_text()), samples)
    print(f"\n{stats.requests} requests ({stats.streamed} streamed) in {stats.seconds:.1f} s, statuses "
          f"{dict(sorted((stats.by_status or {}).items()))}; target {a.target_tokens} tokens; prompt cache "
          f"{a.prompt_cache}; model {a.model or 'per session'}; upstream latency {a.upstream_latency_ms:g} ms\n")
    print_table(rows)
    if a.json_out:
        a.json_out.write_text(json.dumps({"requests": stats.requests, "seconds": stats.seconds,
                                          "statuses": stats.by_status, "args": {k: str(v) for k, v in vars(a).items()},
                                          "panels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
