"""Pinned expansion exchanges as the pipeline sees them: which go back, held under the target.

With the policy's ``expand_tool`` on, a ``sieve_expand`` call Sieve answered stays in the
conversation's later requests (``gateway.expand``): the call and its result go back
after the client turn they followed. They are message text the provider reads, so the
target holds them like the markers' refs, and the pipeline says which go back with each
decision (``PruneResult.pinned``); the expander puts back those, and no others.

A pin goes back when

* every view message it needs is kept: the client turns around its place (anything
  else would put it beside content the model did not see when it asked);
* it fits: the forward with it stays within the target;
* it fits the room an epoch frees (the target above the low-water mark), counted with
  the pins before it. A pin larger than that could only ever go back beside a
  conversation cut shorter than an epoch cuts it; counted against a replay, it would
  send every request to a new epoch, throwing the provider's cached prefix away each
  time. Left out, its content stays one ``sieve_expand`` call away (the refs stay in
  the markers).

Pins are taken in the order of their places (oldest first: those further in the cached
prefix). A frozen replay whose messages leave the pins that fit this room too little of
the target is decided anew (``gateway.pruning.pipeline``): the epoch makes the room,
rather than the model losing content it asked for.

The pipeline knows the chat view only; the expander says which view messages a pin needs
kept (in the request's own format) and how large it is (its messages counted as the
view counts messages). The count is a bound: a pin the format's writer did not keep the
place of stays out, and its room is given back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from gateway.pruning.vocabulary import KEPT, Action


@dataclass(frozen=True, slots=True)
class PinnedRoom:
    """One pinned exchange: its index in the conversation's record, the view messages that must
    be kept for it to go back in, and its size under the target rule and in the model's encoding."""

    pin: int
    needs: tuple[int, ...]
    tokens: int
    model_tokens: int


def pin_budget(target_tokens: int, low_water_ratio: float) -> int:
    """The most of the target pinned exchanges take together: what an epoch frees."""
    return target_tokens - math.ceil(target_tokens * low_water_ratio)


def placed(pins: Sequence[PinnedRoom], actions: Sequence[Action], budget: int) -> list[PinnedRoom]:
    """The pins whose needed messages ``actions`` keep, in the order of their places, as many
    as fit ``budget`` together (a pin that does not fit is passed over, the later ones tried)."""
    out, used = [], 0
    for pin in sorted(pins, key=lambda p: (min(p.needs, default=0), p.pin)):
        if not pin.needs or not all(0 <= j < len(actions) and actions[j] == KEPT for j in pin.needs):
            continue
        if used + pin.tokens <= budget:
            out.append(pin)
            used += pin.tokens
    return out


__all__ = ["PinnedRoom", "pin_budget", "placed"]
