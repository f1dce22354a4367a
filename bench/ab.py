"""The same load on this working tree and on another git revision: alternating rounds, medians, ratios.

    python bench/ab.py --against 99e55f9                       # chat passthrough, small body, c=16 and c=1
    python bench/ab.py --against main --routes chat,messages,responses --kinds none,prune --modes json,stream
    python bench/ab.py --against HEAD --payload agent --kinds prune --concurrency 1

Every change on the request path is shown with it. The other revision is checked out once
into ``bench/.cache/ab-<commit>`` (a detached ``git worktree``, kept for the next run; remove
it with ``git worktree remove``). Per route, one fake upstream (no latency by default: the
gateway's own cost is what is measured) and two gateways, this tree's and the revision's,
each ``python -m gateway.cli serve`` from its own tree with its own default policy
(``expand_tool: false`` where the tree knows it). Each round loads, per cell (kind, mode,
concurrency), the upstream directly, then both gateways, the two in alternating order from
round to round, so drift on the shared machine hits both alike. Prints per cell the medians
over the rounds and the ratios this / other (req/s: median of the per-round ratios, the figure
to quote), the added p50 and TTFB over direct, CPU ms per request. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import (CACHE, Cell, Server, agent_request, drive, small_request,  # noqa: E402
                            start_sieve, start_upstream)
from bench.overhead_routes import ROUTES  # noqa: E402

KINDS = {  # the headers each kind of request carries
    "none": {"x-sieve-strategy": "none"},
    "prune": {"x-sieve-conversation-id": "bench-ab-1"},  # + x-sieve-target-tokens (--prune-target)
}
SIDES = ("this", "base")


def checkout(revision: str) -> Path:
    """The revision's tree under bench/.cache (checked out once, reused while the commit is the same)."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{revision}^{{commit}}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = CACHE / f"ab-{commit[:12]}"
    if not (tree / "gateway").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), commit], cwd=ROOT, check=True)
    return tree


def policies_of(tree: Path) -> Path:
    """The tree's default policy, with the sieve_expand tool off where the tree has it."""
    folder = CACHE / f"ab-policies-{'this' if tree == ROOT else tree.name}"
    folder.mkdir(parents=True, exist_ok=True)
    text = (tree / "policies" / "default.yaml").read_text()
    if "expand_tool" in (tree / "gateway" / "pruning" / "policy.py").read_text():
        text += "\nexpand_tool: false\n"
    (folder / "default.yaml").write_text(text)
    return folder


async def run_route(a: argparse.Namespace, route_name: str, base_tree: Path) -> list[dict]:
    route = ROUTES[route_name]
    a.route = route_name
    chat_body = small_request() if a.payload == "small" else agent_request(a.agent_tokens)[0]
    body = route.payload(chat_body)
    servers: dict[str, Server] = {}
    try:
        servers["direct"] = start_upstream(a)
        await servers["direct"].wait_ready(30)
        up = servers["direct"].port
        for side, tree in (("this", ROOT), ("base", base_tree)):
            srv = start_sieve(a, up, tree, name=f"ab-{side}", policies=policies_of(tree))
            if srv is None:
                raise SystemExit(f"{tree} has no gateway/cli/main.py")
            servers[side] = srv
        for side in SIDES:
            await servers[side].wait_ready(90)
        print(f"# {route.path}: {a.payload} body {len(orjson.dumps(body)) // 1024} KiB", file=sys.stderr)
        cells: dict[tuple, dict[str, list[Cell]]] = {}
        for rnd in range(a.rounds):
            for kind in a.kinds:
                headers = dict(KINDS[kind])
                if kind == "prune":
                    headers["x-sieve-target-tokens"] = str(a.prune_target)
                for stream in a.modes:
                    for conc in a.concurrency:
                        per = cells.setdefault((kind, stream, conc), {t: [] for t in ("direct", *SIDES)})
                        order = ("direct",) + (SIDES if rnd % 2 == 0 else SIDES[::-1])
                        for target in order:
                            srv = servers[target]
                            cell = await drive(f"http://127.0.0.1:{srv.port}{route.path}", body,
                                               {} if target == "direct" else headers, stream, conc,
                                               a.requests, a.duration, srv.pid, target, route=route)
                            if cell.errors:
                                print(f"! {target} {kind} {cell.errors} errors: {cell.first_error}", file=sys.stderr)
                            per[target].append(cell)
                        print(f"# round {rnd + 1} {route_name} {kind} {'stream' if stream else 'json'} c={conc}: "
                              + "  ".join(f"{t} {per[t][-1].rps:.0f} rps p50 {per[t][-1].p50_ms:.2f}"
                                          for t in ("direct", *SIDES)), file=sys.stderr)
        return [summarize(route_name, key, per) for key, per in cells.items()]
    finally:
        for srv in servers.values():
            srv.stop()


