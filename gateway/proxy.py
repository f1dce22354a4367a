"""One chat completion through Sieve: prune, reserve, forward, relay, account.

The route hands over a parsed, checked body; this module owns the sequence
and the guarantees around it:

* the forwarded body is the pruned request serialized once (orjson);
* a stream is relayed chunk by chunk, its usage read on the way;
* the budget reservation is settled at the usage the provider reported (even
  if the stream broke after reporting it); a stream that ended whole or that
  the client left, or a whole answer, without usage, is settled at the
  forwarded prompt plus an estimate of the answer (deltas streamed, or its
  characters / 4); an upstream error, timeout or cut stream without usage is
  released;
* accounting (budget settle, metrics, savings, audit) runs as a deferred task
  that survives the client going away, exactly once per reserved request, on
  every path out: response, upstream error, disconnect, or the server cutting
  the request at shutdown (``close`` accounts whatever is still open).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Mapping

import orjson
from starlette.responses import Response, StreamingResponse

from gateway.accounting import Accountant, RequestRecord
from gateway.api.protocol import SieveHeaders
from gateway.api.sse import SSEUsageTap
from gateway.budget_guard import BudgetGuard, Hold
from gateway.deferred import Deferred
from gateway.errors import SieveError, UpstreamUnavailable
from gateway.identity import Identity, client_provider_key
from gateway.pruner import PruneOutcome, Pruner
from gateway.pruning.policy import Policy
from gateway.telemetry.redaction import without_secrets
from gateway.upstream.litellm_route import LiteLLMUpstream
from gateway.upstream.openai_compat import OpenAICompatibleUpstream, UpstreamResponse, forward_headers
from gateway.upstream.router import ModelRouter, ResolvedRoute

log = logging.getLogger("sieve.proxy")


@dataclass(slots=True)
class ChatCall:
    request_id: str
    body: dict[str, Any]
    body_bytes: int
    identity: Identity
    policy: Policy
    sieve: SieveHeaders
    headers: Mapping[str, str]
    started: float = field(default_factory=time.perf_counter)


class ChatProxy:
    def __init__(self, *, router: ModelRouter, pruner: Pruner, openai: OpenAICompatibleUpstream,
                 litellm: LiteLLMUpstream, accountant: Accountant, budgets: BudgetGuard,
                 deferred: Deferred) -> None:
        self._router = router
        self._pruner = pruner
        self._openai = openai
        self._litellm = litellm
        self._accountant = accountant
        self._budgets = budgets
        self._deferred = deferred
        # Requests holding a reservation whose accounting has not been handed over yet.
        self._open: dict[int, RequestRecord] = {}

    async def prune_only(self, call: ChatCall) -> PruneOutcome:
        """What would be forwarded; no upstream needed, so any model name is accepted."""
        return await self._pruner.prune(call.body, call.identity.org, call.sieve, call.policy, call.body_bytes)

    async def complete(self, call: ChatCall) -> Response:
        route = self._router.resolve(call.body["model"])
        target_tokens = None
        left = await self._budgets.budget_left(call)
        if left is not None:
            base = call.sieve.target_tokens or call.policy.target_tokens
            tightened = call.policy.tightened_target(base, left)
            target_tokens = tightened if tightened != base else None
        outcome = await self._pruner.prune(call.body, call.identity.org, call.sieve, call.policy,
                                           call.body_bytes, target_tokens=target_tokens)
        forwarded = outcome.result.request
        stream = forwarded.get("stream") is True
        strip_usage = False
        if stream and not _client_wants_usage(forwarded):
            forwarded = dict(forwarded)
            forwarded["stream_options"] = {**(forwarded.get("stream_options") or {}), "include_usage": True}
            strip_usage = True
        if route.upstream_model:
            forwarded = {**forwarded, "model": route.upstream_model}
        hold = await self._budgets.reserve(call, outcome.result.forwarded_tokens, forwarded)
        record = RequestRecord(call=call, outcome=outcome, route=route, hold=hold)
        self._open[id(record)] = record
        headers = sieve_headers(call.request_id, outcome, hold)
        upstream_started = time.perf_counter()
        try:
            response = await self._send(route, forwarded, call, stream)
        except BaseException as exc:
            # Also a bug or a cancellation (uvicorn cancels what outlives its graceful-shutdown
            # timeout): the reservation is released and the request counted all the same.
            record.upstream_s = time.perf_counter() - upstream_started
            record.outcome_label = "upstream_error"
            record.error_status = exc.status if isinstance(exc, SieveError) else 500
            self._account(record)
            if isinstance(exc, SieveError):
                exc.headers.update(headers)
            raise
        record.status = response.status
        if response.chunks is None:
            record.upstream_s = time.perf_counter() - upstream_started
            body = response.body or b""
            if response.status >= 400 and route.api_key:
                body = without_secrets(body, [route.api_key])
            record.set_response_body(body)
            self._account(record)
            return Response(body, status_code=response.status, headers={**response.headers, **headers})
        return _RelayResponse(self._relay(response, record, strip_usage, upstream_started),
                              on_close=lambda: self._account(record),
                              status_code=response.status, headers={**response.headers, **headers})

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
        """Hand a record to deferred accounting, once: a stream can end on several paths."""
        if self._open.pop(id(record), None) is not None:
            self._deferred.spawn(self._accountant.finish(record))

    async def _send(self, route: ResolvedRoute, body: dict[str, Any], call: ChatCall,
                    stream: bool) -> UpstreamResponse:
        client_key = client_provider_key(call.identity, call.headers)
        if route.kind == "litellm":
            return await self._litellm.complete(route.route, body, client_key, stream)
        api_key = route.api_key or client_key
        out_headers = forward_headers(call.headers, api_key)
        if not api_key:
            out_headers.pop("authorization", None)
        return await self._openai.post(route.url or "", orjson.dumps(body), out_headers, stream)

    async def _relay(self, response: UpstreamResponse, record: RequestRecord, strip_usage: bool,
                     upstream_started: float) -> AsyncGenerator[bytes, None]:
        tap = SSEUsageTap(strip_usage)
        completed = False
        try:
            assert response.chunks is not None
            async for chunk in response.chunks:
                out = tap.feed(chunk)
                if out:
                    yield out
            tail = tap.flush()
            if tail:
                yield tail
            if tap.error is not None:
                # The provider told the client itself, in-stream: relayed as it came, counted as failed.
                record.outcome_label = "upstream_error"
                record.error_status = 502
            elif not tap.finished:
                # A clean close is no proof of a whole answer (no chunked framing, a proxy cut it).
                raise UpstreamUnavailable("the upstream stream ended without [DONE] or a finish_reason: "
                                          "the answer is incomplete")
            else:
                completed = True
        except SieveError as exc:
            # The incomplete event the tap still holds is dropped: the client gets whole events,
            # then one whole error event.
            record.outcome_label = "upstream_error"
            record.error_status = exc.status
            yield b"data: " + orjson.dumps(exc.body()) + b"\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            record.disconnected = True
            raise
        finally:
            record.upstream_s = time.perf_counter() - upstream_started
            record.stream_usage = tap.usage
            record.completion_estimate = tap.delta_events
            record.completed = completed
            if response.release is not None:
                _close_quietly(response.release)
            self._account(record)


class _RelayResponse(StreamingResponse):
    """A StreamingResponse that always ends its relay, even one that never started.

    Starlette neither closes a body iterator it stopped iterating nor starts one whose
    task was cancelled first (a client gone before the first byte, or shutdown): either
    way the relay's ``finally`` (release the upstream connection, account the request)
    would wait for the garbage collector, or never run. Closing it here runs it now;
    ``on_close`` covers the relay that never started."""

    def __init__(self, content: AsyncGenerator[bytes, None], *, on_close: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._relay = content
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self._relay.aclose()
            finally:
                self._on_close()


def _client_wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def sieve_headers(request_id: str, outcome: PruneOutcome, hold: Hold | None = None) -> dict[str, str]:
    """The ``x-sieve-*`` response headers (both routes send them)."""
    r = outcome.result
    headers = {
        "x-sieve-request-id": request_id,
        "x-sieve-original-tokens": str(r.original_tokens),
        "x-sieve-forwarded-tokens": str(r.forwarded_tokens),
        "x-sieve-saved-tokens": str(r.saved_tokens),
    }
    if hold is not None and hold.remaining_tokens is not None:
        headers["x-sieve-budget-remaining-tokens"] = str(hold.remaining_tokens)
    return headers


def _close_quietly(resp: Any) -> None:
    try:
        resp.release()
    except Exception:  # noqa: BLE001 - closing a dead connection
        pass


__all__ = ["ChatCall", "ChatProxy", "sieve_headers"]
