"""The plans a replica saved last (``gateway.exchange.recent_plans.RecentPlans``): a kept copy is
the plan a decode of the same bytes gives, field for field and in the same order; other bytes
get no copy; the kept copy is taken on the save and handed over once, so neither the saved plan
nor the one handed over can change what a later read gets; the bytes kept stay within the bound."""

from __future__ import annotations

import dataclasses

from gateway.config.settings import prepare_offline_environment
from gateway.exchange.recent_plans import RecentPlans
from gateway.pruning import FrozenPlan, LocalScorer, Policy, Steering, TokenCounters, prune
from tests.support.conversations import agent_history

prepare_offline_environment()
COUNTER = TokenCounters().for_model("gpt-4o-mini")


def _plans() -> list[FrozenPlan]:
    """The plans of a conversation's steps: a first decision, frozen replays, epochs."""
    history, plans, state = agent_history(40), [], None
    for n in range(24, len(history) + 1, 6):
        result = prune({"model": "gpt-4o-mini", "messages": history[:n]}, Policy(), scorer=LocalScorer(),
                       counter=COUNTER, state=state, steering=Steering(target_tokens=12_000), continued=True)
        plans.append(result.state)
        state = FrozenPlan.from_bytes(result.state.to_bytes())
    assert any(p.actions for p in plans) and any(p.inserts for p in plans)
    return plans


def _same(a: FrozenPlan, b: FrozenPlan) -> bool:
    """Equal field by field, and the mappings in the same order (a decision iterates them)."""
    return a == b and list(a.actions) == list(b.actions) and list(a.masked) == list(b.masked)


def test_a_kept_plan_is_what_a_decode_of_its_bytes_gives() -> None:
    recent = RecentPlans()
    for k, plan in enumerate(_plans()):
        raw = plan.to_bytes()
        recent.remember(f"org:{k}", raw, plan)
        kept = recent.plan(f"org:{k}", raw)
        assert kept is not None and _same(kept, FrozenPlan.from_bytes(raw))
        assert kept.to_bytes() == raw
    # Every field of the plan is copied: one added to FrozenPlan must be added to the copy too.
    assert {f.name for f in dataclasses.fields(FrozenPlan)} == {
        "fingerprints", "decided", "actions", "inserts", "masked", "epoch", "target_tokens", "tokens",
        "model_tokens", "encoding"}


def test_other_bytes_or_another_key_get_no_copy() -> None:
    first, second = _plans()[:2]
    recent = RecentPlans()
    recent.remember("org:a", first.to_bytes(), first)
    assert recent.plan("org:a", second.to_bytes()) is None  # another replica moved it on
    assert recent.plan("org:b", first.to_bytes()) is None   # never saved here
    assert recent.plan("org:a", first.to_bytes()[:-1] + b" ") is None  # same length, other bytes
    recent.forget("org:a")
    assert recent.plan("org:a", first.to_bytes()) is None and recent.bytes == 0 and recent.hits == 0


def test_the_kept_copy_is_handed_over_once() -> None:
    plan = next(p for p in _plans() if p.actions and p.inserts)
    raw = plan.to_bytes()
    recent = RecentPlans()
    recent.remember("org:a", raw, plan)
    plan.actions.clear(), plan.inserts[0][1].clear(), plan.fingerprints.append("changed after the save")
    taken = recent.plan("org:a", raw)
    assert taken is not None and _same(taken, FrozenPlan.from_bytes(raw)) and recent.hits == 1
    # The pipeline moves the plan it gets on: a second read of the same bytes decodes instead.
    assert recent.plan("org:a", raw) is None and len(recent) == 0 and recent.bytes == 0
    taken.actions.clear(), taken.inserts[0][1].clear(), taken.tokens.clear()
    recent.remember("org:a", raw, FrozenPlan.from_bytes(raw))
    again = recent.plan("org:a", raw)
    assert again is not None and _same(again, FrozenPlan.from_bytes(raw)) and recent.hits == 2


def test_the_bytes_kept_stay_within_the_bound() -> None:
    plans = _plans()
    sizes = [len(p.to_bytes()) for p in plans]
    recent = RecentPlans(max_bytes=4 * max(sizes))
    for k, plan in enumerate(plans * 3):
        recent.remember(f"org:{k}", plan.to_bytes(), plan)
        assert recent.bytes <= recent.max_bytes
    assert 0 < len(recent) < 3 * len(plans)
    newest = len(plans) * 3 - 1
    assert recent.plan(f"org:{newest}", plans[-1].to_bytes()) is not None  # the newest stays
    assert recent.plan("org:0", plans[0].to_bytes()) is None              # the oldest went
    tiny = RecentPlans(max_bytes=min(sizes))  # a plan over a quarter of the bound is not kept
    tiny.remember("org:a", plans[0].to_bytes(), plans[0])
    assert len(tiny) == 0 and tiny.bytes == 0
