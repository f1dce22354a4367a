"""What an epoch inherits from the one before it: its budget, the decisions that stand, the settled prefix.

An epoch starts when a conversation's next request no longer fits the target
under the stored decisions. It prunes below the target (to the low-water mark)
so that the turns after it fit again and share a cached prefix; it never
brings back what an earlier epoch masked or dropped; and it keeps the longest
prefix of the old decisions it can afford byte for byte, deciding anew only
after it::

    budget = low_water(conv, target_tokens=8000, ratio=0.5)
    forced = forced_unit_actions(conv, plan.actions)
    settled, end = settled_prefix(conv, plan.decided, forced, masked_cost, protected, room)
"""

from __future__ import annotations

from typing import Mapping

from gateway.pruning.conversation import KIND_SYSTEM, Conversation
from gateway.pruning.vocabulary import DROPPED, KEPT, MASKED, Action


def low_water(conv: Conversation, target_tokens: int, ratio: float) -> int:
    """The epoch's budget. Hysteresis applies to the history: the system prompt is a
    fixed, always-cached cost, so the low-water mark leaves it whole and takes
    ``ratio`` of what remains for everything else."""
    return low_water_mark(sum(u.tokens for u in conv.units if u.kind == KIND_SYSTEM), target_tokens, ratio)


def low_water_mark(system_tokens: int, target_tokens: int, ratio: float) -> int:
    """``low_water`` from the system prompt's tokens alone (a request not yet split into units)."""
    if system_tokens >= target_tokens:
        return target_tokens
    return system_tokens + int((target_tokens - system_tokens) * ratio)


def forced_unit_actions(conv: Conversation, prior: Mapping[int, Action]) -> dict[int, Action]:
    """Earlier epochs' drops and masks (per message) as unit actions."""
    forced: dict[int, Action] = {}
    if not prior:
        return forced
    for u in conv.units:
        acts = {prior[j] for j in u.indices if j in prior}
        if DROPPED in acts:
            forced[u.index] = DROPPED
        elif MASKED in acts:
            forced[u.index] = MASKED
    return forced


def settled_prefix(conv: Conversation, boundary: int, forced: Mapping[int, Action],
                   masked_cost: Mapping[int, int], protected: set[int], room: int) -> tuple[dict[int, Action], int]:
    """The longest prefix of the previously decided units whose decisions can stay
    exactly as they were within ``room`` tokens (what the protected units leave).

    The provider has that prefix cached: everything before the first changed
    message is read from cache, everything after it is written again. So an
    epoch keeps as much of the old prefix as the budget allows and decides
    anew only after it. Returns the settled unit actions and the index of the
    first original message after the settled prefix.
    """
    settled: dict[int, Action] = {}
    end = 0
    if boundary <= 0:
        return settled, end
    for u in conv.units:
        if u.stop > boundary:
            break
        if u.index in protected:  # the system prompt and the goal: kept as before anyway
            end = u.stop
            continue
        act = forced.get(u.index, KEPT)
        cost = u.tokens if act == KEPT else masked_cost.get(u.index, 0) if act == MASKED else 0
        if cost > room:
            break
        room -= cost
        settled[u.index] = act
        end = u.stop
    return settled, end
