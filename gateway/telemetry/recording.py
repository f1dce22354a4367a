"""Moving the metrics of one request, consistently, with bounded labels.

::

    recorder = RequestRecorder(metrics, LabelBounds(orgs=["acme", "default"], models=settings.models))
    recorder.record(RequestFigures(org="acme", model="gpt-4o-mini", outcome=Outcome.PRUNED,
                                   original_tokens=900, forwarded_tokens=400, completion_tokens=20,
                                   savings=record, unit_actions={"kept": 5, "dropped": 3},
                                   upstream_s=0.4, overhead_s=0.003))
    recorder.refused(BudgetExceeded(...), org="acme", model="gpt-4o-mini")   # never reached upstream
    recorder.totals.of("acme")                                              # this replica's savings

Rules:

- ``sieve_requests_total`` always moves by one.
- Token counters (original, forwarded, completion) move only for requests
  that reached the upstream (every outcome except ``client_error``,
  ``budget_rejected``, ``fail_closed``, ``unauthorized`` and
  ``internal_error``), and original and forwarded always move together, so
  the reduction ratio ``1 − forwarded/original`` never counts a rejected
  request as a saving.
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

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from gateway.errors import BodyTooLarge, BudgetExceeded, Forbidden, InvalidRequest, SieveError, StoreUnavailable, \
    TooManyAuthFailures, Unauthorized
from gateway.pruning import Cohort
from gateway.telemetry.signals import ConversationSignals
from gateway.telemetry.metrics import OUTCOMES, UNIT_ACTIONS, InputTransformation, Metrics, Outcome
from gateway.wire import Scope
from gateway.telemetry.savings import SavingsRecord, ShadowSavings

__all__ = ["OTHER", "NOT_FORWARDED", "CohortFigures", "LabelBounds", "RequestFigures", "RequestRecorder",
           "record_request", "transformation_reasons"]

OTHER = "other"
_UNIT_ACTION_SET = frozenset(UNIT_ACTIONS)
_TRANSFORMATION_REASONS = frozenset(r.value for r in InputTransformation)
NOT_FORWARDED = frozenset({Outcome.CLIENT_ERROR, Outcome.BUDGET_REJECTED, Outcome.FAIL_CLOSED,
                           Outcome.UNAUTHORIZED, Outcome.INTERNAL_ERROR})
# A request refused before it reached the provider is counted by what refused it.
REFUSALS: tuple[tuple[type[SieveError], Outcome], ...] = (
    (BudgetExceeded, Outcome.BUDGET_REJECTED), (Unauthorized, Outcome.UNAUTHORIZED),
    (TooManyAuthFailures, Outcome.UNAUTHORIZED),
    (InvalidRequest, Outcome.CLIENT_ERROR), (BodyTooLarge, Outcome.CLIENT_ERROR), (Forbidden, Outcome.CLIENT_ERROR),
    (StoreUnavailable, Outcome.FAIL_CLOSED),
)


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


@dataclass(slots=True)
class CohortFigures:
    """What a forwarded request adds to its cohort's comparison (``sieve_cohort_*``, steps,
    tool calls) and, under a shadow policy, what its decision would have saved."""

    cohort: Cohort
    signals: ConversationSignals = field(default_factory=ConversationSignals)
    billed_prompt_tokens: int = 0   # the provider's usage (0 without one)
    cached_tokens: int = 0
    billed_usd: float | None = None  # None: not priced
    shadow: ShadowSavings | None = None


@dataclass(slots=True)
class RequestFigures:
    """What one request moves on the metrics (label values unbounded yet)."""

    org: str | None
    model: str | None
    outcome: Outcome
    original_tokens: int = 0
    forwarded_tokens: int = 0
    completion_tokens: int = 0
    savings: SavingsRecord | None = None
    unit_actions: Mapping[str, int] = field(default_factory=dict)
    prune_s: float | None = None
    scorer_s: float | None = None
    upstream_s: float | None = None
    overhead_s: float | None = None
    cohort: CohortFigures | None = None  # a forwarded request's cohort figures
    route: str | None = None  # the forwarding route's template (sieve_route_requests_total)
    # Preserved reasoning (gateway.exchange.reasoning_guard): what Sieve's rewrite invalidated per scope, and the
    # provider's input_transformations per reason (both by that route template too).
    reasoning_invalidated: Mapping[str, int] = field(default_factory=dict)
    input_transformations: Mapping[str, int] = field(default_factory=dict)


class RequestRecorder:
    """Moves the metrics of each request, and keeps this replica's per-org totals
    (``/admin/savings``), under the same bounded org label."""

    def __init__(self, metrics: Metrics, bounds: LabelBounds) -> None:
        self.metrics = metrics
        self.bounds = bounds
        self.totals = OrgTotals()

    def record(self, figures: RequestFigures) -> None:
        record_request(self.metrics, self.bounds, figures)
        self.totals.add(self.bounds.org(figures.org), figures)

    def refused(self, exc: SieveError, org: str | None, model: str | None, route: str | None = None) -> None:
        """A request refused before it reached the provider (an upstream failure is recorded
        with its timings by the accountant instead)."""
        outcome = next((label for cls, label in REFUSALS if isinstance(exc, cls)), None)
        if outcome is not None:
            self.record(RequestFigures(org or "unknown", model, outcome, route=route))

    def passed_through(self, org: str | None, route: str, outcome: Outcome) -> None:
        """A request on a pass-through route (``route``: its path template, a closed set)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        tally = self.metrics.tally
        with tally.lock:
            tally.count(self.metrics.passthrough_requests, (self.bounds.org(org), route, str(outcome)), 1)

    def failed(self, org: str | None, model: str | None, route: str | None = None) -> None:
        """A request that met a bug in the gateway (answered with a 500)."""
        self.record(RequestFigures(org or "unknown", model, Outcome.INTERNAL_ERROR, route=route))


