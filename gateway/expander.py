"""Reversible pruning on the request path: the ``sieve_expand`` tool and Sieve's own rounds.

The proxy calls this at two points of one request:

* ``open`` after the prune: with the policy's ``expand_tool`` on, when the forward
  masks or omits anything (or the conversation had the tool before: adding or
  removing a tool rewrites the provider's cached prefix, so once there it stays),
  the omission markers name their refs (``gateway.pruning.expansion``), the
  expansions answered earlier in the conversation go back in at the place they were
  made (pinned: the model asked for that content, and the frozen prefix grows rather
  than breaks), and ``with_tool`` puts the tool after the client's own.
* ``answer`` once the provider answered: while the answer calls ``sieve_expand``,
  Sieve answers the call from the client's own history (the refs' originals),
  appends the call and its result, and asks again, up to ``expand_max_rounds``
  rounds; the client gets the last round's answer only.

Mixed answers: a turn that calls ``sieve_expand`` beside client tools is not
returned; Sieve appends its own calls only (with their results) and asks again, and
the model, now with the content in view, calls the client's tools again if it still
needs them. A call that cannot get another round (rounds used up, no budget left) is
removed from the answer, the client's calls of that turn kept.

Budgets: every round holds its own reservation. Before asking again, the round
just answered is settled at its usage and the next round reserved
(``record.hold`` is then the new round's, settled by the accounting as usual);
``record.expand_usage`` keeps the earlier rounds' usage, which the savings count as
cost. Only Chat Completions is handled so far (stream and not); the other formats
forward no tool.

Streams: the first event that names a tool or carries text decides. Sieve's tool
named first: the stream is read to its end (held back, never relayed) and another
round is asked. Anything else: relayed from its start as it came (a ``sieve_expand``
call after text is then the client's to see; counted ``unhandled``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

import orjson

from gateway.accounting import RequestRecord
from gateway.budget_guard import BudgetGuard
from gateway.errors import BudgetExceeded
from gateway.pruner import PruneOutcome
from gateway.pruning.expansion import TOOL_NAME, Expandable, expandable, refs_of_call, restore
from gateway.pruning.tokens import TokenCounters
from gateway.state.protocols import ConversationStore
from gateway.telemetry.metrics import ExpandOutcome, Metrics
from gateway.upstream.base import UpstreamResponse
from gateway.usage_bounds import usage_is_readable
from gateway.wire.call import ChatCall
from gateway.wire.expand_tool import CHAT_TOOL, ChatAnswer, chat_answer, chat_exchange, chat_stream_frames, \
    with_tool, without_expand_calls
from gateway.wire.formats import WireFormat
from gateway.wire.sse import SSEUsageTap

log = logging.getLogger("sieve.expander")
KEY_SUFFIX = "|expand"
MAX_PINS = 16            # expansions kept per conversation (the oldest go first)
MAX_RECORD_BYTES = 256 * 1024

Send = Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]


@dataclass(slots=True)
class Session:
    """One request's view of reversible pruning: what its refs restore, and the conversation's record."""

    call: ChatCall
    outcome: PruneOutcome
    expandable: Expandable
    key: str
    pins: list[dict[str, Any]] = field(default_factory=list)
    had_tool: bool = False
    refs_asked: list[str] = field(default_factory=list)


class Expander:
    def __init__(self, store: ConversationStore, budgets: BudgetGuard, metrics: Metrics,
                 counters: TokenCounters) -> None:
        self._store = store
        self._budgets = budgets
        self._metrics = metrics
        self._counters = counters

    async def open(self, call: ChatCall, outcome: PruneOutcome) -> Session | None:
        """The request's session, its markers decorated and its pins put back (module
        docstring); None when the tool is off or has no place in this request."""
        if not call.policy.expand_tool or call.format is not WireFormat.CHAT or outcome.unpruned_reason:
            return None
        result = outcome.result
        found = expandable(result)
        key = outcome.conversation_key + KEY_SUFFIX
        record = await self._load(key)
        if not found.removed and not record.get("tool"):
            return None
        session = Session(call, outcome, found, key, list(record.get("pins") or ()), bool(record.get("tool")))
        counter = self._counters.for_model(call.body["model"])
        before = sum(counter.model_tokens(m) for m in result.request.get("messages") or ())
        messages = _with_pins(found.messages, result.sources, result.state.fingerprints, session.pins)
        result.request = {**result.request, "messages": messages}
        tool_tokens = counter.count_text(orjson.dumps(CHAT_TOOL).decode())
        result.forwarded_tokens += sum(counter.model_tokens(m) for m in messages) - before + tool_tokens
        if not session.had_tool:
            await self._save(session)
        return session

    @staticmethod
    def with_tool(session: Session | None, body: dict[str, Any]) -> dict[str, Any]:
        return body if session is None else with_tool(body, session.call.format)

    async def answer(self, session: Session | None, record: RequestRecord, body: dict[str, Any],
                     response: UpstreamResponse, send: Send) -> UpstreamResponse:
        """The answer the client gets: the provider's, after Sieve's own rounds (module docstring)."""
        if session is None:
            return response
        rounds = 0
        while response.status == 200:
            response, answer, usage = await _read_answer(response)
            if answer is None or not answer.expand_calls:
                break
            if rounds >= session.call.policy.expand_max_rounds:
                return self._removed(answer, usage, response, ExpandOutcome.LIMIT)
            await self._settle_round(record, usage)
            body = {**body, "messages": [*body["messages"], *self._exchange(session, answer)]}
            try:
                record.hold = await self._budgets.reserve(session.call, 0, body, session.call.format)
            except BudgetExceeded:
                record.hold = None
                return self._removed(answer, None, response, ExpandOutcome.BUDGET)
            rounds += 1
            response = await send(body)
        record.expand_refs = list(session.refs_asked)
        if rounds:
            await self._pin(session, body)
        return response

    def _exchange(self, session: Session, answer: ChatAnswer) -> list[dict[str, Any]]:
        """The call and its results, answered from the client's history."""
        results = []
        for call in answer.expand_calls:
            refs = refs_of_call((call.get("function") or {}).get("arguments"))
            session.refs_asked.extend(refs)
            text, found = restore(refs, session.expandable.refs, session.call.body["messages"])
            outcome = ExpandOutcome.EXPANDED if refs and found == len(refs) else ExpandOutcome.NOT_AVAILABLE
            self._metrics.expand.labels(outcome=outcome).inc()
            results.append(text)
        return chat_exchange(answer, results)

    def _removed(self, answer: ChatAnswer, payload: dict[str, Any] | None, response: UpstreamResponse,
                 outcome: ExpandOutcome) -> UpstreamResponse:
        """The answer with Sieve's calls taken out (no further round is possible)."""
        self._metrics.expand.labels(outcome=outcome).inc(len(answer.expand_calls))
        stream = response.chunks is not None
        whole = payload if payload is not None and not stream else {
            "choices": [{"index": 0, "message": answer.message, "finish_reason": "tool_calls"}]}
        body = without_expand_calls(whole)
        if not stream:
            return UpstreamResponse(response.status, response.headers, body=body)
        usage = payload.get("usage") if isinstance(payload, dict) else None
        return UpstreamResponse(response.status, response.headers, chunks=_replay(chat_stream_frames(body, usage),
                                                                                  _nothing()))

    async def _settle_round(self, record: RequestRecord, payload: dict[str, Any] | None) -> None:
        """The round just answered, settled at its usage (its estimate when it reported none)."""
        usage = payload.get("usage") if isinstance(payload, dict) else None
        tokens = None
        if isinstance(usage, dict) and usage_is_readable(usage):
            tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
            record.expand_usage.append(usage)
        await self._budgets.settle(record.hold, tokens)

    async def _pin(self, session: Session, body: dict[str, Any]) -> None:
        """Keep this request's expansion exchanges for the conversation's later requests."""
        forwarded = len(session.outcome.result.request.get("messages") or ())
        fps = session.outcome.result.state.fingerprints
        at = len(session.call.body["messages"])
        if not fps or at == 0:
            return
        pin = {"at": at, "after": fps[at - 1], "messages": body["messages"][forwarded:]}
        session.pins = [*(p for p in session.pins if p.get("at") != at), pin][-MAX_PINS:]
        await self._save(session)

    async def _load(self, key: str) -> dict[str, Any]:
        try:
            raw = await self._store.get(key)
            return orjson.loads(raw) if raw else {}
        except Exception as exc:  # noqa: BLE001 - the tool works without its record (no pins)
            log.warning("expansion record unavailable (%s)", exc)
            return {}

    async def _save(self, session: Session) -> None:
        raw = orjson.dumps({"v": 1, "tool": True, "pins": session.pins})
        while len(raw) > MAX_RECORD_BYTES and session.pins:
            session.pins = session.pins[1:]
            raw = orjson.dumps({"v": 1, "tool": True, "pins": session.pins})
        try:
            await self._store.put(session.key, raw, session.call.policy.state_ttl_s)
        except Exception as exc:  # noqa: BLE001
            log.warning("expansion record not saved (%s)", exc)


