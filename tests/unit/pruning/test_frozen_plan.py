"""A frozen plan's bytes (``gateway.pruning.frozen.FrozenPlan``): the plan moved on by a frozen
replay, written from the bytes of the plan before it (``to_bytes_replayed``), is byte for byte
what ``to_bytes`` writes, whatever its decisions' texts hold; bytes of another layout are not
taken apart; a copy is what a decode of the plan's bytes gives, in the same order."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from gateway.config.settings import prepare_offline_environment
from gateway.pruning import FrozenPlan, LocalScorer, Policy, Steering, TokenCounters, prune
from gateway.pruning.vocabulary import DROPPED, MASKED
from tests.support.conversations import agent_history

prepare_offline_environment()
COUNTER = TokenCounters().for_model("gpt-4o-mini")


def _moved_on(plan: FrozenPlan, more: int) -> FrozenPlan:
    """``plan`` as a frozen replay leaves it: ``more`` messages seen, their counts, the same decisions."""
    return dataclasses.replace(plan, fingerprints=plan.fingerprints + [f"{k:024x}" for k in range(more)],
                               tokens=plan.tokens + [7] * more, model_tokens=plan.model_tokens + [8] * more,
                               encoding=plan.encoding or "o200k_base")


def test_a_replayed_plan_of_a_conversation_writes_the_same_bytes() -> None:
    history, state, seen = agent_history(40), None, 0
    for n in range(24, len(history) + 1, 6):
        result = prune({"model": "gpt-4o-mini", "messages": history[:n]}, Policy(), scorer=LocalScorer(),
                       counter=COUNTER, state=state, steering=Steering(target_tokens=12_000), continued=True)
        earlier = result.state.to_bytes()
        for more in (0, 2, 9):
            moved = _moved_on(result.state, more)
            assert moved.to_bytes_replayed(earlier) == moved.to_bytes()
        seen += bool(result.state.actions and result.state.inserts and result.state.masked)
        state = FrozenPlan.from_bytes(earlier)
    assert seen  # plans with masks, drops and markers among them


# Texts made of the layout's own names and punctuation: a value that holds them must not move a seam.
_texts = st.lists(st.sampled_from(list('ab,:"\\{}[] é') + ['"tokens":', ',"decided":', ',"tokens":', '{"v":2,"fp":']),
                  max_size=12).map("".join)
_markers = st.dictionaries(st.sampled_from(["role", "content", "tokens", "decided", "fp"]),
                           _texts | st.lists(_texts, max_size=2), max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([MASKED, DROPPED]), max_size=6), st.lists(_texts, max_size=4),
       st.lists(_markers, max_size=3), st.integers(0, 5), st.text(max_size=12))
def test_any_decisions_are_copied_whole(actions: list, masks: list[str], markers: list[dict], more: int,
                                        encoding: str) -> None:
    n = len(actions) + len(masks) + 2
    plan = FrozenPlan([f"{k:024x}" for k in range(n)], decided=n, actions=dict(enumerate(actions)),
                      inserts=[(k, m) for k, m in enumerate(markers)],
                      masked={len(actions) + k: t for k, t in enumerate(masks)}, epoch=2, target_tokens=900,
                      tokens=[3] * n, model_tokens=[4] * n, encoding="o200k_base")
    moved = dataclasses.replace(_moved_on(plan, more), encoding=encoding)
    assert moved.to_bytes_replayed(plan.to_bytes()) == moved.to_bytes()
    assert FrozenPlan.from_bytes(moved.to_bytes_replayed(plan.to_bytes())) == moved


def test_bytes_of_another_layout_are_written_anew() -> None:
    plan = FrozenPlan(["a" * 24, "b" * 24], decided=2, actions={0: DROPPED}, epoch=1, tokens=[5, 6],
                      model_tokens=[5, 6], encoding="o200k_base")
    moved = _moved_on(plan, 1)
    for foreign in (b'{"fp":["aaa"],"v":2,"decided":2}', b'{"v":2,"fp":[],"tokens":[1],"decided":2}', b"", b"{}"):
        assert moved.to_bytes_replayed(foreign) == moved.to_bytes()


def test_a_copy_is_a_decode_in_index_order() -> None:
    plan = FrozenPlan(["a" * 24] * 6, decided=6, actions={4: DROPPED, 1: MASKED, 2: DROPPED},
                      inserts=[(0, {"role": "user", "content": {"nested": ["x"]}})], masked={1: "[masked]", 0: "[m]"},
                      epoch=3, target_tokens=500, tokens=[1] * 6, model_tokens=[2] * 6, encoding="o200k_base")
    for source in (plan, FrozenPlan.from_bytes(plan.to_bytes())):  # out of order, and in order
        copied, decoded = source.copy(), FrozenPlan.from_bytes(plan.to_bytes())
        assert copied == decoded and list(copied.actions) == list(decoded.actions) == [1, 2, 4]
        assert list(copied.masked) == list(decoded.masked) == [0, 1]
        copied.inserts[0][1]["content"]["nested"].append("y")
        copied.actions[5] = MASKED
        assert source.inserts[0][1]["content"]["nested"] == ["x"] and 5 not in source.actions
