"""Where a request stands in its conversation's turns: at a turn boundary, or inside a tool loop.

A user message opens a turn (one right after tool results is part of the turn
that carries them: ``conversation.opens_turn``); the assistant's tool calls and
their results after it are that turn's loop, and the newest user message is the task the loop works
on. Providers bind a model's reasoning to the exact history before it (Anthropic
thinking blocks, OpenAI reasoning items: ARCHITECTURE.md 2a), so an epoch that
rewrites history in the middle of a loop throws away the reasoning of every step
the loop took so far; at a turn boundary the loop is empty and an epoch costs the
reasoning of earlier turns only. Hence (``gateway.pruning.pipeline``):

* inside a loop, a conversation's decisions are replayed for as long as the
  target holds them: an epoch there is forced by the target alone;
* at a turn boundary, an epoch opens before the loop to come would cross the
  target (``epoch_due``): when the request, replayed, leaves less room under the
  target than the conversation's loops grew by (``expected_growth``: the largest
  turn so far; a conversation's big loops are few, but they hold most of its steps,
  so the estimate is sized for them) and is well above the low-water mark (an epoch
  that would free little buys the loop little and costs a rewrite). The loop then
  starts from the low-water mark; one larger than what that leaves still meets an
  epoch of its own, which keeps the turns before the loop and sheds the loop's
  newest steps (``gateway.pruning.decision``): its older steps keep their reasoning.

The growth is read from the request's own history, turn by turn (what came after
each user message before the next one), so it needs no state and fits any
client: a chat without tools grows by one answer a turn, an agent by its loop::

    turn = turn_of(messages, tokens)
    turn.boundary, turn.task, turn.expected_growth
    epoch_due(turn, tokens=3800, target=4000, low_water=2700)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gateway.pruning.conversation import opens_turn

# At a boundary, an early epoch needs the request at least this far from the low-water mark to
# the target: below it, the loop to come is let run (and may force an epoch of its own).
ABOVE_LOW_WATER = 0.25
# An agent that takes more tool steps than this per user message works alone through long
# loops (a coding agent: one task, then tens of steps).
LOOP_STEPS_PER_USER_MESSAGE = 4


@dataclass(frozen=True, slots=True)
class Turn:
    boundary: bool        # the request ends with a user message: a new turn opens, its loop is empty
    task: int | None      # index of the newest user message: the task the current loop works on
    expected_growth: int  # tokens the coming loop is expected to add: the largest earlier turn (0: none)


def turn_of(messages: Sequence[Mapping[str, Any]], tokens: Sequence[int]) -> Turn:
    """The turn ``messages`` (with their ``tokens``) stand in."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user" and opens_turn(messages, i)]
    if not users:
        return Turn(False, None, 0)
    task = users[-1]
    growths = [sum(tokens[a + 1:b]) for a, b in zip(users, users[1:])]
    return Turn(task == len(messages) - 1, task, max(growths, default=0))


def works_alone(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the agent of ``messages`` works alone through long tool loops: more than
    LOOP_STEPS_PER_USER_MESSAGE tool steps per user message. A user message there is rare (the
    task, an interruption, a correction of the agent's last answer); in a dialogue one comes
    every few steps."""
    steps = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    users = sum(1 for m in messages if m.get("role") == "user")
    return steps > LOOP_STEPS_PER_USER_MESSAGE * users


def epoch_due(turn: Turn, tokens: int, target: int, low_water: int) -> bool:
    """Whether a request of ``tokens`` (as it would be forwarded) opens an epoch at its turn
    boundary, before the loop to come crosses ``target`` (module docstring)."""
    if not turn.boundary or turn.expected_growth <= 0 or tokens + turn.expected_growth <= target:
        return False
    return tokens > low_water + ABOVE_LOW_WATER * (target - low_water)


__all__ = ["ABOVE_LOW_WATER", "LOOP_STEPS_PER_USER_MESSAGE", "Turn", "epoch_due", "turn_of", "works_alone"]
