"""A relayed stream that names ``sieve_expand`` after text or a client call: the call taken out."""

from __future__ import annotations

from typing import Any, AsyncIterator

import orjson

from gateway.errors import UpstreamUnavailable
from gateway.expand.codecs import _is_mine, responses_without
from gateway.expand.restore import TOOL_NAME
from gateway.wire import WireFormat, event_data, split_events


# The most of a round Sieve holds back (read, not relayed) or keeps to splice the next one in:
# a real sieve_expand call is a few refs. A provider streaming more is cut (502), so a hostile
# or broken one cannot make a replica hold its stream (issue 28: 93 MB in 45 s).
MAX_HELD_BYTES = 1 << 20


async def held_back(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """A round Sieve holds back, read to its end: ``UpstreamUnavailable`` past ``limit`` bytes."""
    read = 0
    async for chunk in chunks:
        read += len(chunk)
        if read > limit:
            raise UpstreamUnavailable(f"the provider streamed over {MAX_HELD_BYTES} bytes into Sieve's own "
                                      "sieve_expand call: the round was cut")
        yield chunk


class CallFilter:
    """Whole events in, whole events out, with Sieve's calls removed (a stream relayed because
    text or a client call came first; a ``sieve_expand`` call after that is not the client's
    to see, and no round can follow what was already sent). Events that cannot concern a
    call go out byte for byte; ``removed`` counts the calls taken out."""

    def __init__(self, fmt: WireFormat, splice: bool = False) -> None:
        self._fmt = fmt
        self._buffer = b""
        self.removed = 0
        # With ``splice`` (Chat, Messages): at Sieve's call nothing more goes out (``held``); the
        # caller reads the round to its end, asks again and relays the next round after what was
        # relayed: Messages blocks after the ``blocks_sent``, chat calls after ``calls_sent``.
        self._splice = splice
        self.held = False
        self.blocks_sent = 0
        self.items_sent = 0   # Responses: output items relayed, and events (their sequence numbers)
        self.events_sent = 0
        self._mine: set[Any] = set()      # Sieve's calls: chat indices, block indices, item ids
        self._shift: dict[int, int] = {}  # a kept index -> its index once Sieve's are gone
        self._kept_calls = 0

    def stop_splicing(self) -> None:
        """From now on a Sieve call is taken out, not held (the caller can no longer splice)."""
        self._splice = False

    def feed(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        cut = self._buffer.rfind(b"\n\n")
        if cut < 0:
            return b""
        whole, self._buffer = self._buffer[:cut + 2], self._buffer[cut + 2:]
        return b"".join(self._event(e) for e in split_events(whole, True))

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest

    def _event(self, event: bytes) -> bytes:
        out = self._filtered(event)
        if out and self._fmt is WireFormat.RESPONSES:
            self.events_sent += 1
            self.items_sent += b'"response.output_item.added"' in out
        return out

    def _filtered(self, event: bytes) -> bytes:
        if self.held:
            return b""
        if self._fmt is WireFormat.MESSAGES and b"content_block_start" in event:
            self._count_block(event)
            if self.held:
                return b""
        if not self._mine and TOOL_NAME.encode() not in event:
            self._count_client_calls(event)
            return event
        data = event_data(event)
        if len(data) != 1 or not isinstance(data[0], dict):
            return event
        out = {WireFormat.CHAT: self._chat, WireFormat.MESSAGES: self._messages,
               WireFormat.RESPONSES: self._responses}[self._fmt](data[0])
        if out is None:
            return b""
        name = next((line[6:].strip() for line in event.split(b"\n") if line.startswith(b"event:")), None)
        return (b"event: " + name + b"\n" if name else b"") + b"data: " + orjson.dumps(out) + b"\n\n"

    @property
    def calls_sent(self) -> int:
        return self._kept_calls

    def _count_block(self, event: bytes) -> None:
        """A Messages block starting: Sieve's call (held, when splicing), or one more block sent."""
        for data in event_data(event):
            block = data.get("content_block") if isinstance(data, dict) else None
            if not isinstance(block, dict):
                continue
            if self._splice and block.get("type") == "tool_use" and _is_mine(block.get("name")):
                self.held = True
            elif not (block.get("type") == "tool_use" and _is_mine(block.get("name"))):
                self.blocks_sent += 1

    def _count_client_calls(self, event: bytes) -> None:
        """The client's calls, counted as they pass (a finish that names calls stays then)."""
        if self._fmt is WireFormat.MESSAGES and b'"tool_use"' in event and b"content_block_start" in event:
            self._kept_calls += 1
        if self._fmt is not WireFormat.CHAT or b'"tool_calls"' not in event:
            return
        for data in event_data(event):
            for choice in data.get("choices") or () if isinstance(data, dict) else ():
                for call in (choice.get("delta") or {}).get("tool_calls") or ():
                    if (call.get("function") or {}).get("name"):
                        self._kept_calls += 1

    def _chat(self, data: dict[str, Any]) -> dict[str, Any] | None:
        choices = data.get("choices") or ()
        if not choices or not isinstance(choices[0], dict):
            return data
        delta = choices[0].get("delta") or {}
        kept = []
        for call in delta.get("tool_calls") or ():
            index = int(call.get("index", 0))
            if _is_mine((call.get("function") or {}).get("name")) and self._splice:
                self.held = True  # (its chunk goes no further: the round is Sieve's to answer)
                return None
            if _is_mine((call.get("function") or {}).get("name")):
                self._mine.add(index)
                self.removed += 1
            elif index not in self._mine:
                if (call.get("function") or {}).get("name"):
                    self._kept_calls += 1
                kept.append({**call, "index": index - sum(1 for m in self._mine if m < index)})
        choice = dict(choices[0])
        if "tool_calls" in delta:
            delta = {k: v for k, v in delta.items() if k != "tool_calls"} | ({"tool_calls": kept} if kept else {})
            choice["delta"] = delta
        if choice.get("finish_reason") == "tool_calls" and not self._kept_calls:
            choice["finish_reason"] = "stop"
        if not delta and choice.get("finish_reason") is None and not data.get("usage"):
            return None
        return {**data, "choices": [choice, *choices[1:]]}

    def _messages(self, data: dict[str, Any]) -> dict[str, Any] | None:
        kind, index = data.get("type"), data.get("index")
        block = data.get("content_block") or {}
        if kind == "content_block_start" and block.get("type") == "tool_use":
            if _is_mine(block.get("name")):
                self._mine.add(index)
                self.removed += 1
                return None
            self._kept_calls += 1
        if index in self._mine:
            return None
        if isinstance(index, int):
            return {**data, "index": index - sum(1 for m in self._mine if m < index)}
        delta = data.get("delta") or {}
        if kind == "message_delta" and delta.get("stop_reason") == "tool_use" and not self._kept_calls:
            return {**data, "delta": {**delta, "stop_reason": "end_turn"}}
        return data

    def _responses(self, data: dict[str, Any]) -> dict[str, Any] | None:
        item = data.get("item") or {}
        if data.get("type") == "response.output_item.added" and item.get("type") == "function_call" \
                and _is_mine(item.get("name")):
            if self._splice:
                self.held = True
                return None
            self._mine.update((item.get("id"), data.get("output_index")))
            self.removed += 1
            return None
        if data.get("item_id") in self._mine or item.get("id") in self._mine:
            return None
        if isinstance(data.get("response"), dict):
            return {**data, "response": responses_without(data["response"])}
        index = data.get("output_index")
        if isinstance(index, int):
            return {**data, "output_index": index - sum(1 for m in self._mine if isinstance(m, int) and m < index)}
        return data


async def _whole_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A continuing round's stream cut at event boundaries: each piece holds whole events only
    (an event split across chunks waits for its end; a tail without one is not an event)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n")
        cut = buffer.rfind(b"\n\n")
        if cut >= 0:
            whole, buffer = buffer[:cut + 2], buffer[cut + 2:]
            yield whole


async def continued_blocks(chunks: AsyncIterator[bytes], sent: "CallFilter",
                           payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """A Messages stream continuing one already under way: its ``message_start`` and pings
    left out, its blocks numbered after the ``offset`` already sent, and its
    ``message_delta`` usage carrying its own input figures too (what the client's tap reads
    for the round)."""
    usage, offset = {}, sent.blocks_sent
    async for whole in _whole_events(chunks):
        out = []
        for event in split_events(whole, True):
            for data in event_data(event):
                kind = data.get("type") if isinstance(data, dict) else None
                if kind == "message_start":
                    usage = dict((data.get("message") or {}).get("usage") or {})
                elif kind in ("content_block_start", "content_block_delta", "content_block_stop"):
                    out.append(_event(kind, {**data, "index": int(data.get("index", 0)) + offset}))
                elif kind == "message_delta":
                    out.append(_event(kind, {**data, "usage": {**usage, **(data.get("usage") or {})}}))
                elif kind is not None and kind != "ping":
                    out.append(_event(kind, data))
        if out:
            yield b"".join(out)


def message_end(usage: dict[str, Any]) -> bytes:
    """The end of a Messages stream Sieve closes itself."""
    return _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                     "stop_sequence": None}, "usage": usage}) \
        + _event("message_stop", {"type": "message_stop"})


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def continued_chunks(chunks: AsyncIterator[bytes], sent: "CallFilter",
                           payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """A chat stream continuing one already under way: its tool calls numbered after the
    ones already sent; everything else (its usage chunk and ``[DONE]`` included) as it came."""
    offset = sent.calls_sent
    async for whole in _whole_events(chunks):
        if not offset or b'"tool_calls"' not in whole:
            yield whole
            continue
        out = []
        for event in split_events(whole, True):
            data = event_data(event)
            if b'"tool_calls"' not in event or len(data) != 1 or not isinstance(data[0], dict):
                out.append(event)
                continue
            choices = [dict(c) for c in data[0].get("choices") or ()]
            for c in choices:
                delta = dict(c.get("delta") or {})
                if delta.get("tool_calls"):
                    delta["tool_calls"] = [{**t, "index": int(t.get("index", 0)) + offset} for t in delta["tool_calls"]]
                c["delta"] = delta
            out.append(b"data: " + orjson.dumps({**data[0], "choices": choices}) + b"\n\n")
        yield b"".join(out)


def chat_end(usage: Any = None) -> bytes:
    """The end of a chat stream Sieve closes itself; with ``usage``, its usage chunk (the
    client's tap reads it, and leaves it out for a client that did not ask for it)."""
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    out = b"data: " + orjson.dumps(chunk) + b"\n\n"
    if isinstance(usage, dict):
        out += b"data: " + orjson.dumps({"object": "chat.completion.chunk", "choices": [], "usage": usage}) + b"\n\n"
    return out + b"data: [DONE]\n\n"


async def continued_items(chunks: AsyncIterator[bytes], sent: CallFilter,
                          payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """A Responses stream continuing one already under way: its ``response.created`` and
    ``.in_progress`` left out, its items numbered after the ones sent, its events after
    theirs, and the response it completes with holding the items sent before its own."""
    before = [item for item in payload.get("output") or ()
              if not (item.get("type") == "function_call" and _is_mine(item.get("name")))][:sent.items_sent]
    n = sent.events_sent
    async for whole in _whole_events(chunks):
        out = []
        for event in split_events(whole, True):
            for data in event_data(event):
                kind = data.get("type") if isinstance(data, dict) else None
                if kind is None or kind in ("response.created", "response.in_progress"):
                    continue
                data = {**data, "sequence_number": n}
                n += 1
                if isinstance(data.get("output_index"), int):
                    data["output_index"] += len(before)
                if isinstance(data.get("response"), dict):
                    response = data["response"]
                    data["response"] = {**response, "output": [*before, *(response.get("output") or ())]}
                out.append(_event(kind, data))
        if out:
            yield b"".join(out)


def responses_end(payload: dict[str, Any], sent: CallFilter) -> bytes:
    """The end of a Responses stream Sieve closes itself: the round's response, completed
    with the items that were sent (its usage the round's)."""
    output = [item for item in payload.get("output") or ()
              if not (item.get("type") == "function_call" and _is_mine(item.get("name")))][:sent.items_sent]
    return _event("response.completed", {"type": "response.completed", "sequence_number": sent.events_sent,
                                         "response": responses_without({**payload, "output": output})})