def record_request(metrics: Metrics, bounds: LabelBounds, figures: RequestFigures) -> None:
    """Move every metric one request touches (rules in the module docstring), through the
    tally (``gateway.telemetry.tally``: one lock for the request, one call a series)."""
    outcome = figures.outcome
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
    if not _UNIT_ACTION_SET.issuperset(figures.unit_actions):
        unknown = sorted(set(figures.unit_actions) - _UNIT_ACTION_SET)
        raise ValueError(f"unknown unit action(s) {', '.join(unknown)}; expected {', '.join(UNIT_ACTIONS)}")
    # Label values as plain strings: a tally key with an enum member would hash otherwise
    # than the same value as a string (its series is the same).
    forwarded = outcome not in NOT_FORWARDED
    org, model, outcome = bounds.org(figures.org), bounds.model(figures.model), str(outcome)
    cohort = None
    if figures.cohort is not None and forwarded:
        cohort = str(Cohort(figures.cohort.cohort))  # a label outside the vocabulary is a bug: ValueError
    m, tally = metrics, metrics.tally
    count, observe = tally.count, tally.observe
    with tally.lock:
        count(m.requests, (org, model, outcome), 1)
        if figures.route is not None:
            count(m.route_requests, (org, figures.route, outcome), 1)
        if forwarded:
            count(m.prompt_tokens_original, (org, model), figures.original_tokens)
            count(m.prompt_tokens_forwarded, (org, model), figures.forwarded_tokens)
            count(m.completion_tokens, (org, model), figures.completion_tokens)
        for action, n in figures.unit_actions.items():
            count(m.units, (org, action), n)
        if figures.savings is not None:
            _record_costs(m, org, model, figures.savings)
        for histogram, seconds in ((m.prune_seconds, figures.prune_s), (m.scorer_seconds, figures.scorer_s),
                                   (m.upstream_seconds, figures.upstream_s),
                                   (m.overhead_seconds, figures.overhead_s)):
            if seconds is not None:
                observe(histogram, (), max(seconds, 0.0))
        if cohort is not None:
            _record_cohort(m, org, model, cohort, outcome, figures)
        if figures.reasoning_invalidated or figures.input_transformations:
            _record_reasoning(m, org, figures)


def _record_reasoning(metrics: Metrics, org: str, figures: RequestFigures) -> None:
    route = figures.route or ""
    for scope, n in figures.reasoning_invalidated.items():
        if n > 0:  # a label outside the vocabulary is a bug: ValueError
            metrics.tally.count(metrics.reasoning_invalidated, (org, route, str(Scope(scope))), n)
    for reason, n in figures.input_transformations.items():
        if n > 0:
            metrics.tally.count(metrics.input_transformations, (org, route, str(InputTransformation(reason))), n)


