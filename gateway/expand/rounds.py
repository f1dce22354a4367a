"""Reversible pruning on the request path: the ``sieve_expand`` tool and Sieve's own rounds.

The forward calls this at three points of one request (``gateway.exchange.ExtraRounds``,
the seam it declares; wired in ``gateway.api.services``):

* ``pinned`` before the prune: the conversation's record (``gateway.expand.record``),
  with the room each pinned exchange takes; the pruner holds it under the target and
  says which pins go back (``gateway.pruning.pins``, ``PruneResult.pinned``).
* ``open`` after the prune: with the policy's ``expand_tool`` on, for a conversation
  that carries the tool (decided on its first request, for its whole life: a tool added or
  removed rewrites the prefix a provider binds reasoning and its cache to;
  ``record.offered``), the omission markers name their refs (``gateway.pruning.marker_refs``);
  ``body_for`` then puts the pins the decision chose back where they were made,
  after the client turn they followed (pinned: the model asked for that content, and
  the provider's cached prefix of that round grows rather than breaks), and the tool
  after the client's own.
* ``answer`` once the provider answered: while the answer calls ``sieve_expand``,
  Sieve answers the call from the client's own history (the refs' originals),
  appends the call and its result, and asks again, up to ``expand_max_rounds``
  rounds; the client gets the last round's answer only, and the exchange is pinned.

Mixed answers: a turn that calls ``sieve_expand`` beside client tools is not returned;
Sieve appends its own calls only (with their results) and asks again. A call that cannot
get another round (rounds used up, no budget left) is removed from the answer, the
client's calls of that turn kept.

Budgets: every round holds its own reservation. Before asking again, the round
just answered is settled at its usage and the next round reserved
(``record.hold`` is then the new round's, settled by the accounting as usual);
``record.expand_usage`` keeps the earlier rounds' usage, which the accounting counts
in the billed tokens, the metrics and the savings' cost. Every format
(``gateway.expand.tool``: Chat Completions, Anthropic Messages, OpenAI
Responses), stream and not.

Streams: the first event that names a tool or carries text decides. Sieve's tool
named first: the stream is read to its end (held back, never relayed) and another
round is asked. Anything else: relayed from its start as it came. A ``sieve_expand``
call later in it (text, then the tool, is Claude's habit): with a round left, the
round is read to its end at the call, answered, and the next round follows what was
already sent, in the same message (Messages blocks, chat calls, Responses items and
sequence numbers numbered on), and that exchange is pinned like the others; with none
left, the call is taken out of the events (counted ``unhandled``). What is held back or
kept to splice is bounded (``MAX_HELD_BYTES``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import orjson

from gateway.errors import BudgetExceeded
from gateway.exchange import BudgetGuard, PruneOutcome, RequestRecord, Send
from gateway.expand.call_filter import (CallFilter, MAX_HELD_BYTES, chat_end, continued_blocks, continued_chunks,
    continued_items, held_back, message_end, responses_end)
from gateway.expand.codecs import CODECS, Codec, EventReader, ToolAnswer
from gateway.expand.pinning import history_of, with_pins
from gateway.expand.record import ExpandRecord, ExpandRecords
from gateway.expand.restore import Expandable, expandable, refs_of_call, restore
from gateway.expand.tool import tool_definition, with_tool
from gateway.pruning import PruneResult, TokenCounters
from gateway.state import ConversationStore
from gateway.telemetry import ExpandOutcome, Metrics, usage_from_provider, usage_is_readable
from gateway.upstream import UpstreamResponse
from gateway.wire import ModelCall, WireFormat, input_transformations

log = logging.getLogger("sieve.expander")

# The formats whose relayed stream goes on with the next round when it names Sieve's tool after
# text: how Sieve ends such a stream itself, and how the next round's stream continues it.
# The closing events carry the round's own usage (the tap reads it as the answer's).
SPLICED = {WireFormat.CHAT: (lambda payload, sent: chat_end(payload.get("usage")), continued_chunks),
           WireFormat.MESSAGES: (lambda payload, sent: message_end(payload.get("usage") or {"output_tokens": 0}),
                                 continued_blocks),
           WireFormat.RESPONSES: (responses_end, continued_items)}


@dataclass(slots=True)
class Session:
    """One request's view of reversible pruning: what its refs restore, and the conversation's record."""

    call: ModelCall
    outcome: PruneOutcome
    expandable: Expandable
    record: ExpandRecord
    forwarded_turns: int = 0  # turns (or items) of the first forward: what a round appends comes after
    refs_asked: list[str] = field(default_factory=list)


class Expander:
    def __init__(self, store: ConversationStore, budgets: BudgetGuard, metrics: Metrics,
                 counters: TokenCounters) -> None:
        self._records = ExpandRecords(store, counters)
        self._budgets = budgets
        self._metrics = metrics
        self._counters = counters

    async def pinned(self, call: ModelCall) -> ExpandRecord | None:
        """Before the prune: the conversation's record and the room its pinned exchanges take
        (the pruner holds it under the target); None when the tool is off."""
        return await self._records.load(call) if call.policy.expand_tool else None

    async def open(self, call: ModelCall, outcome: PruneOutcome, record: ExpandRecord | None) -> Session | None:
        """The request's session, its markers decorated (module docstring); None when the tool
        is off or has no place in this request, or on a bug (the request goes without it)."""
        if record is None or outcome.unpruned_reason:
            return None
        result = outcome.result
        if not await self._records.carries_tool(call, record, result):
            _without_pins(result, record)
            return None
        try:
            found = expandable(result, call.body["messages"])
            counter = self._counters.for_model(call.body["model"])
            # The markers' refs and the pins are counted already: the pruner held their room
            # under the target (gateway.pruning.pipeline). The definition is a tool schema.
            tool_tokens = counter.count_text(orjson.dumps(tool_definition(call.format)).decode())
        except Exception as exc:  # noqa: BLE001 - a bug here must not fail the request
            log.exception("sieve_expand left out of this request (%s)", type(exc).__name__)
            _without_pins(result, record)
            return None
        session = Session(call, outcome, found, record)
        result.request = {**result.request, "messages": found.messages}
        result.tool_tokens = tool_tokens
        return session

    def body_for(self, session: Session | None, forwarded: dict[str, Any]) -> dict[str, Any]:
        """The forwarded body in the client's format with the pinned exchanges the decision
        holds room for put back (``PruneResult.pinned``), and the tool after the client's own.
        A pin whose place the format's writer did not keep as sent stays out, and its room
        is taken out of the forwarded count."""
        if session is None:
            return forwarded
        call, result, record = session.call, session.outcome.result, session.record
        chosen = [i for i in result.pinned if i < len(record.pins)]
        body, added = with_pins(forwarded, call.sent_body, call.format, [record.pins[i] for i in chosen])
        kept = {chosen[j] for j in added}
        result.forwarded_tokens -= sum(record.rooms[i].model_tokens for i in chosen
                                       if i in record.rooms and i not in kept)
        session.forwarded_turns = len(history_of(body, call.format) or ())
        return with_tool(body, call.format)

    async def answer(self, session: Session | None, record: RequestRecord, body: dict[str, Any],
                     response: UpstreamResponse, send: Send) -> UpstreamResponse:
        """The answer the client gets: the provider's, after Sieve's own rounds (module docstring)."""
        if session is None:
            return response
        codec = CODECS[session.call.format]
        rounds = 0
        while response.status == 200:
            response, answer = await _read_answer(codec, response)
            if answer is None or not answer.calls:
                break
            if rounds >= session.call.policy.expand_max_rounds:
                response = self._removed(codec, answer, response, ExpandOutcome.LIMIT)
                break
            await self._settle_round(record, answer.payload)
            body = codec.exchange(body, answer, self._results(session, answer))
            try:
                record.hold = await self._budgets.reserve(session.call, 0, body, session.call.format)
            except BudgetExceeded:
                record.hold = None  # the round answered is settled; nothing more is held
                if record.expand_usage and record.expand_usage[-1] is answer.payload.get("usage"):
                    record.expand_usage.pop()  # the accounting reads it from the answer relayed
                response = self._removed(codec, answer, response, ExpandOutcome.BUDGET)
                break
            rounds += 1
            response = await send(body)
        if response.status == 200 and response.chunks is not None:
            splice = session.call.format in SPLICED and rounds < session.call.policy.expand_max_rounds
            response.chunks = self._relayed(session, record, body, response.chunks, send if splice else None)
        elif response.status == 200 and session.call.format is WireFormat.RESPONSES:
            response = _without_tool(response)
        record.expand_refs = list(session.refs_asked)
        if rounds and response.status == 200:  # an exchange the client's next turn can follow
            await self._pin(session, body)
        return response

    async def _relayed(self, session: Session, record: RequestRecord, body: dict[str, Any],
                       chunks: AsyncIterator[bytes], send: Send | None) -> AsyncIterator[bytes]:
        """A relayed stream without Sieve's calls (``CallFilter``): one that names the tool only
        after text or a client call went out. With a round left (``send``): at the call, the
        round is read to its end, answered, and the next round follows what was already sent,
        in the same message (``_spliced``); otherwise the call is taken out, counted
        ``unhandled``. The bytes relayed are kept (not parsed) until a call needs them."""
        fmt = session.call.format
        calls = CallFilter(fmt, splice=send is not None)
        seen: list[bytes] = []
        kept = 0
        try:
            async for chunk in chunks:
                if send is not None:
                    seen.append(chunk)
                    kept += len(chunk)
                    if kept > MAX_HELD_BYTES and not calls.held:  # too long to keep: a later call is taken out
                        send, seen = None, []
                        calls.stop_splicing()
                out = calls.feed(chunk)
                if out:
                    yield out
                if calls.held:
                    break
            if not calls.held:
                tail = calls.flush()
                if tail:
                    yield tail
                return
            events = EventReader(CODECS[fmt].stream())
            for chunk in seen:
                events.feed(chunk)
            async for chunk in held_back(chunks, MAX_HELD_BYTES):  # the rest of the round: Sieve's call, read whole
                events.feed(chunk)
            assert send is not None
            async for out in self._spliced(session, record, body, events.reader.payload(), calls, send):
                yield out
        finally:
            if calls.removed:
                self._metrics.expand.labels(outcome=ExpandOutcome.UNHANDLED).inc(calls.removed)

    async def _spliced(self, session: Session, record: RequestRecord, body: dict[str, Any], payload: dict[str, Any],
                       sent: CallFilter, send: Send) -> AsyncIterator[bytes]:
        """A round answered mid-stream: the next round relayed after what was (``sent``: Messages
        blocks, chat calls, Responses items and events), its usage where the client's tap reads it
        for that round, and the exchange pinned once the provider takes the round; no budget or no
        answer for it: the stream ends there."""
        fmt = session.call.format
        codec, end, continued = CODECS[fmt], *SPLICED[fmt]
        answer = codec.answer(payload)
        assert answer is not None
        await self._settle_round(record, payload)
        body = codec.exchange(body, answer, self._results(session, answer))
        try:
            record.hold = await self._budgets.reserve(session.call, 0, body, fmt)
        except BudgetExceeded:
            record.hold = None
            self._metrics.expand.labels(outcome=ExpandOutcome.BUDGET).inc(len(answer.calls))
            yield await self._ended(record, payload, sent, end)
            return
        record.expand_refs = list(session.refs_asked)
        response = await send(body)
        if response.status != 200 or response.chunks is None:
            log.warning("a spliced sieve_expand round answered %s: the stream ends there", response.status)
            _release(response)
            yield await self._ended(record, payload, sent, end)
            return
        await self._pin(session, body)  # as for the rounds held back: the model asked for it
        calls = CallFilter(fmt)
        try:
            async for out in continued(response.chunks, sent, payload):
                relayed = calls.feed(out)
                if relayed:
                    yield relayed
            tail = calls.flush()
            if tail:
                yield tail
        finally:
            _release(response)
            if calls.removed:
                self._metrics.expand.labels(outcome=ExpandOutcome.UNHANDLED).inc(calls.removed)

    async def _ended(self, record: RequestRecord, payload: dict[str, Any], sent: CallFilter,
                     end: Callable[[dict[str, Any], CallFilter], bytes]) -> bytes:
        """A spliced stream ending at the round answered (no further round): what was reserved
        for one is released, and the round's usage goes out in the closing events, where the
        client's tap reads it as the answer's; the round, settled already, is taken out of the
        earlier rounds, so the accounting counts it once (and settles nothing more)."""
        await self._budgets.release(record.hold)
        record.hold = None
        if record.expand_usage and record.expand_usage[-1] is payload.get("usage"):
            record.expand_usage.pop()
        return end(payload, sent)

    def _results(self, session: Session, answer: ToolAnswer) -> list[str]:
        """The calls' results, answered from the client's history."""
        results = []
        for call in answer.calls:
            refs = refs_of_call(call.arguments)
            session.refs_asked.extend(refs)
            text, found = restore(refs, session.expandable.refs, session.call.body["messages"])
            outcome = ExpandOutcome.EXPANDED if refs and found == len(refs) else ExpandOutcome.NOT_AVAILABLE
            self._metrics.expand.labels(outcome=outcome).inc()
            results.append(text)
        return results

    def _removed(self, codec: Codec, answer: ToolAnswer, response: UpstreamResponse,
                 outcome: ExpandOutcome) -> UpstreamResponse:
        """The answer with Sieve's calls taken out (no further round is possible); a held
        stream is sent as the events of that whole answer."""
        self._metrics.expand.labels(outcome=outcome).inc(len(answer.calls))
        payload = codec.without(answer.payload)
        if response.chunks is None:
            return UpstreamResponse(response.status, response.headers, body=orjson.dumps(payload))
        return UpstreamResponse(response.status, response.headers, chunks=_replay(codec.frames(payload), _nothing()))

    async def _settle_round(self, record: RequestRecord, payload: dict[str, Any]) -> None:
        """The round just answered, settled at its usage; without one, as the accounting settles
        a whole answer without usage: the forwarded prompt plus the answer's characters / 4
        (a usage that is there but unreadable is junk: the reservation's estimate is charged)."""
        record.transformations.extend(input_transformations(payload))  # the provider's report, every round's
        raw = payload.get("usage")
        usage = usage_from_provider(raw) if usage_is_readable(raw) else None
        if usage is not None:
            record.expand_usage.append(raw)
            tokens: int | None = usage.prompt_tokens + usage.completion_tokens
        elif raw is None:
            tokens = record.outcome.result.forwarded_tokens + len(orjson.dumps(payload)) // 4
        else:
            tokens = None
        await self._budgets.settle(record.hold, tokens)

    async def _pin(self, session: Session, asked: dict[str, Any]) -> None:
        """Keep this request's expansion exchange for the conversation's later requests."""
        await self._records.pin(session.call, session.record, session.forwarded_turns, asked)


def _without_pins(result: PruneResult, record: ExpandRecord) -> None:
    """A forward that goes without the tool goes without the pinned exchanges the pruner
    counted too: their room comes off the forwarded count."""
    result.forwarded_tokens -= sum(record.rooms[i].model_tokens for i in result.pinned if i in record.rooms)
    result.pinned = ()


async def _read_answer(codec: Codec, response: UpstreamResponse) -> tuple[UpstreamResponse, ToolAnswer | None]:
    """The answer's calls: a whole body parsed; a stream read up to its first telling event
    (Sieve's call named first: read to the end). Returns the response to go on with (a
    stream's bytes read so far put back in front) and the answer (None: not Sieve's call)."""
    if response.chunks is None:
        try:
            return response, codec.answer(orjson.loads(response.body or b""))
        except orjson.JSONDecodeError:
            return response, None
    chunks = response.chunks.__aiter__()
    held: list[bytes] = []
    size = 0
    events = EventReader(codec.stream())
    async for chunk in _until(chunks, events):
        held.append(chunk)
        size += len(chunk)
        if size > MAX_HELD_BYTES:  # undecided this long (a long thinking): relayed, not held
            break
    if events.reader.decided is not True:
        return UpstreamResponse(response.status, response.headers, chunks=_replay(held, chunks),
                                release=response.release), None
    try:
        async for chunk in held_back(chunks, MAX_HELD_BYTES - size):
            events.feed(chunk)
    finally:
        _release(response)
    return response, codec.answer(events.reader.payload())


async def _until(chunks: AsyncIterator[bytes], events: EventReader) -> AsyncIterator[bytes]:
    """The stream's chunks up to (and with) the one that decides whose answer it is."""
    while events.reader.decided is None:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return
        events.feed(chunk)
        yield chunk


def _without_tool(response: UpstreamResponse) -> UpstreamResponse:
    """A whole Responses answer without Sieve's tool in the ``tools`` it echoes."""
    try:
        payload = orjson.loads(response.body or b"")
    except orjson.JSONDecodeError:
        return response
    if not isinstance(payload, dict):
        return response
    body = orjson.dumps(CODECS[WireFormat.RESPONSES].without(payload))
    return UpstreamResponse(response.status, response.headers, body=body, release=response.release)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that ends at once


async def _replay(held: list[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in held:
        yield chunk
    async for chunk in rest:
        yield chunk


def _release(response: UpstreamResponse) -> None:
    if response.release is not None:
        try:
            response.release.release()
        except Exception:  # noqa: BLE001 - closing a finished connection
            pass
