"""How much of a provider's usage figure a budget charges: bounded by what the request could cost.

Pure (no I/O). A settle charges the usage the provider reports, and one broken
figure must not corrupt a budget (1e20 tokens would exhaust it for the month,
and overflows Redis's counters)::

    tokens, anomaly = bounded_usage(reported_total, estimate=reservation.tokens)
    if anomaly is not None:
        metrics.usage_anomalies.labels(reason=anomaly).inc()

* unreadable (``None``: a token field negative or not a number, see
  ``usage_is_readable``) -> the reservation's estimate, ``UsageAnomaly.JUNK``;
* more than ``ABSURD_FACTOR`` x the estimate (or than any store can count,
  ``MAX_TOKENS``) -> the estimate, ``UsageAnomaly.ABSURD``.
  The estimate already counts everything the request can be billed
  (``gateway.reservation_estimate``), so a figure that far above it is a broken
  report, not a bill; a figure between the two (a tokenizer counting more than
  the estimate's) is charged as reported.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from gateway.budgets import MAX_TOKENS
from gateway.telemetry.metrics import UsageAnomaly

__all__ = ["ABSURD_FACTOR", "bounded_usage", "usage_is_readable"]

ABSURD_FACTOR = 4
# Every spelling of a token count the usage parser adds up (gateway.telemetry.usage).
_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                 "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_cache_hit_tokens")


def bounded_usage(reported: int | None, estimate: int) -> tuple[int, UsageAnomaly | None]:
    """The tokens to charge for a reported total (``None``: unreadable), and why not as reported."""
    if reported is None or reported < 0:
        return estimate, UsageAnomaly.JUNK
    if reported > min(ABSURD_FACTOR * max(estimate, 1), MAX_TOKENS):
        return estimate, UsageAnomaly.ABSURD
    return reported, None


def usage_is_readable(raw: Any) -> bool:
    """Whether every token count a usage block carries is a non-negative integer (JSON's 12.0 is 12).

    A usage parser reads junk as 0, which would charge nothing for a request the
    provider billed; this tells the budget to charge the estimate instead."""
    if not isinstance(raw, Mapping):
        return True  # no usage block at all: the caller estimates from the answer
    for name in _TOKEN_FIELDS:
        if name in raw and raw[name] is not None and not _count(raw[name]):
            return False
    return True


def _count(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer() and value >= 0
    return isinstance(value, int) and value >= 0