def transformation_reasons(entries: Iterable[Any]) -> dict[str, int]:
    """The provider's ``input_transformations`` entries counted by reason (one not in the
    vocabulary as ``other``: the label stays bounded)."""
    counts: dict[str, int] = {}
    for entry in entries:
        reason = entry.get("reason") if isinstance(entry, dict) else None
        label = reason if reason in _TRANSFORMATION_REASONS else InputTransformation.OTHER.value
        counts[label] = counts.get(label, 0) + 1
    return counts


def _record_cohort(metrics: Metrics, org: str, model: str, cohort: str, outcome: str,
                   figures: RequestFigures) -> None:
    c = figures.cohort
    assert c is not None
    m, count = metrics, metrics.tally.count
    count(m.cohort_requests, (org, cohort, outcome), 1)
    for kind, tokens in (("original", figures.original_tokens), ("forwarded", figures.forwarded_tokens),
                         ("billed", c.billed_prompt_tokens), ("cached", c.cached_tokens)):
        count(m.cohort_prompt_tokens, (org, cohort, kind), tokens)
    if c.billed_usd is not None:
        count(m.cohort_cost_usd, (org, cohort), c.billed_usd)
    m.tally.observe(m.conversation_steps, (org, cohort), c.signals.steps)
    count(m.tool_calls, (org, cohort), c.signals.tool_calls)
    count(m.repeat_tool_calls, (org, cohort), c.signals.repeated_tool_calls)
    shadow = c.shadow
    if shadow is not None:
        count(m.shadow_prompt_tokens, (org, model), shadow.forwarded_tokens)
        if shadow.priced:
            count(m.shadow_cost_usd, (org, model), shadow.would_be_usd)
        if shadow.prefix_changed:
            count(m.shadow_prefix_changes, (org,), 1)


def _record_costs(metrics: Metrics, org: str, model: str, savings: SavingsRecord) -> None:
    m, count = metrics, metrics.tally.count
    if savings.priced:
        count(m.cost_usd, (org, model, "counterfactual"), savings.counterfactual_usd)
        count(m.cost_usd, (org, model, "actual"), savings.actual_usd)
    else:
        count(m.unpriced, (model,), 1)
    count(m.cost_usd, (org, model, "scorer"), savings.scorer_usd)


@dataclass(slots=True)
class _Totals:
    requests: int = 0
    prompt_original: int = 0
    prompt_forwarded: int = 0
    completion: int = 0
    counterfactual_usd: float = 0.0
    actual_usd: float = 0.0
    scorer_usd: float = 0.0


class OrgTotals:
    """This replica's running totals per org: what ``GET /admin/savings/{org}`` reports.

    Kept beside the Prometheus counters, under the same rules and the same bounded
    org label, so the admin figures equal what a scrape of this replica shows; per
    replica and from zero at start, as the counters are (Prometheus sums the pods).
    """

    def __init__(self) -> None:
        self._by_org: dict[str, _Totals] = {}

    def add(self, org: str, figures: RequestFigures) -> None:
        t = self._by_org.get(org)
        if t is None:
            t = self._by_org[org] = _Totals()
        t.requests += 1
        if figures.outcome not in NOT_FORWARDED:
            t.prompt_original += max(figures.original_tokens, 0)
            t.prompt_forwarded += max(figures.forwarded_tokens, 0)
            t.completion += max(figures.completion_tokens, 0)
        savings = figures.savings
        if savings is not None:
            if savings.priced:
                t.counterfactual_usd += max(savings.counterfactual_usd, 0.0)
                t.actual_usd += max(savings.actual_usd, 0.0)
            t.scorer_usd += max(savings.scorer_usd, 0.0)

    def of(self, org: str) -> dict[str, Any]:
        t = self._by_org.get(org) or _Totals()
        return {
            "scope": "replica",
            "usd": {"counterfactual": t.counterfactual_usd, "actual": t.actual_usd, "scorer": t.scorer_usd,
                    "net_saving": t.counterfactual_usd - t.actual_usd - t.scorer_usd},
            "tokens": {"prompt_original": t.prompt_original, "prompt_forwarded": t.prompt_forwarded,
                       "prompt_saved": t.prompt_original - t.prompt_forwarded, "completion": t.completion},
            "requests": t.requests,
        }
