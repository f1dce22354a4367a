"""Moving the metrics of one request, consistently, with bounded labels.

::

    bounds = LabelBounds(orgs=["acme", "default"], models=settings.models)
    record_request(metrics, bounds=bounds, org="acme", model="gpt-4o-mini", outcome="pruned",
                   original_tokens=900, forwarded_tokens=400, completion_tokens=20,
                   savings=record, unit_actions={"kept": 5, "dropped": 3},
                   prune_s=0.002, scorer_s=None, upstream_s=0.4, overhead_s=0.003)

Rules:

- ``sieve_requests_total`` always moves by one.
- Token counters (original, forwarded, completion) move only for requests
  that reached the upstream (every outcome except ``client_error``,
  ``budget_rejected``, ``fail_closed`` and ``unauthorized``), and original and forwarded
  always move together, so the reduction ratio
  ``1 − forwarded/original`` never counts a rejected request as a saving.
- Cost counters: ``counterfactual`` and ``actual`` move only for a priced
  record; ``scorer`` moves whenever a record is given (those dollars were
  spent even when the request could not be priced). An unpriced record adds
  one to ``sieve_unpriced_requests_total``. Net saving on a dashboard is
  ``counterfactual − actual − scorer``, the same figure as ``net_usd``.
- Histograms observe the timings that are not ``None`` (a request without a
  scorer call passes ``scorer_s=None`` rather than 0).
- Unknown outcomes and unit actions raise ``ValueError``: they are
  programming errors, and an unbounded label set is worse than a loud bug.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from gateway.telemetry.metrics import OUTCOMES, UNIT_ACTIONS, Metrics
from gateway.telemetry.savings import SavingsRecord

__all__ = ["OTHER", "NOT_FORWARDED", "LabelBounds", "record_request"]

OTHER = "other"
NOT_FORWARDED = frozenset({"client_error", "budget_rejected", "fail_closed", "unauthorized"})


class LabelBounds:
    """Maps org and model values outside the configured sets to ``"other"``.

    ``dynamic_limit`` admits that many further distinct values per label on
    first sight (for a gateway that routes any model to a default upstream
    and so has no model list); past it, ``"other"``. Cardinality stays at
    most ``len(known) + dynamic_limit`` either way.
    """

    def __init__(self, orgs: Iterable[str] = (), models: Iterable[str] = (), *, dynamic_limit: int = 0) -> None:
        self._orgs = _Bounded(orgs, dynamic_limit)
        self._models = _Bounded(models, dynamic_limit)

    def org(self, value: str | None) -> str:
        return self._orgs.label(value)

    def model(self, value: str | None) -> str:
        return self._models.label(value)


class _Bounded:
    def __init__(self, known: Iterable[str], dynamic_limit: int) -> None:
        self._known = set(known)
        self._room = max(int(dynamic_limit), 0)

    def label(self, value: str | None) -> str:
        if not value:
            return OTHER
        if value in self._known:
            return value
        if self._room > 0:
            self._room -= 1
            self._known.add(value)
            return value
        return OTHER


def record_request(
    metrics: Metrics,
    *,
    bounds: LabelBounds,
    org: str | None,
    model: str | None,
    outcome: str,
    original_tokens: int = 0,
    forwarded_tokens: int = 0,
    completion_tokens: int = 0,
    savings: SavingsRecord | None = None,
    unit_actions: Mapping[str, int] | None = None,
    prune_s: float | None = None,
    scorer_s: float | None = None,
    upstream_s: float | None = None,
    overhead_s: float | None = None,
) -> None:
    """Move every metric one request touches (rules in the module docstring)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
    unit_actions = unit_actions or {}
    unknown = sorted(set(unit_actions) - set(UNIT_ACTIONS))
    if unknown:
        raise ValueError(f"unknown unit action(s) {', '.join(unknown)}; expected {', '.join(UNIT_ACTIONS)}")
    org_l, model_l = bounds.org(org), bounds.model(model)

    metrics.requests.labels(org=org_l, model=model_l, outcome=outcome).inc()
    if outcome not in NOT_FORWARDED:
        metrics.prompt_tokens_original.labels(org=org_l, model=model_l).inc(max(original_tokens, 0))
        metrics.prompt_tokens_forwarded.labels(org=org_l, model=model_l).inc(max(forwarded_tokens, 0))
        metrics.completion_tokens.labels(org=org_l, model=model_l).inc(max(completion_tokens, 0))
    for action, count in unit_actions.items():
        metrics.units.labels(org=org_l, action=action).inc(max(count, 0))

    if savings is not None:
        if savings.priced:
            metrics.cost_usd.labels(org=org_l, model=model_l, kind="counterfactual").inc(
                max(savings.counterfactual_usd, 0.0))
            metrics.cost_usd.labels(org=org_l, model=model_l, kind="actual").inc(max(savings.actual_usd, 0.0))
        else:
            metrics.unpriced.labels(model=model_l).inc()
        metrics.cost_usd.labels(org=org_l, model=model_l, kind="scorer").inc(max(savings.scorer_usd, 0.0))

    for histogram, seconds in ((metrics.prune_seconds, prune_s), (metrics.scorer_seconds, scorer_s),
                               (metrics.upstream_seconds, upstream_s), (metrics.overhead_seconds, overhead_s)):
        if seconds is not None:
            histogram.observe(max(seconds, 0.0))
