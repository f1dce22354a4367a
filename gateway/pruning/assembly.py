"""The forwarded messages, assembled from unit actions, masks and markers; and their token count.

Assembly also writes the frozen plan of the decision: which original messages
are masked (and their masked text, as forwarded) or dropped, and which markers
go where, so the next requests of the conversation replay the same bytes::

    done = assemble(conv, actions, protection, markers, reminder=None, epoch=1, counter=counter)
    done.forwarded, done.target_rule_tokens, done.plan
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.compression import MASKED_PREFIX, is_maskable
from gateway.pruning.conversation import Conversation
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.protection import Protection
from gateway.pruning.scoring import UnitScore
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.vocabulary import DROPPED, KEPT, MASKED, Action


@dataclass(slots=True)
class Assembled:
    forwarded: list[dict[str, Any]]
    # Per forwarded message, the original message it is (or masks), -1 for an inserted
    # marker or reminder: counting reuses the originals' known counts.
    sources: list[int]
    plan: FrozenPlan
    target_rule_tokens: int  # of the forwarded messages
    # What the refs add that the expander puts in the markers (policy ``expand_tool``;
    # ``gateway.pruning.marker_refs``): not in the messages, held under the target all the same.
    refs_tokens: int = 0

    @property
    def held(self) -> int:
        """Tokens under the target rule as forwarded: the messages and the markers' refs."""
        return self.target_rule_tokens + self.refs_tokens


def assemble(conv: Conversation, actions: Mapping[int, Action], protection: Protection,
             markers: Mapping[int, dict[str, Any]], reminder: dict[str, Any] | None, epoch: int,
             counter: TokenCounter) -> Assembled:
    """The forwarded messages: each unit as its action says (masked tool results in the
    forms ``protection`` holds, the squeezed current step's newest result whole), each
    marker before the message it is placed at, and the reminder (if any, and only when
    something was removed) before the protected window."""
    out: list[dict[str, Any]] = []
    sources: list[int] = []
    plan = FrozenPlan(list(conv.fingerprints), decided=len(conv.messages), epoch=epoch)
    removed = bool(markers) or any(a == MASKED for a in actions.values())
    window = protection.window
    reminder_at = conv.units[window[0]].start if (reminder and removed and window) else None
    whole = protection.whole
    for u in conv.units:
        marker = markers.get(u.start)
        if marker is not None:
            out.append(marker), sources.append(-1), plan.inserts.append((u.start, marker))
        if u.start == reminder_at:
            out.append(reminder), sources.append(-1), plan.inserts.append((u.start, reminder))
        act = actions.get(u.index, KEPT)
        for j in u.indices:
            m = conv.messages[j]
            if act == DROPPED:
                plan.actions[j] = DROPPED
                continue
            if act == MASKED and is_maskable(m) and j not in whole:
                plan.actions[j] = MASKED
                m = protection.masked_forms[j]
                plan.masked[j] = m["content"]
            out.append(m)
            sources.append(j)
    return Assembled(out, sources, plan, count_forwarded(out, sources, conv.tokens, counter.count_message))


def count_forwarded(forwarded: Sequence[Mapping[str, Any]], sources: Sequence[int],
                    tokens: Sequence[int], count: Callable[[Mapping[str, Any]], int]) -> int:
    """Tokens of the forwarded messages: the known count (``tokens``) of each original
    message forwarded as it is, ``count`` for masked ones and inserted markers."""
    total = 0
    for m, src in zip(forwarded, sources):
        if src >= 0 and not _is_masked(m):
            total += tokens[src]
        else:
            total += count(m)
    return total


def count_forwarded_both(forwarded: Sequence[Mapping[str, Any]], sources: Sequence[int],
                         tokens: Sequence[int], model_tokens: Sequence[int],
                         counts: Callable[[Mapping[str, Any]], tuple[int, int]]) -> tuple[int, int]:
    """``count_forwarded`` under the target rule and in the model's encoding, in one pass: a
    masked message or a marker has its text read once for both (``counts``)."""
    rule = model = 0
    for m, src in zip(forwarded, sources):
        if src >= 0 and not _is_masked(m):
            rule += tokens[src]
            model += model_tokens[src]
        else:
            both = counts(m)
            rule += both[0]
            model += both[1]
    return rule, model


def _is_masked(m: Mapping[str, Any]) -> bool:
    c = m.get("content")
    return isinstance(c, str) and c.startswith(MASKED_PREFIX)


def message_actions(conv: Conversation, protection: Protection, actions: Mapping[int, Action],
                    scores: Mapping[int, UnitScore]) -> tuple[list[Action], list[UnitScore | None]]:
    """Each original message's action and score, as a report shows them: its unit's (a pinned
    unit's, the pin's). A masked unit's call and the result it leaves whole count as kept,
    as ``assemble`` forwards them."""
    whole = protection.whole
    per_message = [KEPT] * len(conv.messages)
    per_message_scores: list[UnitScore | None] = [None] * len(conv.messages)
    for u in conv.units:
        act = actions.get(u.index, KEPT)
        score = scores.get(u.index) or _pin_score(u.index, protection.hard_pins, protection.in_window)
        for j in u.indices:
            per_message_scores[j] = score
            if act == DROPPED:
                per_message[j] = DROPPED
            elif act == MASKED and conv.messages[j].get("role") in ("tool", "function") and j not in whole:
                per_message[j] = MASKED
    return per_message, per_message_scores


def _pin_score(index: int, hard_pins: set[int], window: set[int]) -> UnitScore:
    if index in hard_pins:
        return UnitScore(5, 1.0, "pinned: system, goal or current request")
    if index in window:
        return UnitScore(5, 1.0, "pinned: recent window")
    return UnitScore(3, 0.0, "kept")