def _with_pins(messages: list[dict[str, Any]], sources: list[int], fingerprints: list[str],
               pins: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each pin's exchange back after the original message it followed
    (when the history still holds that message, and something after it)."""
    out = list(messages)
    for pin in sorted(pins, key=lambda p: -int(p.get("at", 0))):
        at = int(pin.get("at", 0))
        if not 0 < at < len(fingerprints) or fingerprints[at - 1] != pin.get("after"):
            continue
        if at - 1 not in sources:
            continue
        place = sources.index(at - 1) + 1
        out[place:place] = list(pin.get("messages") or ())
    return out


async def _read_answer(response: UpstreamResponse) -> tuple[UpstreamResponse, ChatAnswer | None, Any]:
    """The answer's calls: a whole body parsed; a stream read up to its first telling event
    (Sieve's call named first: read to the end). Returns the response to go on with
    (a stream's bytes read so far put back in front), the answer (None: not Sieve's call)
    and its payload (the body, or the usage a held stream reported)."""
    if response.chunks is None:
        try:
            payload = orjson.loads(response.body or b"")
        except orjson.JSONDecodeError:
            return response, None, None
        return response, chat_answer(payload), payload
    return await _read_stream(response)


async def _read_stream(response: UpstreamResponse) -> tuple[UpstreamResponse, ChatAnswer | None, Any]:
    assert response.chunks is not None
    chunks = response.chunks.__aiter__()
    held: list[bytes] = []
    reader = _ChatDeltas()
    async for chunk in _until(chunks, held, reader):
        held.append(chunk)
    if reader.decided is not True:
        return UpstreamResponse(response.status, response.headers, chunks=_replay(held, chunks),
                                release=response.release), None, None
    tap = SSEUsageTap(strip_usage_chunk=False)
    for chunk in held:
        tap.feed(chunk)
    async for chunk in chunks:
        reader.feed(chunk)
        tap.feed(chunk)
    tap.flush()
    _release(response)
    return response, reader.answer(), {"usage": tap.usage} if tap.usage else None


async def _until(chunks: AsyncIterator[bytes], held: list[bytes], reader: "_ChatDeltas") -> AsyncIterator[bytes]:
    """The stream's chunks up to (and with) the one that decides whose answer it is."""
    while reader.decided is None:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return
        reader.feed(chunk)
        yield chunk


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


class _ChatDeltas:
    """A Chat Completions stream's first choice, assembled from its deltas; ``decided``:
    None until an event names a tool or carries text, then whether Sieve's tool came first."""

    def __init__(self) -> None:
        self._buffer = b""
        self.decided: bool | None = None
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
                    self._delta(line[5:].strip())

    def _delta(self, data: bytes) -> None:
        try:
            payload = orjson.loads(data)
            delta = payload["choices"][0]["delta"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.content += delta["content"]
            if self.decided is None:
                self.decided = False
        for call in delta.get("tool_calls") or ():
            slot = self.calls.setdefault(int(call.get("index", 0)), {"id": None, "name": "", "arguments": ""})
            function = call.get("function") or {}
            slot["id"] = call.get("id") or slot["id"]
            slot["name"] += function.get("name") or ""
            slot["arguments"] += function.get("arguments") or ""
            if self.decided is None and slot["name"]:
                self.decided = slot["name"] == TOOL_NAME

    def answer(self) -> ChatAnswer:
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for _, c in sorted(self.calls.items())]
        mine = [c for c in calls if c["function"]["name"] == TOOL_NAME]
        message = {"role": "assistant", "content": self.content or None, "tool_calls": calls}
        return ChatAnswer(message, mine, [c for c in calls if c not in mine])
