"""How much tau grounding any pruner could keep under Sieve's pins: an oracle bound.

    python bench/tau_bound.py [--ratio 0.5] [--cases q_cases.jsonl]

For every tau case the evaluator calls feasible (system prompt + last message
within ``ratio`` × original tokens), an oracle that knows the labels keeps what
Sieve pins — the system prompt, the task's first user message, and the current
step as small as it may get (its call message and newest result whole, earlier
parallel results as bare masks) — and then carries every other needed literal
at its own token cost (cl100k, like the evaluator) in one omission marker,
cheapest first, within the target. No real pruner can beat it: it is told the
answer and pays nothing for ranking. The same bound without the goal pin shows
what dropping the task's first user message would buy.

With ``--cases`` (a ``quality.py --cases-out`` file of a gateway run at the same
ratio) it also prints the gateway's grounding on the feasible cases, and for
each over-target one whether Sieve's own pins already exceed the target, the
over-target count where they do not (the issue's hard cap holds "when that is
possible without touching pinned units"), and for the others why, as the
evaluator counts (cl100k, with its 3 % slack): no valid request
fits at all (system prompt + the current step at its smallest), only the
pinned goal breaks it, or the pins fit the slack but not Sieve's exact target.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.shared import SHARED, require, shared_bench  # noqa: E402

sys.path.insert(0, str(require(shared_bench() / "quality.py", "the shared evaluator quality.py").parent))

from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import quality  # noqa: E402  (the shared evaluator: its token count and units)

from gateway.pruning.compression import masked_message  # noqa: E402
from gateway.pruning.messages import fingerprint  # noqa: E402
from gateway.pruning.markers import MARKER_RESERVE  # noqa: E402
from gateway.pruning.tokens import TokenCounter, TokenCounters  # noqa: E402

TARGET_RULE = TokenCounters()  # Sieve's own counts: what it holds the target to
SLACK = 1.03  # the evaluator's: over the target means over target x 1.03

def pinned_messages(messages: list[dict], with_goal: bool, counter: TokenCounter) -> tuple[list[dict], int]:
    """The messages Sieve never drops, the current step at its smallest (earlier parallel
    results as Sieve's bare masks, sized by ``counter``); and their tokens as the
    evaluator counts them (cl100k)."""
    system, units = quality.units_of(messages)
    step = units[-1]
    kept = [messages[i] for i in system]
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    if with_goal and first_user is not None and first_user not in step and first_user not in system:
        kept.append(messages[first_user])
    for k, i in enumerate(step):
        m = messages[i]
        smallest = k in (0, len(step) - 1) or m.get("role") not in ("tool", "function")
        kept.append(m if smallest else masked_message(m, counter.count_message(m), fingerprint(m), keep_ids=False))
    return kept, sum(quality.count_message(m) for m in kept)


def oracle(literals: list, kept: list[dict], used: int, target: float) -> int:
    text = "\n".join(quality.message_token_text(m) for m in kept)
    found = [g for g in literals if any(f in text for f in quality.literal_forms(g))]
    rest = sorted(quality.count_text(" " + str(g)) for g in literals if g not in found)
    room, got = target - used - MARKER_RESERVE, len(found)
    for cost in rest:
        if cost > room:
            break
        room, got = room - cost, got + 1
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="?", default=str(SHARED / "data" / "dev-tau-retail.jsonl.gz"))
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--cases", help="quality.py --cases-out file of a gateway run at the same ratio")
    args = ap.parse_args()
    quality.setup_tokenizer()
    cases = quality.load_cases([args.fixtures], None, None)
    bounds = {("pins", 1.0): 0, ("pins", SLACK): 0, ("no goal", 1.0): 0}
    feasible, literals = {}, 0
    for case in cases:
        messages = case["request"]["messages"]
        target = int(case["meta"]["orig_tokens"] * args.ratio)
        system, _ = quality.units_of(messages)
        floor = sum(quality.count_message(messages[i]) for i in system) + quality.count_message(messages[-1])
        if floor > target:
            continue
        labels = case["labels"]["grounding"]
        literals += len(labels)
        target_rule = TARGET_RULE.for_model(case["request"]["model"])
        pins = {g: pinned_messages(messages, g, target_rule) for g in (True, False)}
        # Whether the target can be met is Sieve's call, under its own (stricter) count.
        feasible[case["id"]] = (target, target_rule.count_messages(pins[True][0]), pins[False][1], pins[True][1])
        for (name, slack) in bounds:
            kept, used = pins[name == "pins"]
            bounds[(name, slack)] += oracle(labels, kept, used, target * slack)
    print(f"tau cases feasible at ratio {args.ratio}: {len(feasible)} of {len(cases)}, {literals} literals")
    for (name, slack), got in bounds.items():
        what = "Sieve's pins" if name == "pins" else "pins without the goal"
        print(f"  oracle bound, {what}, target x {slack:.2f}: {100 * got / literals:.1f} %")
    if args.cases:
        rows = [json.loads(line) for line in open(args.cases)]
        rows = [r for r in rows if r["id"] in feasible and r.get("error") is None
                and abs(r["target"] - feasible[r["id"]][0]) <= 1]
        found = sum(r.get("grounding_found", 0) for r in rows)
        total = sum(r.get("grounding_total", 0) for r in rows)
        over = [r for r in rows if r["over_budget"]]
        pins_over = [r for r in over if feasible[r["id"]][1] > r["target"]]
        print(f"  gateway on the same cases: {100 * found / max(total, 1):.1f} % grounding, "
              f"{len(over)} over the target, {len(pins_over)} of them with Sieve's pins already over it "
              f"(counted as Sieve holds the target: the larger of o200k and cl100k)")
        fits = [r for r in rows if feasible[r["id"]][1] <= r["target"]]
        print(f"  where Sieve's pins fit the target (the issue's hard-cap rule: never over it when that is "
              f"possible without touching pinned units): {sum(r['over_budget'] for r in fits)} over "
              f"of {len(fits)} cases")
        no_valid = [r for r in over if feasible[r["id"]][2] > r["target"] * SLACK]
        goal = [r for r in over if r not in no_valid and feasible[r["id"]][3] > r["target"] * SLACK]
        print(f"  as the evaluator counts them: {len(no_valid)} where no valid request fits (system prompt + "
              f"current step at its smallest), {len(goal)} where only the pinned goal breaks the target, "
              f"{len(over) - len(no_valid) - len(goal)} where the pins fit its 3 % slack but not the exact target")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
