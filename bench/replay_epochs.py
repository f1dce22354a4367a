"""Epochs and cache writes of a session replay, read from replay.py's --steps-out.

    python replay.py SESSIONS --gateway URL --target 4000,8000 --steps-out STEPS.jsonl
    python bench/replay_epochs.py STEPS.jsonl

replay.py reports costs and cache hits; what breaks the cache is not in its
summary. Per target this prints:

* epochs per session (decisions after the first: each rewrites the forwarded
  history after the prefix it keeps);
* second-step epochs: an epoch on the step right after a session's first
  decision, where that step alone adds at most half the target (so it would not
  cross the target from the low-water mark): a first decision that landed just
  under the target and throws away, one step later, the prefix it had cached;
* cache-write tokens: forwarded tokens not read from the cache (what a provider
  with prompt caching writes, at 1.25 x on Anthropic), and their ratio to the
  same steps forwarded unchanged;
* the Anthropic-like cost (replay.py's 1.25 x write, 0.1 x read) in three parts,
  each as a share of the unchanged replay's cost: writes of new content (a
  step's tokens the unchanged request also writes: the messages new since the
  last step, which any forward pays for), rewrites (the rest of the writes:
  what epochs throw out of the cache) and reads. The first part is a floor no
  pruner goes under; the other two are what pruning trades.

Rows are per target and source (the session id's prefix), then all sources.

``--make-late-join SESSIONS --start-tokens N --out FILE`` writes the sessions with
their early steps left out, from the first whose history holds N tokens: a client
whose first request to the gateway is already over the target (an agent connected
mid-conversation, or one whose first request carries a large context), the case
where a conversation's first decision is a stateless prune.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECIDED = ("epoch", "stateless")


def _open(path: Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else path.open()


def summarize(steps_path: Path) -> list[dict]:
    """Per target and source, then per target: sessions, epochs per session,
    second-step epochs, cache writes, the Anthropic-like cost's parts."""
    by_session: dict[tuple[int, str], list[dict]] = defaultdict(list)
    with _open(steps_path) as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("error") is None and row.get("report"):
                by_session[(row.get("target") or 0, row["session"])].append(row)
    out = []
    for target in sorted({t for t, _ in by_session}):
        sessions = {sid: rows for (t, sid), rows in by_session.items() if t == target}
        sources = sorted({sid.split(":", 1)[0] for sid in sessions})
        for source in sources + (["all"] if len(sources) > 1 else []):
            chosen = [rows for sid, rows in sessions.items() if source == "all" or sid.split(":", 1)[0] == source]
            out.append({"target": target, "source": source, **_session_figures(chosen, target)})
    return out


def _session_figures(sessions: list[list[dict]], target: int) -> dict:
    epochs, second = [], 0
    writes = full_writes = new_writes = reads = 0
    full_cost = 0.0
    for rows in sessions:
        rows.sort(key=lambda r: r["k"])
        decided = [n for n, r in enumerate(rows) if r["report"]["mode"] in DECIDED]
        epochs.append(max(0, len(decided) - 1))
        if decided and decided[0] + 1 < len(rows):
            first, nxt = rows[decided[0]], rows[decided[0] + 1]
            # Excused: a step that adds more than half the target crosses it even
            # from the low-water mark (the default ratio 0.5).
            if nxt["report"]["mode"] in DECIDED and nxt["full_tokens"] - first["full_tokens"] <= target // 2:
                second += 1
        for r in rows:
            written, full_written = r["fwd_tokens"] - r["cached_tokens"], r["full_tokens"] - r["full_cached_tokens"]
            writes += written
            full_writes += full_written
            new_writes += min(written, full_written)
            reads += r["cached_tokens"]
            full_cost += r["full_cost"]["anthropic"]
    share = (lambda tokens, price: price * tokens / full_cost) if full_cost else (lambda tokens, price: 0.0)
    return {"sessions": len(epochs), "epochs_mean": statistics.mean(epochs), "epochs_median": statistics.median(epochs),
            "second_step_epochs": second, "cache_write_tokens": writes,
            "cache_write_ratio": writes / full_writes if full_writes else 0.0,
            "anthropic_new_writes": share(new_writes, 1.25), "anthropic_rewrites": share(writes - new_writes, 1.25),
            "anthropic_reads": share(reads, 0.1)}


def make_late_join(sessions: Path, start_tokens: int, out: Path) -> int:
    """The sessions from their first step whose history holds ``start_tokens`` tokens
    (counted as replay.py counts: cl100k, text + tool calls + 4 per message)."""
    sys.path.insert(0, str(ROOT))
    from gateway.config.settings import prepare_offline_environment
    prepare_offline_environment()
    from gateway.pruning.tokens import TokenCounters
    counter = TokenCounters().for_model("gpt-4o-mini")
    written = 0
    with _open(sessions) as fh, gzip.open(out, "wt") as dst:
        for line in fh:
            session = json.loads(line)
            sizes = [counter.count_message(m) for m in session["messages"]]
            running, prefix = 0, [0]
            for size in sizes:
                running += size
                prefix.append(running)
            steps = [s for s in session["steps"] if prefix[min(s["k"], len(sizes))] >= start_tokens]
            if len(steps) >= 2:
                session["steps"] = steps
                dst.write(json.dumps(session) + "\n")
                written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="?", type=Path, help="replay.py --steps-out file")
    ap.add_argument("--make-late-join", type=Path, metavar="SESSIONS")
    ap.add_argument("--start-tokens", type=int, default=9000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.make_late_join:
        if args.out is None:
            ap.error("--make-late-join needs --out")
        print(f"{make_late_join(args.make_late_join, args.start_tokens, args.out)} sessions -> {args.out}")
        return 0
    if args.steps is None:
        ap.error("a steps file, or --make-late-join")
    print(f"{'target':>6} {'source':>12} {'sessions':>8} {'epochs/session':>14} {'(median)':>8} "
          f"{'2nd-step epochs':>15} {'cache-write tok':>15} {'vs full':>7} "
          f"{'ant: new writes':>15} {'rewrites':>8} {'reads':>6} {'total':>6}")
    for r in summarize(args.steps):
        parts = (r["anthropic_new_writes"], r["anthropic_rewrites"], r["anthropic_reads"])
        print(f"{r['target']:>6} {r['source']:>12} {r['sessions']:>8} {r['epochs_mean']:>14.2f} {r['epochs_median']:>8} "
              f"{r['second_step_epochs']:>15} {r['cache_write_tokens']:>15,} {r['cache_write_ratio']:>7.3f} "
              f"{parts[0]:>15.3f} {parts[1]:>8.3f} {parts[2]:>6.3f} {sum(parts):>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
