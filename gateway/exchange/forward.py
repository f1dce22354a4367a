"""One request through Sieve: prune, reserve, forward, relay, account.

The route hands over a parsed, checked body; this module owns the sequence
and the guarantees around it, the same for every wire format (Chat
Completions, Anthropic Messages, OpenAI Responses: what differs is described
by the format's :class:`gateway.wire.ingress.Ingress`):

* the forwarded body is the pruned request serialized once (orjson), in the
  client's format: the pruner's decision on the chat-shaped view written back
  by the format's adapter (a body it did not change goes as it came);
* a stream is relayed chunk by chunk, its usage read on the way;
* the budget reservation is settled at the usage the provider reported (even
  if the stream broke after reporting it); a stream that ended whole or that
  the client left, or a whole answer, without usage, is settled at the
  forwarded prompt plus an estimate of the answer (deltas streamed, or its
  characters / 4); an upstream error, timeout or cut stream without usage is
  released;
* under a shadow policy the request goes out as it came; the decision is made
  in a deferred task scheduled right behind the forward's, so it starts only once
  the forward waits on I/O and runs while the provider answers; the accounting
  waits for it, then measures it with the request's real usage;
* accounting (budget settle, metrics, savings, audit) runs as a deferred task
  that survives the client going away, exactly once per reserved request, on
  every path out: response, upstream error, disconnect, or the server cutting
  the request at shutdown (``close`` accounts whatever is still open).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncGenerator, Mapping

from gateway.exchange.accounting import Accountant, RequestRecord, chain_tokens
from gateway.exchange.budget_guard import BudgetGuard, Hold
from gateway.exchange.deferred import Deferred
from gateway.errors import SieveError, UpstreamTooLarge, UpstreamUnavailable
from gateway.exchange.extra_rounds import ExtraRounds, Pinned
from gateway.exchange.prune_step import PruneOutcome, Pruner
from gateway.pruning import Cohort, PolicyMode, PruneResult, shown_with_refs, target_in_force
from gateway.exchange.reasoning_guard import Guarded, ReasoningGuard
from gateway.exchange.relay import Reply, StreamEnd, close_quietly, relay_stream
from gateway.exchange.stored_responses import StoredResponses
from gateway.telemetry import FailOpen, Outcome, without_secrets
from gateway.upstream import ModelRouter, ResolvedRoute, UpstreamResponse
from gateway.wire import INGRESSES, Ingress, ModelCall, REASONING_HEADER, SSEUsageTap, WireFormat, response_headers

log = logging.getLogger("sieve.forward")
WRITE_FAILED = "the pruned body could not be written back in its format: forwarded as sent"
# Far below any provider's time to answer, above the loop turns a request takes to be written.
SHADOW_HEAD_START_S = 0.002
SHADOW = "shadow mode: forwarded as sent; the decision is measured, not applied"


class Forwarder:
    def __init__(self, *, router: ModelRouter, pruner: Pruner, accountant: Accountant, budgets: BudgetGuard,
                 deferred: Deferred, expander: ExtraRounds | None = None, stored: StoredResponses | None = None,
                 reasoning: ReasoningGuard | None = None) -> None:
        self._router = router
        self._stored = stored
        self._expander = expander
        self._reasoning = reasoning
        self._pruner = pruner
        self._accountant = accountant
        self._budgets = budgets
        self._deferred = deferred
        # Requests holding a reservation whose accounting has not been handed over yet.
        self._open: dict[int, RequestRecord] = {}

    @property
    def pruner(self) -> Pruner:
        """The pruning step (its ``recent_plans`` show how often a warm step skipped a decode)."""
        return self._pruner

    async def prune_only(self, call: ModelCall) -> PruneOutcome:
        """What would be forwarded; no upstream needed, so any model name is accepted. A dry run
        writes nothing: the conversation's plan is read, not saved (``Pruner.prune``). Under a
        policy with ``sieve_expand`` the markers name their refs, as forwarded (the counts hold
        them already), unless the conversation's record says it goes without the tool (read, as
        a forward reads it); the tool schema and the conversation's pinned exchanges are left
        out: a dry run writes no expansion record."""
        record = await self._expander.pinned(call) if self._expander is not None else None
        if record is not None and record.tool is False:
            call.policy = call.policy.with_overrides(expand_tool=False)
        outcome = await self._pruner.prune(call, dry_run=True)
        if call.policy.expand_tool and outcome.unpruned_reason is None:
            shown_with_refs(outcome.result)
        return outcome

    async def complete(self, call: ModelCall) -> Reply:
        ingress = INGRESSES[call.format]
        route = self._router.resolve(call.body["model"], call.format)
        chain = await self._continued(call) if call.format is WireFormat.RESPONSES else 0
        outcome, pinned = await self._prune(call, ingress)
        expansion = await self._expander.open(call, outcome, pinned) if self._expander is not None else None
        try:
            forwarded, strip_usage = _upstream_body(call, ingress, outcome.result, route)
            if self._expander is not None:
                forwarded = self._expander.body_for(expansion, forwarded)
        except Exception as exc:  # noqa: BLE001 - a bug writing the format back must not fail the request
            log.exception("writing the pruned %s body failed (%s); forwarding it as sent", call.format,
                          type(exc).__name__)
            outcome = await self._pruner.pass_through(call, WRITE_FAILED, FailOpen.PRUNING_ERROR)
            forwarded, strip_usage = _upstream_body(call, ingress, outcome.result, route)
            expansion = None
        forwarded = self._budgets.with_output_cap(call, forwarded, call.format)
        guarded = await self._guard(call, forwarded, outcome.result.changed or expansion is not None)
        forwarded = guarded.body
        hold = await self._budgets.reserve(call, outcome.result.forwarded_tokens, forwarded, call.format, chain)
        record = RequestRecord(call=call, outcome=outcome, route=route, hold=hold,
                               answer_chars=ingress.answer_chars, stores_response=_stores_response(call),
                               shadow_pending=outcome.cohort is Cohort.SHADOW and outcome.unpruned_reason == SHADOW,
                               reasoning=guarded)
        call.forwarded = True  # from here on, the accounting writes its access line
        self._open[id(record)] = record
        headers = sieve_headers(call.request_id, outcome, hold, guarded)
        response = await self._forward_then_decide(record, forwarded, headers)
        response = await self._retried(record, response, headers)
        if expansion is not None:
            response = await self._expand(expansion, record, guarded.body, response, headers)
        record.status = response.status
        if response.chunks is None:
            record.upstream_s = time.perf_counter() - record.upstream_started
            body = response.body or b""
            if response.status >= 400 and route.api_key:
                body = without_secrets(body, [route.api_key])
            record.set_response_body(body)
            if record.stores_response:
                await self._claim(record, record.response_id)  # before the client can name it
            self._account(record)
            return Reply(response.status, {**response.headers, **headers}, body=body)
        return Reply(response.status, {**response.headers, **headers},
                     stream=self._relay(response, record, ingress.tap(strip_usage)),
                     on_close=lambda: self._account(record))

    async def _continued(self, call: ModelCall) -> int:
        """The stored history a Responses request continues, in tokens; 404 when it names a
        stored response or conversation that is not the caller's (gateway.exchange.stored_responses)."""
        if call.format is not WireFormat.RESPONSES or self._stored is None:
            return 0
        return await self._stored.continued(call.identity, call.policy, call.sent_body)

    async def _claim(self, record: RequestRecord, response_id: Any) -> None:
        """A relayed response is the caller's from the moment its id is known (its size is the
        most it can be until the accounting learns the real one)."""
        if not record.stores_response or self._stored is None or not isinstance(response_id, str):
            return
        record.response_id, record.claimed_final = response_id, record.usage_final
        await self._stored.record(record.call.identity.org, response_id, chain_tokens(record, self._budgets.ceiling),
                                  record.call.sent_body.get("conversation"))

    async def _expand(self, expansion: Any, record: RequestRecord, forwarded: dict[str, Any],
                      response: UpstreamResponse, headers: Mapping[str, str]) -> UpstreamResponse:
        """Sieve's own sieve_expand rounds (gateway.expand); the client gets the last answer."""
        assert self._expander is not None
        try:
            return await self._expander.answer(expansion, record, forwarded, response,
                                               lambda body: self._round(record, body, headers))
        except BaseException as exc:
            record.outcome_label = record.outcome_label or Outcome.UPSTREAM_ERROR
            record.error_status = record.error_status or (exc.status if isinstance(exc, SieveError) else 500)
            # A round the provider answered and Sieve could not finish reading was billed all the same.
            record.billed_unread = response.status == 200 and isinstance(exc, UpstreamUnavailable)
            self._account(record)
            raise

    async def _guard(self, call: ModelCall, forwarded: dict[str, Any], changed: bool) -> Guarded:
        """The forward made valid for a provider that binds reasoning to its prefix (``gateway.exchange.reasoning_guard``)."""
        if self._reasoning is None:
            return Guarded(forwarded, fmt=call.format, changed=changed)
        return await self._reasoning.prepare(call, forwarded, changed)

    async def _retried(self, record: RequestRecord, response: UpstreamResponse,
                       headers: Mapping[str, str]) -> UpstreamResponse:
        """A prefix-check 400 on a request Sieve changed: sent once more with drop_block
        (``gateway.exchange.reasoning_guard``); the client never gets an error Sieve's rewrite caused."""
        retry = None if self._reasoning is None else \
            await self._reasoning.retry_body(record.reasoning, record.call, response.status, response.body)
        return response if retry is None else await self._forward(record, retry, headers)

    async def _round(self, record: RequestRecord, body: dict[str, Any], headers: Mapping[str, str]) -> UpstreamResponse:
        """A sieve_expand round: its body is a prefix the answer's reasoning is bound to."""
        if self._reasoning is not None:
            await self._reasoning.round_sent(record.reasoning, body, record.call.policy.state_ttl_s)
        return await self._forward(record, body, headers)

    async def _prune(self, call: ModelCall, ingress: Ingress) -> tuple[PruneOutcome, Pinned | None]:
        """The request's prune, and its conversation's sieve_expand record when it is pruned
        with the tool on (read first: the pruner holds the pinned exchanges under the target)."""
        reason = ingress.unpruned_reason(call.sent_body)
        if reason is not None:
            return await self._pruner.pass_through(call, reason), None
        if call.policy.mode is PolicyMode.SHADOW:
            return await self._pruner.pass_through(call, SHADOW), None  # decided beside the forward
        record = await self._expander.pinned(call) if self._expander is not None else None
        if record is not None and record.tool is False:
            # A conversation without the tool: its markers name no ref (and are counted so).
            call.policy, record = call.policy.with_overrides(expand_tool=False), None
        outcome = await self._pruner.prune(call, await self._budget_target(call),
                                           record.room if record is not None else ())
        return outcome, record

    async def _budget_target(self, call: ModelCall) -> int | None:
        """A target Sieve imposes itself when the caller's budget runs low (policy
        ``tighten_below``); None when the request's own target stands."""
        left = await self._budgets.budget_left(call)
        if left is None:
            return None
        base = target_in_force(call.sieve.target_tokens, call.policy)
        tightened = call.policy.tightened_target(base, left)
        return tightened if tightened != base else None

    async def _forward_then_decide(self, record: RequestRecord, body: dict[str, Any],
                                   headers: Mapping[str, str]) -> UpstreamResponse:
        """The forward; for a shadow request, also its decision, started right behind it."""
        if not record.shadow_pending:
            return await self._forward(record, body, headers)
        # Tasks run in the order they were scheduled: the forward reaches its first wait
        # on I/O before the decision takes the loop.
        forwarding = asyncio.ensure_future(self._forward(record, body, headers))
        record.shadow_decision = self._deferred.spawn(self._decide_shadow(record.call))
        return await forwarding

    async def _forward(self, record: RequestRecord, body: dict[str, Any],
                       headers: Mapping[str, str]) -> UpstreamResponse:
        route, call = record.route, record.call
        record.upstream_started = time.perf_counter()
        try:
            return await self._router.upstream_for(route).send(route, call, body)
        except BaseException as exc:
            # Also a bug or a cancellation (uvicorn cancels what outlives its graceful-shutdown
            # timeout): the reservation is released and the request counted all the same; but a
            # success too large to read was billed, so it is charged (at the reservation).
            record.upstream_s = time.perf_counter() - record.upstream_started
            record.outcome_label = Outcome.UPSTREAM_ERROR
            record.error_status = exc.status if isinstance(exc, SieveError) else 500
            record.billed_unread = isinstance(exc, UpstreamTooLarge) and exc.upstream_status < 400
            self._account(record)
            if isinstance(exc, SieveError):
                exc.headers.update(headers)
            raise

    async def close(self, timeout_s: float) -> int:
        """At shutdown, once the server has stopped serving: account every request still open.

        The requests the server cancelled at the end of its grace period unwind in their
        own tasks within a few loop turns (each stream's ``finally`` hands its record
        over); wait for that, bounded, then account whatever never got the chance, so no
        reservation outlives the process. Returns how many had to be accounted here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._open and loop.time() < deadline:
            await asyncio.sleep(0.01)
        stragglers = list(self._open.values())
        for record in stragglers:
            log.warning("request %s still open at shutdown: its reservation is released",
                        record.call.request_id)
            self._account(record)
        return len(stragglers)

    def _account(self, record: RequestRecord) -> None:
        """Hand a record to deferred accounting, once: a stream can end on several paths. One
        that waits for nothing (no reservation, no stored response, no shadow decision) is
        accounted by a callback right after this step of the loop (the answer written first)."""
        if self._open.pop(id(record), None) is not None:
            if record.shadow_decision is None and self._accountant.waits_for_nothing(record):
                self._deferred.soon(self._accountant.finish_now, record)
            else:
                self._deferred.spawn(self._finish(record))

    async def _finish(self, record: RequestRecord) -> None:
        """Accounting; a shadow request's once its decision is made (it ran beside the forward)."""
        # Handed over while the answer is being written: one turn of the loop lets the request's
        # task write it first (no timer: a timed wait counted its millisecond as overhead).
        await asyncio.sleep(0)
        decision = record.shadow_decision
        if decision is not None:
            record.ended = time.perf_counter()  # the decision's remaining time is no overhead
            # wait(), not await: a decision cancelled (at shutdown) must not skip the settlement.
            await asyncio.wait({decision})
            record.shadow = None if decision.cancelled() else decision.result()
        await self._accountant.finish(record)

    async def _decide_shadow(self, call: ModelCall) -> PruneOutcome | None:
        """Shadow mode: the decision the request would have had (the conversation's frozen
        plan read and saved as for a pruned request, so the shadow's own cache stability is
        what gets measured); None when it failed (the request is accounted as a passthrough)."""
        try:
            # The forward's body is written by a task aiohttp schedules after this one, and a
            # decision is milliseconds of CPU: let the request reach the wire first.
            await asyncio.sleep(SHADOW_HEAD_START_S)
            return await self._pruner.prune(call, await self._budget_target(call))
        except Exception as exc:  # noqa: BLE001 - the request is served; only the measurement is lost
            log.exception("shadow decision failed (%s); accounted as a plain passthrough", type(exc).__name__)
            return None

    def _relay(self, response: UpstreamResponse, record: RequestRecord,
               tap: SSEUsageTap) -> AsyncGenerator[bytes, None]:
        claim_id = None
        if record.stores_response:  # the id is claimed as soon as the stream names it
            async def claim_id() -> bool:
                await self._claim(record, (getattr(tap, "response", None) or {}).get("id"))
                return record.response_id is not None

        return relay_stream(response, tap, StreamEnd(), claim_id,
                            on_end=lambda end: self._stream_ended(response, record, tap, end))

    def _stream_ended(self, response: UpstreamResponse, record: RequestRecord, tap: SSEUsageTap,
                      end: StreamEnd) -> None:
        record.disconnected = record.disconnected or end.disconnected
        if end.provider_error or end.failure is not None:  # relayed or told: counted as failed
            record.outcome_label = Outcome.UPSTREAM_ERROR
            record.error_status = end.failure.status if end.failure is not None else 502
        record.upstream_s = time.perf_counter() - record.upstream_started
        record.stream_usage, record.usage_final = tap.usage, tap.usage_final
        record.transformations.extend(tap.transformations)
        record.tap = tap
        record.completed = end.completed
        if response.release is not None:
            close_quietly(response.release)
        self._account(record)


