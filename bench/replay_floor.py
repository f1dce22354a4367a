"""The cost floor of a session replay: what forwarding no history at all would cost.

    python bench/replay_floor.py SESSIONS... [--shared ../shared]

Per session file, replays every step as the forward that keeps only what Sieve never
gives up, the system prompt, the goal (the first unit after it) and the newest unit,
through ``replay.py``'s own cache model and prices, and prints its OpenAI-like and
Anthropic-like cost as ratios of the unchanged replay's. No pruner that forwards the
current step can cost less; grounding at this floor is whatever the newest unit holds.

With ``--target T,...`` it also prints the churn floor at each target: the share of steps
(``replay.py``'s churn: a forward that does not extend the previous one) that even a pruner
cutting to that same minimum at every crossing would churn. A forward grows by each step's
new messages; once over the target it cannot extend the previous one, and the deepest
cut (system prompt, goal, newest unit) puts the next crossing furthest away, so no pruner
that forwards every step's new messages whole churns less.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def floor_costs(replay, quality, path: str) -> dict[str, float]:
    spent: dict[str, float] = {}
    full: dict[str, float] = {}
    for session in replay.load_sessions([path], None, None):
        msgs, tok = session["messages"], replay.msg_tokens(session["messages"])
        memo, cache = replay.KeyMemo(), replay.PrefixCache()
        for step, ref in zip(session["steps"], replay.full_reference(session)):
            pinned, units = quality.units_of(msgs[:step["k"]])
            keep = list(pinned) + (units[0] if units else [])
            keep += [i for i in (units[-1] if len(units) > 1 else []) if i not in keep]
            req = {"model": session.get("model"), "messages": [msgs[i] for i in keep], "tools": session.get("tools")}
            n = max(0, cache.match_and_insert(replay.request_keys(req, req["messages"], memo)) - 1)
            total, cached = sum(tok[i] for i in keep), sum(tok[i] for i in keep[:n])
            for model, cost in replay.costs(cached, total - cached).items():
                spent[model] = spent.get(model, 0.0) + cost
                full[model] = full.get(model, 0.0) + ref["cost"][model]
    return {model: spent[model] / full[model] for model in spent}


def minimum(quality, msgs: list[dict], tok: list[int], k: int) -> int:
    """Tokens of the forward that keeps only the system prompt, the goal and the newest unit."""
    pinned, units = quality.units_of(msgs[:k])
    keep = list(pinned) + (units[0] if units else [])
    keep += [i for i in (units[-1] if len(units) > 1 else []) if i not in keep]
    return sum(tok[i] for i in keep)


def churn_floor(replay, quality, path: str, target: int) -> float:
    """The fewest churned steps any pruner needs at ``target``, as a share of replay.py's churn steps."""
    churned = counted = 0
    for session in replay.load_sessions([path], None, None):
        msgs, tok = session["messages"], replay.msg_tokens(session["messages"])
        size, last_k = None, 0
        for n, step in enumerate(session["steps"]):
            k = step["k"]
            size = sum(tok[:k]) if size is None else size + sum(tok[last_k:k])
            if n:
                counted += 1
            if size > target:
                churned += n > 0  # a session's first request churns nothing
                size = minimum(quality, msgs, tok, k)
            last_k = k
    return churned / counted if counted else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sessions", nargs="+")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared",
                    help="the folder holding bench/ (the evaluators)")
    ap.add_argument("--target", default="", help="targets (comma-separated) to print the churn floor at")
    args = ap.parse_args(argv)
    targets = [int(t) for t in args.target.split(",") if t]
    sys.path.insert(0, str(args.shared / "bench"))
    import quality
    import replay
    quality.setup_tokenizer(None, False)
    print(f"{'sessions':<40} {'OpenAI-like':>11} {'Anthropic-like':>14}"
          + "".join(f" {'churn@' + str(t):>11}" for t in targets))
    for path in args.sessions:
        ratios = floor_costs(replay, quality, path)
        print(f"{Path(path).name:<40} {ratios['openai']:>11.3f} {ratios['anthropic']:>14.3f}"
              + "".join(f" {100 * churn_floor(replay, quality, path, t):>10.1f}%" for t in targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