def _med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(route: str, key: tuple, per: dict[str, list[Cell]]) -> dict:
    kind, stream, conc = key
    row: dict = {"route": route, "kind": kind, "mode": "stream" if stream else "json", "concurrency": conc,
                 "rounds": len(per["this"]), "errors": sum(c.errors for cs in per.values() for c in cs)}
    direct = per["direct"]
    for t in ("direct", *SIDES):
        cs = per[t]
        row[t] = {"rps": _med([c.rps for c in cs]), "p50_ms": _med([c.p50_ms for c in cs]),
                  "cpu_ms_per_req": _med([c.cpu_ms_per_req for c in cs]),
                  # added over direct in the same round, then the median
                  "added_p50_ms": _med([c.p50_ms - d.p50_ms for c, d in zip(cs, direct)]),
                  "added_ttfb_ms": _med([c.ttfb_p50_ms - d.ttfb_p50_ms for c, d in zip(cs, direct)
                                         if c.ttfb_p50_ms is not None and d.ttfb_p50_ms is not None]),
                  "rounds_rps": [round(c.rps, 1) for c in cs]}
    ratios = [t.rps / b.rps for t, b in zip(per["this"], per["base"]) if b.rps]
    row["rps_ratio"] = _med(ratios)
    row["rps_ratio_range"] = [min(ratios), max(ratios)] if ratios else []
    this_cpu, base_cpu = row["this"]["cpu_ms_per_req"], row["base"]["cpu_ms_per_req"]
    row["cpu_ratio"] = this_cpu / base_cpu if this_cpu and base_cpu else None
    return row


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def print_rows(rows: list[dict], against: str) -> None:
    cols = ("route", "kind", "mode", "c", "direct rps", "this rps", "base rps", "rps ×", "× range",
            "this +p50", "base +p50", "this +ttfb", "base +ttfb", "this cpu", "base cpu", "cpu ×", "err")
    lines = [cols]
    for r in rows:
        t, b, d = r["this"], r["base"], r["direct"]
        lines.append((r["route"], r["kind"], r["mode"], str(r["concurrency"]), fmt(d["rps"], ".0f"),
                      fmt(t["rps"], ".0f"), fmt(b["rps"], ".0f"), fmt(r["rps_ratio"], ".3f"),
                      "-".join(fmt(x, ".2f") for x in r["rps_ratio_range"]) or "-",
                      fmt(t["added_p50_ms"]), fmt(b["added_p50_ms"]), fmt(t["added_ttfb_ms"]),
                      fmt(b["added_ttfb_ms"]), fmt(t["cpu_ms_per_req"]), fmt(b["cpu_ms_per_req"]),
                      fmt(r["cpu_ratio"], ".3f"), str(r["errors"])))
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    print(f"this tree against {against}: medians of {rows[0]['rounds'] if rows else 0} alternating rounds "
          "(rps × = median of the per-round ratios this/base; +p50, +ttfb: ms over direct; cpu: ms per request)")
    for line in lines:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", required=True, help="a git revision (or a tree's path) to compare with")
    p.add_argument("--routes", default="chat", help="comma list of " + ",".join(ROUTES))
    p.add_argument("--kinds", default="none", help="comma list of " + ",".join(KINDS))
    p.add_argument("--modes", default="json")
    p.add_argument("--concurrency", default="16,1")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=3000, help="per cell, bound 1")
    p.add_argument("--duration", type=float, default=4.0, help="seconds per cell, bound 2")
    p.add_argument("--payload", choices=("small", "agent"), default="small")
    p.add_argument("--agent-tokens", type=int, default=20_000)
    p.add_argument("--prune-target", type=int, default=8_000)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-delay-ms", type=float, default=0.0)
    p.add_argument("--json-out", type=Path)
    a = p.parse_args(argv)
    a.routes = [r for r in a.routes.split(",") if r]
    a.kinds = [k for k in a.kinds.split(",") if k]
    a.modes = [m == "stream" for m in a.modes.split(",")]
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    a.sieve_cmd = ""
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    base = Path(a.against).resolve() if Path(a.against).is_dir() else checkout(a.against)
    rows: list[dict] = []
    for route in a.routes:
        rows += asyncio.run(run_route(a, route, base))
    print_rows(rows, a.against)
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_bytes(orjson.dumps({"config": {k: v for k, v in vars(a).items() if k != "json_out"},
                                             "rows": rows}, option=orjson.OPT_INDENT_2, default=str))
        print(f"# wrote {a.json_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