def _upstream_body(call: ModelCall, ingress: Ingress, result: PruneResult,
                   route: ResolvedRoute) -> tuple[dict[str, Any], bool]:
    """The body as the provider gets it, in the client's format: a chat stream asks for usage
    (budgets are settled and savings counted on it; the usage chunk is stripped again if the
    client did not ask for it, the second value), and an aliased model gets its upstream name."""
    forwarded = result.request
    if call.format is not WireFormat.CHAT:
        assert call.native is not None and call.view is not None
        forwarded = ingress.adapter.write(call.native, call.view, result) if result.changed else call.native
    strip_usage = False
    if ingress.asks_usage and forwarded.get("stream") is True and not _client_wants_usage(forwarded):
        forwarded = dict(forwarded)
        forwarded["stream_options"] = {**(forwarded.get("stream_options") or {}), "include_usage": True}
        strip_usage = True
    if route.upstream_model:
        forwarded = {**forwarded, "model": route.upstream_model}
    return forwarded, strip_usage


def _stores_response(call: ModelCall) -> bool:
    """A Responses request whose response the provider keeps (``store`` is true by default)."""
    return call.format is WireFormat.RESPONSES and call.sent_body.get("store") is not False


def _client_wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def sieve_headers(request_id: str, outcome: PruneOutcome, hold: Hold | None = None,
                  guarded: Guarded | None = None) -> dict[str, str]:
    """The ``x-sieve-*`` response headers of a pruned request (both routes send them); with
    reasoning in play, what Sieve's rewrite invalidated of it (``gateway.exchange.reasoning_guard``)."""
    r = outcome.result
    headers = response_headers(request_id, r.original_tokens, r.forwarded_tokens,
                               hold.remaining_tokens if hold is not None else None)
    if guarded is not None and guarded.record is not None:
        headers[REASONING_HEADER] = str(guarded.invalidated)
    return headers


__all__ = ["Forwarder", "sieve_headers"]
