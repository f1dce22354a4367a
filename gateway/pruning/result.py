"""What one prune decided: the request to forward, and the report of every decision.

Typed numbers only; ratios and dollars are derived where they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.scoring import UnitScore
from gateway.pruning.vocabulary import KEPT, MASKED, Action, Mode, Strategy


@dataclass(slots=True)
class PruneResult:
    request: dict[str, Any]
    mode: Mode
    strategy: Strategy
    original_tokens: int   # in the model's own encoding: what is reported and billed
    forwarded_tokens: int  # likewise (the decision itself runs on target_rule_tokens' count)
    target_tokens: int     # the target in force: the request's own, else the policy's
    message_actions: list[Action]       # per original message
    message_scores: list[UnitScore | None]
    state: FrozenPlan
    problems: list[str] = field(default_factory=list)
    goal_source: str = "derived"
    scored_units: int = 0
    epoch: int = 0
    message_tokens: list[int] = field(default_factory=list)  # per original message, model encoding
    target_rule_tokens: int = 0  # the forwarded messages under the target rule: what x-sieve-target-tokens bounds
    # Per forwarded message, the original message it is (or masks), -1 for an inserted
    # marker: the forwarded count reuses the originals' known counts.
    sources: list[int] = field(default_factory=list, repr=False)
    # Sieve's own tool definition (``sieve_expand``, policy ``expand_tool``), model encoding:
    # a tool schema like the client's, so not in forwarded_tokens nor under the target,
    # but billed: the savings count it as a cost (``gateway.telemetry.savings``).
    tool_tokens: int = 0
    # The conversation's pinned sieve_expand exchanges that go back with this decision (their
    # indices in its record; ``gateway.pruning.pins``), counted in both token figures above.
    pinned: tuple[int, ...] = ()

    @property
    def changed(self) -> bool:
        """True when the forwarded messages differ from the original ones."""
        return self.request.get("messages") is not None and (
            any(a != KEPT for a in self.message_actions)
            or len(self.request["messages"]) != len(self.message_actions))

    @property
    def saved_tokens(self) -> int:
        return self.original_tokens - self.forwarded_tokens

    def action_counts(self) -> dict[str, int]:
        """Per original message (keyed by the actions' values: JSON and metric labels)."""
        counts = {a.value: 0 for a in Action}
        for a in self.message_actions:
            counts[a] += 1
        return counts

    def unit_action_counts(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Per unit of ``messages`` (the original ones): a tool call and its results
        count once, as dropped if dropped, masked if any result was masked."""
        counts = {a.value: 0 for a in Action}
        current = None
        for m, action in zip(messages, self.message_actions):
            if m.get("role") in ("tool", "function") and current is not None:
                if action == MASKED and current == KEPT:
                    current = MASKED
                continue
            if current is not None:
                counts[current] += 1
            current = action
        if current is not None:
            counts[current] += 1
        return counts

    def report(self) -> dict[str, Any]:
        messages = []
        for i, action in enumerate(self.message_actions):
            s = self.message_scores[i]
            reason = s.reason if s is not None else _mode_reason(self.mode, action)
            messages.append({"index": i, "action": action, "score": s.score if s is not None else None,
                             "reason": reason})
        return {
            "mode": self.mode, "strategy": self.strategy, "epoch": self.epoch,
            "original_tokens": self.original_tokens, "forwarded_tokens": self.forwarded_tokens,
            "saved_tokens": self.saved_tokens, "target_tokens": self.target_tokens,
            "target_rule_tokens": self.target_rule_tokens,
            "messages_in": len(self.message_actions), "messages_out": len(self.request.get("messages", [])),
            "actions": self.action_counts(), "scored_units": self.scored_units,
            "goal_source": self.goal_source, "problems": self.problems, "messages": messages,
        }


_UNCHANGED_REASONS = {Mode.NONE: "strategy none", Mode.UNDER: "below the pruning trigger",
                      Mode.NO_GAIN: "pruning would not make this request smaller"}


def _mode_reason(mode: Mode, action: Action) -> str:
    """Why a message without a score of this prune ended as it did."""
    if mode in _UNCHANGED_REASONS:
        return _UNCHANGED_REASONS[mode]
    return f"{action} by an earlier epoch (frozen)" if action != KEPT else "kept (frozen prefix)"
