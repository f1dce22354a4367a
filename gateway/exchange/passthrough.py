"""The routes Sieve relays as they came: nothing to prune; budgeted when billed, always counted.

``POST /v1/messages/count_tokens``, ``POST /v1/responses/compact``,
``/v1/responses/input_tokens``, ``GET``/``DELETE /v1/responses/{id}``,
``POST /v1/responses/{id}/cancel`` and ``GET /v1/responses/{id}/input_items``
belong to the formats Sieve serves, so a client pointed at Sieve must reach
them; they go to the format's upstream (the model's, when the body names one,
else the format's default), with the same key rules as a forwarded request,
and their answers (an event stream included) come back unchanged, with
``x-sieve-request-id``::

    relay = PassThrough(router, fast_path, budgets, recorder, audit, deferred)
    reply = await relay.forward(PassThroughCall(request_id, identity, "GET", WireFormat.RESPONSES,
                                                "/resp_123", "", headers, None, route="/v1/responses/{id}"))

Budgets: a billed route (``compact`` runs the model over its input) reserves what
its body can cost, as ``POST /v1/responses`` would (the Responses estimate, and the
stored history its ``previous_response_id`` names), so a spent budget refuses it with
429, and settles on the ``usage`` it answers (released on an error; a success too large
to read is charged the reservation). Stored responses are their owner's
(``gateway.exchange.stored_responses``): a path or body naming one that is not the caller's is a 404. The other routes cost nothing at the provider: a spent budget does not
refuse them (a client that cannot count tokens or read its stored response is no
cheaper). Every request is counted (``sieve_passthrough_requests_total{org, route,
outcome}``) and has an audit line naming its route; its access line is the guard's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Mapping

import orjson

from gateway.exchange.budget_guard import BudgetGuard, Hold
from gateway.exchange.deferred import Deferred
from gateway.errors import BudgetExceeded, SieveError, StoreUnavailable, UpstreamTooLarge
from gateway.exchange.relay import Reply, StreamEnd, close_quietly, relay_stream
from gateway.pruning import Policy, Strategy
from gateway.exchange.stored_responses import StoredResponses
from gateway.telemetry import (AuditEntry, AuditLog, Outcome, RequestRecorder, Timings, usage_from_provider,
    usage_is_readable)
from gateway.upstream import ModelRouter, OpenAICompatibleUpstream, ResolvedRoute, UpstreamResponse, provider_headers
from gateway.wire import INGRESSES, Identity, WireFormat

log = logging.getLogger("sieve.passthrough")


@dataclass(frozen=True, slots=True)
class PassThroughCall:
    request_id: str
    identity: Identity
    method: str
    format: WireFormat
    suffix: str                       # below the format's endpoint: "/count_tokens", "/{id}/input_items"
    query: str                        # the query string, as sent
    headers: Mapping[str, str]
    body: dict[str, Any] | None       # a POST's JSON body (it may name the model)
    route: str = ""                   # the route template (metrics' and the audit line's route)
    policy: Policy = field(default_factory=Policy)  # the caller's (a billed route's reservation reads it)
    billed: bool = False              # the provider bills it (runs the model): reserved and settled
    response_id: str | None = None    # the stored response the path names (its owner's only)
    started: float = field(default_factory=time.perf_counter)


class PassThrough:
    def __init__(self, router: ModelRouter, http: OpenAICompatibleUpstream, budgets: BudgetGuard,
                 recorder: RequestRecorder, audit: AuditLog, deferred: Deferred,
                 stored: StoredResponses | None = None) -> None:
        self._router = router
        self._http = http
        self._budgets = budgets
        self._recorder = recorder
        self._audit = audit
        self._deferred = deferred
        self._stored = stored

    async def forward(self, call: PassThroughCall) -> Reply:
        route = self._route(call)
        chain = await self._owned(call)
        body = call.body
        if body is not None and route.upstream_model:
            body = {**body, "model": route.upstream_model}
        hold = await self._reserve(call, body, chain)
        url = (route.url or "") + call.suffix + (f"?{call.query}" if call.query else "")
        headers = provider_headers(route, call.identity, call.headers)
        try:
            response = await self._http.relay(call.method, url, orjson.dumps(body) if body is not None else None,
                                              headers, call.format)
        except BaseException as exc:  # also a cancellation: the reservation is released all the same
            # ... but a success too large to read was billed: charged the reservation.
            unread = isinstance(exc, UpstreamTooLarge) and exc.upstream_status < 400
            self._finish(call, hold, exc.status if isinstance(exc, SieveError) else 500, None, unread)
            if isinstance(exc, SieveError):
                exc.headers["x-sieve-request-id"] = call.request_id
            raise
        out = {**response.headers, "x-sieve-request-id": call.request_id}
        if hold is not None and hold.remaining_tokens is not None:
            out["x-sieve-budget-remaining-tokens"] = str(hold.remaining_tokens)
        if response.chunks is None:
            if call.method == "DELETE" and call.response_id is not None and response.status < 300 and \
                    self._stored is not None:
                await self._stored.forget(call.response_id)
            self._finish(call, hold, response.status, response.body)
            return Reply(response.status, out, body=response.body or b"")
        return Reply(response.status, out, stream=_relay(response, call.format),
                     on_close=lambda: self._finish(call, hold, response.status, None))

    def _route(self, call: PassThroughCall) -> ResolvedRoute:
        model = call.body.get("model") if call.body is not None else None
        if isinstance(model, str) and model:
            return self._router.resolve(model, call.format)
        return self._router.default_route(call.format)

    async def _owned(self, call: PassThroughCall) -> int:
        """The stored response the path names, and any the body continues, checked to be the
        caller's (404 if not, counted here); what the body continues, in tokens."""
        if self._stored is None or call.format is not WireFormat.RESPONSES:
            return 0
        try:
            if call.response_id is not None:
                await self._stored.owned(call.identity, call.policy, call.response_id)
            return await self._stored.continued(call.identity, call.policy, call.body) if call.body else 0
        except SieveError as exc:
            self._record(call, Outcome.CLIENT_ERROR if exc.status < 500 else Outcome.FAIL_CLOSED, 0, exc.status)
            raise

    async def _reserve(self, call: PassThroughCall, body: dict[str, Any] | None, chain: int = 0) -> Hold | None:
        """A billed route's reservation, on its format's estimate (and the stored history it
        continues); a refusal is counted here (the error handler counts only the forwarding routes)."""
        if not call.billed or body is None:
            return None
        try:
            return await self._budgets.reserve(call, 0, body, call.format, chain)
        except (BudgetExceeded, StoreUnavailable) as exc:
            refused = Outcome.BUDGET_REJECTED if isinstance(exc, BudgetExceeded) else Outcome.FAIL_CLOSED
            self._record(call, refused, 0, exc.status)
            raise

    def _finish(self, call: PassThroughCall, hold: Hold | None, status: int, answer: bytes | None,
                unread: bool = False) -> None:
        """Account the request once its answer is known (a stream's: once it ended), deferred
        so a client that leaves does not skip the settle."""
        self._deferred.spawn(self._account(call, hold, status, answer, unread))

    async def _account(self, call: PassThroughCall, hold: Hold | None, status: int, answer: bytes | None,
                       unread: bool = False) -> None:
        ok = 200 <= status < 400
        usage_fields = _usage_of(answer) if ok else None
        usage = usage_from_provider(usage_fields)
        if usage is not None:
            readable = usage_is_readable(usage_fields)
            await self._budgets.settle(hold, usage.prompt_tokens + usage.completion_tokens if readable else None)
        elif (ok and answer is not None or unread) and hold is not None:
            await self._budgets.settle(hold, hold.estimate)  # billed, but not said how much: the most it could be
        else:
            await self._budgets.release(hold)
        if ok and hold is not None and hold.reservation is None:
            outcome = Outcome.FAIL_OPEN  # served unmetered: the budget store was down
        else:
            outcome = Outcome.OK if ok else Outcome.UPSTREAM_ERROR
        self._record(call, outcome, usage.prompt_tokens if usage is not None else 0, status)

    def _record(self, call: PassThroughCall, outcome: Outcome, prompt_tokens: int, status: int) -> None:
        self._recorder.passed_through(call.identity.org, call.route, outcome)
        if not self._audit.enabled:
            return
        model = call.body.get("model") if call.body is not None else None
        self._audit.write(AuditEntry(
            request_id=call.request_id, timestamp=time.time(), org=call.identity.org, team=call.identity.team,
            model=model if isinstance(model, str) else "", strategy=Strategy.NONE, outcome=outcome,
            original_tokens=prompt_tokens, forwarded_tokens=prompt_tokens,
            timings=Timings(upstream_ms=(time.perf_counter() - call.started) * 1000),
            request_body=call.body, include_content=call.policy.audit_include_content,
            secrets=tuple(s for s in (call.headers.get("authorization", "")[7:].strip(),
                                      call.headers.get("x-api-key", "")) if s), route=call.route))


def _usage_of(answer: bytes | None) -> dict[str, Any] | None:
    """The ``usage`` of a whole JSON answer (what compact bills), if it has one."""
    try:
        payload = orjson.loads(answer or b"")
    except orjson.JSONDecodeError:
        return None
    usage = payload.get("usage") if isinstance(payload, dict) else None
    return usage if isinstance(usage, dict) else None


def _relay(response: UpstreamResponse, fmt: WireFormat) -> AsyncGenerator[bytes, None]:
    """The provider's events as they come; a stream that breaks or ends early ends with the
    format's error event."""
    return relay_stream(response, INGRESSES[fmt].tap(), StreamEnd(), on_end=lambda end: _stream_ended(response, end))


def _stream_ended(response: UpstreamResponse, end: StreamEnd) -> None:
    if end.failure is not None:
        log.warning("a relayed stream broke: %s", end.failure.message)
    if response.release is not None:
        close_quietly(response.release)
