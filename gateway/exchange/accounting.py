"""After the response: settle the budget, count the savings, move metrics, write the audit and access lines.

Runs as a deferred task (``gateway.exchange.deferred``), so a client that disconnects
mid-stream still gets its reservation settled or released and its request
counted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson

from gateway.exchange.budget_guard import BudgetGuard, Hold
from gateway.exchange.prune_step import PruneOutcome
from gateway.pruning import Mode, Strategy, TokenCounters
from gateway.telemetry import (AccessLine, AuditEntry, AuditLog, Charge, CohortFigures, MessageDecision,
    OriginalPrompt, Outcome, PriceBook, RequestFigures, RequestRecorder, SavingsRecord, ShadowSavings, Timings,
    Usage, UsageAnomaly, bounded_figures, conversation_signals, expand_rounds_only, log_access, savings_for_request,
    shadow_savings, transformation_reasons, usage_from_provider, usage_is_readable, with_expand_rounds)
from gateway.exchange.reasoning_guard import Guarded
from gateway.wire import ModelCall, SSEUsageTap, WireFormat, chat_answer_chars, input_transformations
from gateway.billing import CLAUDE_TEXT_MARGIN
from gateway.exchange.stored_responses import StoredResponses
from gateway.upstream import ResolvedRoute

log = logging.getLogger("sieve.accounting")


@dataclass(slots=True)
class RequestRecord:
    call: ModelCall
    outcome: PruneOutcome
    route: ResolvedRoute
    hold: Hold | None
    status: int = 0
    error_status: int | None = None
    outcome_label: Outcome | None = None
    upstream_started: float = 0.0
    upstream_s: float = 0.0
    response_usage: dict[str, Any] | None = None
    stream_usage: dict[str, Any] | None = None
    usage_final: bool = False  # the usage read is the provider's bill (not a cut stream's start)
    # Whether the answer arrived whole (a stream to its end, a non-stream body), and what it
    # likely cost in completion tokens, for when the provider reports no usage: a whole
    # body's characters / 4, or a stream's tap (what it streamed, counted at the end).
    completed: bool = False
    completion_estimate: int = 0
    tap: SSEUsageTap | None = None
    disconnected: bool = False
    billed_unread: bool = False  # a success too large to read (502): billed, charged the reservation
    # A Responses answer the provider stores: its id, once known (gateway.exchange.stored_responses), and
    # whether the size recorded with it was the final one.
    stores_response: bool = False
    response_id: str | None = None
    claimed_final: bool = False
    finished_at: float = field(default_factory=time.perf_counter)
    # Characters of a whole answer in the request's format (the estimate without usage).
    answer_chars: Callable[[Mapping[str, Any]], int] = chat_answer_chars
    # Shadow mode (``shadow_pending``): the request went out as it came; its decision runs
    # beside the forward (``shadow_decision``, a task) and is kept in ``shadow`` for the
    # accounting. ``ended``: when the response ended, if the accounting had to wait for the
    # decision after that (the wait is no gateway overhead).
    shadow_pending: bool = False
    shadow_decision: "asyncio.Task[PruneOutcome | None] | None" = None
    shadow: PruneOutcome | None = None
    ended: float | None = None
    # sieve_expand rounds (gateway.expand): the usage of every round before the final
    # one (each settled on its own reservation; ``hold`` is the final round's), and the
    # refs the model asked for.
    expand_usage: list[dict[str, Any]] = field(default_factory=list)
    expand_refs: list[str] = field(default_factory=list)
    # Preserved reasoning (gateway.exchange.reasoning_guard): the forward as the guard left it (what Sieve's
    # rewrite invalidated), and the provider's input_transformations entries, every round's.
    reasoning: Guarded | None = None
    transformations: list[Any] = field(default_factory=list)

    def set_response_body(self, body: bytes) -> None:
        if self.status >= 400:
            return
        self.completed = True
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(payload, dict):
            return
        self.transformations.extend(input_transformations(payload))
        if isinstance(payload.get("usage"), dict):
            self.response_usage = payload["usage"]
            self.usage_final = True
        else:
            self.completion_estimate = self.answer_chars(payload) // 4
        if self.stores_response and isinstance(payload.get("id"), str):
            self.response_id = payload["id"]


class Accountant:
    def __init__(self, recorder: RequestRecorder, prices: PriceBook, budgets: BudgetGuard, audit: AuditLog,
                 counters: TokenCounters | None = None, stored: StoredResponses | None = None) -> None:
        self._recorder = recorder
        self._prices = prices
        self._budgets = budgets
        self._audit = audit
        self._counters = counters or TokenCounters()
        self._stored = stored

    async def finish(self, record: RequestRecord) -> None:
        record.finished_at = record.ended or time.perf_counter()
        usage, charge = await self._settle(record)
        if record.response_id is not None and not record.claimed_final and self._stored is not None:
            await self._stored.record(record.call.identity.org, record.response_id,
                                      chain_tokens(record, self._budgets.ceiling),
                                      record.call.sent_body.get("conversation"))
        self._count(record, usage, charge)

    def waits_for_nothing(self, record: RequestRecord) -> bool:
        """Whether ``finish`` would wait for no I/O: no reservation to settle or release, no
        stored response to record (then ``finish_now`` does the same work in one go)."""
        return record.hold is None and (record.response_id is None or record.claimed_final or self._stored is None)

    def finish_now(self, record: RequestRecord) -> None:
        """``finish`` for a record that waits for nothing (``waits_for_nothing``)."""
        record.finished_at = record.ended or time.perf_counter()
        usage, charge, _ = self._charge(record)
        self._count(record, usage, charge)

    def _count(self, record: RequestRecord, usage: Usage | None, charge: Charge | None) -> None:
        """Savings, metrics, the audit and the access line of a settled request."""
        answered = 200 <= record.status < 400
        ok = answered and record.error_status is None
        earlier = _earlier_rounds(record)
        savings = self._savings(record, usage, earlier) if ok and usage is not None else \
            self._rounds_only(record, earlier)
        label = record.outcome_label or _outcome(record, ok)
        result = record.outcome.result
        overhead_s = record.finished_at - record.call.started - record.upstream_s
        cohort = self._cohort(record, usage if ok else None, savings, earlier)
        # Every round's completion was billed: the sieve_expand rounds before the last too.
        completion = (usage.completion_tokens if usage else 0) + sum(u.completion_tokens for u in earlier)
        self._recorder.record(RequestFigures(
            org=record.call.identity.org, model=record.call.body["model"], outcome=label,
            original_tokens=result.original_tokens, forwarded_tokens=result.forwarded_tokens,
            completion_tokens=completion, savings=savings,
            unit_actions=result.unit_action_counts(record.call.body["messages"]),
            upstream_s=record.upstream_s, overhead_s=max(overhead_s, 0.0),
            cohort=cohort, route=record.call.route or None,
            reasoning_invalidated=_invalidated(record), input_transformations=transformation_reasons(
                record.transformations)))
        self._write_audit(record, label, savings, overhead_s, cohort.shadow, charge)
        call = record.call
        log_access(AccessLine(
            request_id=call.request_id, method="POST", route=call.route,
            status=record.status or record.error_status or 500,
            org=call.identity.org, model=call.body["model"], outcome=label,
            original_tokens=result.original_tokens, forwarded_tokens=result.forwarded_tokens,
            prune_ms=record.outcome.prune_s * 1000, upstream_ms=record.upstream_s * 1000,
            duration_ms=(record.finished_at - call.started) * 1000))

    async def _settle(self, record: RequestRecord) -> tuple[Usage | None, Charge | None]:
        """Settle (or release) the request's reservation at what ``_charge`` says; the usage to
        count, under the sanity ceiling, and what the budget was charged."""
        usage, charge, billed = self._charge(record)
        if not billed:
            await self._budgets.release(record.hold)
        elif charge is not None:
            await self._budgets.settle_charge(record.hold, charge)
        return usage, charge

    def _charge(self, record: RequestRecord) -> tuple[Usage | None, Charge | None, bool]:
        """The usage to count (under the sanity ceiling), what the budget is charged, and
        whether the provider billed the request (if not, the reservation is released). The
        provider's final usage is charged as it is (even when the stream failed after it: it
        was billed); without it, an answer the provider gave (a whole body, a stream it started:
        cut by either side, or never carrying usage) is charged its prompt and what it showed
        of the output (``_unreported``), a success too large to read the reservation; a refusal
        or an error before any output is released."""
        raw = record.stream_usage or record.response_usage
        usage = usage_from_provider(raw)
        if not _billed(record, usage):
            return usage, None, False
        estimate = record.hold.estimate if record.hold is not None else 0
        if record.billed_unread:
            reported: int | None = estimate
        elif not usage_is_readable(raw):
            reported = None
        elif usage is not None and record.usage_final:
            reported = usage.prompt_tokens + usage.completion_tokens
        elif record.hold is not None:
            reported = self._unreported(record, usage)
        else:
            return usage, None, True  # no budget to charge, and no bill to count
        charge = self._budgets.bounded(reported, estimate)
        if usage is not None and charge.anomaly is UsageAnomaly.CEILING:
            usage = bounded_figures(usage, self._budgets.ceiling)
        return usage, charge, True

    def _unreported(self, record: RequestRecord, usage: Usage | None) -> int:
        """A billed answer without its final usage: the prompt (a stream's first usage event, else
        the reservation's estimate of it) and the output it showed (counted in its text)."""
        hold = record.hold
        assert hold is not None
        prompt = usage.prompt_tokens if usage is not None and usage.prompt_tokens else hold.input_estimate
        output = max(usage.completion_tokens if usage is not None else 0, record.completion_estimate)
        if record.tap is not None:
            streamed = record.tap.streamed_tokens(self._counters.for_model(record.call.body["model"]).count_text)
            margin = CLAUDE_TEXT_MARGIN if record.call.format is WireFormat.MESSAGES else 1.0
            output = max(output, math.ceil(streamed * margin))
        return prompt + output

    def _savings(self, record: RequestRecord, usage: Usage, earlier: list[Usage]) -> SavingsRecord:
        result = record.outcome.result
        original = OriginalPrompt(result.message_tokens, result.state.fingerprints,
                                  record.outcome.previous_fingerprints)
        savings = savings_for_request(self._prices, model=record.call.body["model"], original=original,
                                      forwarded_tokens=result.forwarded_tokens, usage=usage,
                                      scorer_usd=_scorer_usd(record), pruned=result.changed,
                                      sieve_tool_tokens=result.tool_tokens)
        if not savings.priced:
            log.info("model %s has no price: savings not counted in dollars", record.call.body["model"])
        if earlier:
            savings = with_expand_rounds(savings, self._prices, earlier[0], earlier, original, usage)
        return savings

    def _rounds_only(self, record: RequestRecord, earlier: list[Usage]) -> SavingsRecord | None:
        """The billed sieve_expand rounds of a request whose last answer has no usage (None
        without rounds: such a request has no cost to count)."""
        if not earlier:
            return None
        result = record.outcome.result
        return expand_rounds_only(self._prices, model=record.call.body["model"],
                                  original_tokens=result.original_tokens,
                                  forwarded_tokens=result.forwarded_tokens, earlier=earlier)

    def _cohort(self, record: RequestRecord, usage: Usage | None, savings: SavingsRecord | None,
                earlier: list[Usage]) -> CohortFigures:
        """The request's cohort figures; with a shadow decision, what it would have saved."""
        shadow = None
        if record.shadow is not None and usage is not None:
            result = record.shadow.result
            shadow = shadow_savings(self._prices, model=record.call.body["model"],
                                    original_tokens=result.original_tokens, forwarded_tokens=result.forwarded_tokens,
                                    usage=usage, prefix_changed=changes_prefix(record.shadow),
                                    scorer_usd=record.shadow.scorer_usd)
        return CohortFigures(
            cohort=record.outcome.cohort, signals=conversation_signals(record.call.body["messages"]),
            billed_prompt_tokens=(usage.prompt_tokens if usage else 0) + sum(u.prompt_tokens for u in earlier),
            cached_tokens=(usage.cached_read_tokens if usage else 0) + sum(u.cached_read_tokens for u in earlier),
            billed_usd=savings.actual_usd if savings is not None and savings.priced else None, shadow=shadow)

    def _write_audit(self, record: RequestRecord, label: Outcome, savings: SavingsRecord | None,
                     overhead_s: float, shadow: ShadowSavings | None = None, charge: Charge | None = None) -> None:
        if not self._audit.enabled:
            return
        result = record.outcome.result
        # A shadow request's decisions are its shadow decision's: what would have been forwarded.
        decided = record.shadow or record.outcome
        report = decided.result.report()
        reason = decided.unpruned_reason  # one reason for the whole request, when it is one
        decisions = [MessageDecision(m["index"], m["action"], m["score"], reason or m["reason"])
                     for m in report["messages"]]
        call = record.call
        auth = call.headers.get("authorization", "")
        scorer = decided.scorer
        self._audit.write(AuditEntry(
            request_id=call.request_id, timestamp=time.time(), org=call.identity.org, team=call.identity.team,
            model=call.body["model"], strategy=result.strategy, outcome=label,
            original_tokens=result.original_tokens, forwarded_tokens=result.forwarded_tokens,
            decisions=decisions, savings=savings,
            timings=Timings(prune_ms=record.outcome.prune_s * 1000,
                            scorer_ms=scorer.seconds * 1000 if scorer is not None else None,
                            upstream_ms=record.upstream_s * 1000, overhead_ms=overhead_s * 1000),
            request_body=call.sent_body, include_content=call.policy.audit_include_content,
            secrets=tuple(s for s in (auth[7:].strip(), call.headers.get("x-api-key", "")) if s), route=call.route,
            cohort=record.outcome.cohort, shadow=shadow,
            shadow_mode=record.shadow.result.mode if record.shadow is not None else None,
            expand_refs=tuple(record.expand_refs), expand_rounds=len(record.expand_usage),
            target_tokens=result.target_tokens if result.strategy is not Strategy.NONE else None,
            charge=charge if record.hold is not None or (charge is not None and charge.anomaly) else None,
            reserved_tokens=record.hold.estimate if record.hold is not None else None,
            reasoning=_reasoning_audit(record)))


def _invalidated(record: RequestRecord) -> dict[str, int]:
    """What Sieve's rewrite invalidated, per scope (counted whatever the answer: the rewrite was
    made, the record remembers the loss, and the response header said it)."""
    guarded = record.reasoning
    return {scope.value: n for scope, n in guarded.lost.items()} if guarded is not None else {}


def _reasoning_audit(record: RequestRecord) -> dict[str, Any] | None:
    """The audit line's ``reasoning``: only where reasoning was in play and something happened."""
    guarded = record.reasoning
    reasons = transformation_reasons(record.transformations)
    if (guarded is None or not (guarded.lost or guarded.stripped or guarded.dropped or guarded.retried)) \
            and not reasons:
        return None
    return {"invalidated": _invalidated(record), "stripped": guarded.stripped if guarded else 0,
            "dropped": guarded.dropped if guarded else 0, "retried": bool(guarded and guarded.retried),
            "provider_transformations": reasons}


def _earlier_rounds(record: RequestRecord) -> list[Usage]:
    """The usage of the request's sieve_expand rounds before its last answer (each settled on
    its own reservation by gateway.expand)."""
    return [u for u in map(usage_from_provider, record.expand_usage) if u is not None]


def _scorer_usd(record: RequestRecord) -> float:
    """The scorer dollars the request spent: a shadow decision's are spent for real too."""
    return record.outcome.scorer_usd + (record.shadow.scorer_usd if record.shadow is not None else 0.0)


def changes_prefix(decision: PruneOutcome) -> bool:
    """Whether a decision rewrites history its conversation's previous request sent: a new
    epoch, or pruning without a usable plan (lost or not continued), after a first request.
    A frozen replay, or a request left as it came, keeps the previous forward's prefix."""
    result = decision.result
    return (result.changed and result.mode in (Mode.EPOCH, Mode.STATELESS)
            and decision.previous_fingerprints is not None)


def _billed(record: RequestRecord, usage: Usage | None) -> bool:
    """Whether the provider billed the request: it answered (a success it gave, even one too
    large to read; a stream it started, cut or not), unless it refused in its stream before
    any output."""
    if record.billed_unread:
        return True
    if not 200 <= record.status < 400:
        return False
    if usage is not None:
        return True
    if record.tap is not None:
        return record.tap.error is None or record.tap.delta_events > 0
    return record.completed or record.disconnected


def chain_tokens(record: RequestRecord, ceiling: int) -> int:
    """The size of the stored response a Responses request made (what continuing it sends the
    model again): its input and output as billed, else the most it can be (its reservation)."""
    usage = usage_from_provider(record.response_usage or record.stream_usage) if record.usage_final else None
    if usage is not None:
        return min(usage.prompt_tokens + usage.completion_tokens, ceiling)
    if record.hold is not None:
        return record.hold.estimate
    return record.outcome.result.forwarded_tokens


def _outcome(record: RequestRecord, ok: bool) -> Outcome:
    if not ok:
        return Outcome.UPSTREAM_ERROR
    if record.outcome.failed or (record.hold is not None and record.hold.reservation is None):
        return Outcome.FAIL_OPEN  # pruned without its state, state not saved, or served unmetered
    return Outcome.PRUNED if record.outcome.result.saved_tokens > 0 else Outcome.PASSTHROUGH


