"""Recoverable grounding: when pruning removed a fact the next step needs, can ``sieve_expand`` get it back?

    python bench/expand_recoverable.py [SESSIONS.jsonl.gz ...] [--target 4000] [--limit N]

Replays each session's steps in order through the pure pipeline as the gateway runs
it (the conversation's frozen plan carried from step to step, the target as an
``x-sieve-target-tokens`` would set it), decorates the forward as ``expand_tool: true``
does (``gateway.expand.expandable``), and for every step whose label names
facts the next call needs (``grounding``) that were in the client's history but are
not in the forwarded request, checks that a ref the forward names restores them
(``restore`` of every ref the request lists, the text the model would get back).

Also prints what the tool costs per request: the definition's tokens in each format,
and the tokens the refs add to the markers.

Uses ../shared/bench/quality.py's token text and literal forms, so "present" means
what it means in ``replay.py``'s grounding recall.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.shared import SHARED, require, shared_bench  # noqa: E402

sys.path.insert(0, str(require(shared_bench() / "quality.py", "the shared evaluator quality.py").parent))

from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import quality  # noqa: E402

from gateway.expand import expandable, restore, tool_definition  # noqa: E402
from gateway.pruning.frozen import FrozenPlan  # noqa: E402
from gateway.pruning.pipeline import prune  # noqa: E402
from gateway.pruning.policy import Policy, Steering  # noqa: E402
from gateway.pruning.scoring import LocalScorer  # noqa: E402
from gateway.pruning.tokens import TokenCounters  # noqa: E402
from gateway.wire.formats import WireFormat  # noqa: E402


def sessions(paths: list[str], limit: int | None) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        out += rows[:limit] if limit else rows
    return out


def text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(quality.message_token_text(m) for m in messages if isinstance(m, dict))


def forwarded_raw(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages)


def present(fact: Any, text: str) -> bool:
    return any(form in text for form in quality.literal_forms(fact))


def replay_session(session: dict[str, Any], target: int, counters: TokenCounters, totals: dict[str, int]) -> None:
    counter = counters.for_model(session["model"])
    policy, scorer, plan = Policy(), LocalScorer(), None  # policies/default.yaml's values
    for step in session["steps"]:
        body = {"model": session["model"], "messages": session["messages"][:step["k"]], "tools": session["tools"]}
        result = prune(body, policy, scorer=scorer, counter=counter, state=plan,
                       steering=Steering(target_tokens=target))
        plan = FrozenPlan.from_bytes(result.state.to_bytes())  # as the store hands it back
        found = expandable(result, body["messages"])
        before = sum(counter.model_tokens(m) for m in result.request["messages"])
        totals["ref_tokens"] += sum(counter.model_tokens(m) for m in found.messages) - before
        totals["requests"] += 1
        totals["changed"] += found.removed
        totals["refs"] += sum(f"ref {ref}" in forwarded_raw(found.messages) for ref in found.refs)
        if not (step.get("next_call") and step.get("grounding")):
            continue
        original, forwarded = text_of(body["messages"]), text_of(found.messages)
        pruned = [g for g in step["grounding"] if present(g, original) and not present(g, forwarded)]
        if not pruned:
            continue
        # One ref at a time, as the model asks for them (each result is bounded on its own): the
        # refs the forward names (one round), and the unit refs a long span's list names (two).
        named = [ref for ref in found.refs if f"ref {ref}" in forwarded_raw(found.messages)]
        first = [restore([ref], found.refs, body["messages"])[0] for ref in named]
        second = [restore([ref], found.refs, body["messages"])[0] for ref in found.refs if ref not in named]
        one = sum(any(present(g, text) for text in first) for g in pruned)
        two = sum(any(present(g, text) for text in first + second) for g in pruned)
        totals["steps_pruned"] += 1
        totals["facts_pruned"] += len(pruned)
        totals["facts_one_round"] += one
        totals["facts_recoverable"] += two
        totals["steps_recoverable"] += two == len(pruned)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sessions", nargs="*", default=[str(SHARED / "data" / "dev-sessions-retail.jsonl.gz")])
    ap.add_argument("--target", default="2000,4000,8000", help="target tokens, comma-separated")
    ap.add_argument("--limit", type=int, default=None, help="at most N sessions per file")
    args = ap.parse_args()
    quality.setup_tokenizer()
    counters = TokenCounters()
    rows = sessions(args.sessions, args.limit)
    print(f"{len(rows)} sessions, {sum(len(s['steps']) for s in rows)} steps")
    print("target  requests  pruned  refs named/req  ref tok/req  steps w/ pruned facts  facts pruned  "
          "in one round  within two rounds  steps, all back")
    for target in (int(t) for t in args.target.split(",")):
        totals = dict.fromkeys(("requests", "changed", "refs", "ref_tokens", "steps_pruned", "facts_pruned",
                                "facts_one_round", "facts_recoverable", "steps_recoverable"), 0)
        for session in rows:
            replay_session(session, target, counters, totals)
        n = max(totals["changed"], 1)
        facts = totals["facts_recoverable"] / max(totals["facts_pruned"], 1)
        once = totals["facts_one_round"] / max(totals["facts_pruned"], 1)
        steps = totals["steps_recoverable"] / max(totals["steps_pruned"], 1)
        print(f"{target:>6}  {totals['requests']:>8}  {totals['changed']:>6}  {totals['refs'] / n:>13.1f}  "
              f"{totals['ref_tokens'] / n:>11.1f}  {totals['steps_pruned']:>21}  {totals['facts_pruned']:>12}  "
              f"{totals['facts_one_round']:>5} ({once:.1%})  {totals['facts_recoverable']:>9} ({facts:.1%})  "
              f"{totals['steps_recoverable']:>8} ({steps:.1%})")
    for model in ("gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5"):
        counter = counters.for_model(model)
        sizes = {fmt.value: counter.count_text(json.dumps(tool_definition(fmt))) for fmt in WireFormat}
        print(f"tool definition, {model} ({counter.encoding_name}): {sizes} tokens (JSON text)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
