"""Budgeted selection over tiers.

Every unit ends ``kept``, ``masked`` (its tool results replaced by a marker,
the calls kept) or ``dropped`` (an :class:`~gateway.pruning.vocabulary.Action`).
Pinned units are kept. The others are offered in priority order, each in its
full form if it fits, else masked if it can be and that fits, else dropped:

1. high: score >= keep threshold, most relevant first;
2. candidates (between the thresholds), newest first;
3. low: score <= compress threshold: tool chains masked (their calls carry the ids
   later steps reuse), other units only when ``fill_budget`` leaves room.

Old bulky tool outputs below the keep threshold are masked even when they would
fit: the cheapest big win on agent traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from gateway.pruning.conversation import Conversation
from gateway.pruning.scoring import UnitScore
from gateway.pruning.vocabulary import DROPPED, KEPT, MASKED, Action


@dataclass(frozen=True, slots=True)
class SelectionRules:
    budget: int                  # tokens available for the non-pinned units
    keep_threshold: int = 4
    compress_threshold: int = 2
    fill_budget: bool = True
    mask_tool_outputs: bool = True
    mask_min_tokens: int = 120
    mask_before_drop: bool = True


def select(
    conversation: Conversation,
    scores: Mapping[int, UnitScore],
    pinned: set[int],
    masked_cost: Mapping[int, int],
    rules: SelectionRules,
    forced: Mapping[int, Action] | None = None,
) -> dict[int, Action]:
    """Decide each unit's action. ``masked_cost[i]`` is unit i's tokens when masked
    (absent if it cannot be masked); ``forced`` holds earlier epochs' masks and
    drops, which never come back (the cached prefix depends on it)."""
    forced = forced or {}
    actions: dict[int, Action] = {}
    remaining = rules.budget
    for i in pinned:
        actions[i] = KEPT

    ranked = _ranked(scores, pinned, rules)
    if rules.mask_before_drop:
        # Every tool chain first gets its masked form (about a quarter of its size,
        # calls and ids intact) while room allows: a later call is far more likely
        # to reuse an old id than an old sentence. Upgrades to full come below.
        for i, _ in ranked:
            if i in masked_cost and forced.get(i) != DROPPED and masked_cost[i] <= remaining:
                actions[i], remaining = MASKED, remaining - masked_cost[i]

    def offer(i: int, prefer_mask: bool) -> None:
        nonlocal remaining
        unit = conversation.units[i]
        prior = forced.get(i)
        held = masked_cost[i] if actions.get(i) == MASKED else 0
        full_allowed = prior is None and not prefer_mask
        if full_allowed and unit.tokens - held <= remaining:
            actions[i], remaining = KEPT, remaining - unit.tokens + held
        elif held:
            return  # stays masked
        elif i in masked_cost and prior != DROPPED and masked_cost[i] <= remaining:
            actions[i], remaining = MASKED, remaining - masked_cost[i]
        else:
            actions[i] = DROPPED

    for i, tier in ranked:
        unit = conversation.units[i]
        bulky = rules.mask_tool_outputs and unit.tool_result_tokens >= rules.mask_min_tokens
        if tier == "high":
            offer(i, prefer_mask=False)
        elif tier == "candidate":
            offer(i, prefer_mask=bulky)
        else:
            if i in masked_cost or rules.fill_budget:
                offer(i, prefer_mask=i in masked_cost)
            else:
                actions[i] = DROPPED
    return actions


def _ranked(scores: Mapping[int, UnitScore], pinned: set[int], rules: SelectionRules) -> list[tuple[int, str]]:
    """The unpinned units in the order they are offered, each with its tier (high,
    candidate or low: the three tiers above)."""
    high = [i for i, s in scores.items() if i not in pinned and s.score >= rules.keep_threshold]
    cand = [i for i, s in scores.items()
            if i not in pinned and rules.compress_threshold < s.score < rules.keep_threshold]
    low = [i for i, s in scores.items() if i not in pinned and s.score <= rules.compress_threshold]
    high.sort(key=lambda i: (-scores[i].score, -scores[i].relevance, -i))
    cand.sort(key=lambda i: -i)
    low.sort(key=lambda i: (-scores[i].score, -scores[i].relevance, -i))
    return [(i, "high") for i in high] + [(i, "candidate") for i in cand] + [(i, "low") for i in low]


def shrink_to_fit(
    conversation: Conversation,
    actions: dict[int, Action],
    order: Sequence[int],
    masked_cost: Mapping[int, int],
    excess: int,
    drop: bool = True,
) -> int:
    """Free ``excess`` tokens from ``order`` (in its order): first by masking bulky
    tool output, which keeps the calls and their ids, then, if ``drop``, by dropping.
    Returns what is still over."""
    for i in order:
        if excess <= 0:
            return excess
        if actions.get(i) == KEPT and i in masked_cost:
            gain = conversation.units[i].tokens - masked_cost[i]
            if gain > 0:
                actions[i] = MASKED
                excess -= gain
    if not drop:
        return excess
    for i in order:
        if excess <= 0:
            break
        current = actions.get(i)
        if current in (KEPT, MASKED):
            actions[i] = DROPPED
            excess -= masked_cost[i] if current == MASKED else conversation.units[i].tokens
    return excess
