"""How much of a provider's usage figure a budget charges: what it billed, under a sanity ceiling.

Pure (no I/O). A settle charges the usage the provider reports: the provider
bills what it bills, including what the request body does not show (a stored
conversation it continues, a document it fetched, a tool it ran), so anything
less would let those requests run nearly free. Only a figure no request can
reach is refused: one broken report must not exhaust a budget for the month
(1e20 tokens), nor overflow Redis's counters or the metrics::

    charge = bounded_usage(reported_total, estimate=hold.estimate, ceiling=settings.max_billed_tokens)
    if charge.anomaly is not None:
        metrics.usage_anomalies.labels(reason=charge.anomaly).inc()

* unreadable (``None``: a token field negative or not a number, see
  ``usage_is_readable``) -> the reservation's estimate, ``UsageAnomaly.JUNK``;
* above ``ceiling`` (``SIEVE_MAX_BILLED_TOKENS``, a hard sanity bound per request,
  far above any real bill) -> the ceiling, ``UsageAnomaly.CEILING``;
* anything else -> as reported, above the reservation or not.

``bounded_figures`` applies the same ceiling to a parsed ``Usage``, so that the
savings, the cost counters and the audit line never carry a junk figure either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import Any

from gateway.billing import MAX_TOKENS
from gateway.telemetry.metrics import UsageAnomaly
from gateway.telemetry.usage import Usage

__all__ = ["Charge", "DEFAULT_CEILING", "bounded_figures", "bounded_usage", "usage_is_readable"]

# Far above any one request's bill (a 2M-token context, its output and a few tool rounds),
# far below what breaks a counter.
DEFAULT_CEILING = 10_000_000
# Every spelling of a token count the usage parser adds up (gateway.telemetry.usage).
_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                 "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_cache_hit_tokens")


@dataclass(frozen=True, slots=True)
class Charge:
    """What a settle charges, and why not the figure reported (None: as reported)."""

    tokens: int
    reported: int | None
    anomaly: UsageAnomaly | None = None


def bounded_usage(reported: int | None, estimate: int, ceiling: int = DEFAULT_CEILING) -> Charge:
    """The tokens to charge for a reported total (``None``: unreadable)."""
    ceiling = min(max(ceiling, 1), MAX_TOKENS)
    if reported is None or reported < 0:
        return Charge(min(estimate, ceiling), reported, UsageAnomaly.JUNK)
    if reported > ceiling:
        return Charge(ceiling, reported, UsageAnomaly.CEILING)
    return Charge(reported, reported)


def bounded_figures(usage: Usage, ceiling: int = DEFAULT_CEILING) -> Usage:
    """``usage`` with its total held under ``ceiling``: every part scaled alike, so the cached
    and written shares stay what they were."""
    total = usage.prompt_tokens + usage.completion_tokens
    if total <= ceiling:
        return usage
    scale = ceiling / total
    return replace(usage, **{name: int(getattr(usage, name) * scale) for name in (
        "prompt_tokens", "completion_tokens", "cached_read_tokens", "cache_write_tokens",
        "cache_write_1h_tokens", "cache_write_12h_tokens")})


def usage_is_readable(raw: Any) -> bool:
    """Whether every token count a usage block carries is a non-negative integer (JSON's 12.0 is 12).

    A usage parser reads junk as 0, which would charge nothing for a request the
    provider billed; this tells the budget to charge the estimate instead."""
    if not (isinstance(raw, dict) or isinstance(raw, Mapping)):  # a dict without the ABC's check
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
