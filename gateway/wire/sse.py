"""Server-sent events relay: pass events through as they come, read usage on the way.

When Sieve asked the provider for ``stream_options.include_usage`` on the
client's behalf (to settle budgets and count savings), the final usage-only
chunk is removed again so the client sees exactly the stream it asked for.

The events that carry the answer are not parsed on the way, only counted and
kept in part (:class:`StreamedOutput`): a stream that ends without its usage is
charged by the text it showed (``streamed_tokens``).

Only an incomplete event is ever held back; complete events go out at once,
byte for byte. Holding back the incomplete one is what lets a stream that
breaks mid-event still end with a whole error event instead of a torn one.
Events end with a blank line, LF or CRLF (both are valid SSE). Whatever the
provider sends is relayed: lines that are not JSON, comments and unknown
fields pass untouched and are simply not read.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Callable, Iterable

import orjson

from gateway.errors import SieveError

log = logging.getLogger("sieve.sse")

_USAGE = b'"usage"'
_ERROR = b'"error"'
_FINISH = re.compile(rb'"finish_reason"\s*:\s*"')
_DONE = re.compile(rb"(?m)^data: ?\[DONE\]")
_EVENT = re.compile(rb".*?(?:\r\n\r\n|\n\n)", re.S)
# An "event" this long without a blank line is not one: pass it on rather than hold it.
MAX_HELD_BYTES = 4 * 1024 * 1024
# How much of the answer's events a tap keeps to count them, should the usage never come.
SAMPLE_BYTES = 64 * 1024


class StreamedOutput:
    """The events of a stream that carry output: their bytes, and the first ``SAMPLE_BYTES`` kept.

    Only when the usage is missing are the kept events parsed and their texts counted, each
    delta on its own (which never counts fewer tokens than the text joined: no token spans two
    deltas), and the count scaled to all the bytes streamed (a provider's event frames are
    uniform, so the rest carries text about as densely as the start)::

        streamed.add(events)                                         # whole events with deltas
        streamed.tokens(texts_of_payload, counter.count_text)        # without usage, at the end
    """

    def __init__(self) -> None:
        self.bytes = 0
        self._sample: list[bytes] = []
        self._sampled = 0

    def add(self, events: bytes) -> None:
        self.bytes += len(events)
        if self._sampled < SAMPLE_BYTES:
            self._sample.append(events)
            self._sampled += len(events)

    def tokens(self, texts_of: Callable[[dict[str, Any]], Iterable[Any]], count_text: Callable[[str], int]) -> int:
        if not self._sampled:
            return 0
        counted = 0
        for event in split_events(b"".join(self._sample), True):
            for payload in event_data(event):
                if isinstance(payload, dict):
                    counted += sum(count_text(text) for text in texts_of(payload) if isinstance(text, str) and text)
        return math.ceil(counted * self.bytes / self._sampled)


class SSEUsageTap:
    """Feed upstream bytes; get bytes to send on; ``usage`` holds the last usage seen.

    ::

        tap = SSEUsageTap(strip_usage_chunk=True)
        for chunk in upstream:
            send(tap.feed(chunk))
        send(tap.flush())          # only at a normal end; after a failure the torn tail is dropped
        tap.finished               # a [DONE] or a finish_reason arrived: the answer is whole
        tap.error                  # the provider's own in-stream error event, if it sent one
    """

    def __init__(self, strip_usage_chunk: bool) -> None:
        self.strip = strip_usage_chunk
        self.usage: dict[str, Any] | None = None
        # Fallback when no usage ever arrives: the deltas streamed (one token each at least),
        # and the events that carry them, counted at the end (``streamed_tokens``).
        self.delta_events = 0
        self.output = StreamedOutput()
        self.usage_final = False  # the usage read is the provider's last word (not a stream's start)
        self.finished = False
        self.error: dict[str, Any] | None = None
        # The provider's input_transformations (reasoning it dropped): the formats that report them.
        self.transformations: list[Any] = []
        self._held: list[bytes] = []   # the incomplete event so far; it never holds a blank line
        self._held_len = 0

    def feed(self, chunk: bytes) -> bytes:
        if not chunk:
            return b""
        edge = b"".join(self._held[-3:])[-3:]  # a blank line may straddle chunks
        end = _last_event_end(edge + chunk) - len(edge)
        if end <= 0:
            self._held.append(chunk)
            self._held_len += len(chunk)
            if self._held_len > MAX_HELD_BYTES:
                log.warning("upstream sent %d bytes without an event boundary; relaying them unread",
                            self._held_len)
                return self._take()
            return b""
        complete = b"".join((*self._held, chunk[:end])) if self._held else chunk[:end]
        rest = chunk[end:]
        self._held = [rest] if rest else []
        self._held_len = len(rest)
        return self._pass(complete, whole=True)

    def flush(self) -> bytes:
        """The stream ended normally: a last event without its blank line goes out too."""
        tail = self._take()
        return self._pass(tail, whole=False) if tail else b""

    def error_event(self, exc: SieveError) -> bytes:
        """The event that ends a stream Sieve could not finish, in this format: a chat
        chunk holding OpenAI's ``{"error": {...}}``, which the SDKs raise."""
        return b"data: " + orjson.dumps(exc.body()) + b"\n\n"

    def _take(self) -> bytes:
        data = b"".join(self._held)
        self._held, self._held_len = [], 0
        return data

    def streamed_tokens(self, count_text: Callable[[str], int]) -> int:
        """The output tokens streamed so far (for a stream that ends without its usage)."""
        return max(self.delta_events, self.output.tokens(self.texts_of, count_text))

    @staticmethod
    def texts_of(payload: dict[str, Any]) -> Iterable[Any]:
        """The output texts one chunk carries: content, reasoning, refusals, tool calls."""
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            yield from (delta.get(name) for name in ("content", "reasoning_content", "reasoning", "refusal"))
            for call in [*(delta.get("tool_calls") or ()), delta.get("function_call")]:
                function = call.get("function", call) if isinstance(call, dict) else None
                if isinstance(function, dict):
                    yield from (function.get("name"), function.get("arguments"))

    def _pass(self, data: bytes, whole: bool) -> bytes:
        deltas = data.count(b'"delta"')
        if deltas:
            self.delta_events += deltas
            self.output.add(data)
        if not self.finished and (_has_finish(data) or (b"[DONE]" in data and _DONE.search(data))):
            self.finished = True
        if _ERROR in data and self.error is None:
            for event in split_events(data, whole):
                self._read_error(event)
        if _USAGE not in data:
            return data
        kept = [event for event in split_events(data, whole) if not (self._read_usage(event) and self.strip)]
        return b"".join(kept) if self.strip else data

    def _read_usage(self, event: bytes) -> bool:
        """Record usage from a ``data:`` event; True if it is a usage-only chunk."""
        for payload in event_data(event):
            if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
                self.usage = payload["usage"]
                self.usage_final = True
                return not payload.get("choices")
        return False

    def _read_error(self, event: bytes) -> None:
        for payload in event_data(event):
            if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
                self.error = payload["error"]
                return


def split_events(data: bytes, whole: bool) -> list[bytes]:
    """``data`` cut into its events, each with its blank line, byte for byte."""
    if not whole:
        return [data]
    if b"\r" not in data:  # the usual LF stream: a plain split, much cheaper than the regex
        return [event + b"\n\n" for event in data.split(b"\n\n")[:-1]]
    return _EVENT.findall(data)


def _has_finish(data: bytes) -> bool:
    """A non-null finish_reason in ``data`` (most chunks carry a null one: counted, not searched)."""
    named = data.count(b'"finish_reason"')
    if not named or named == data.count(b'"finish_reason":null') + data.count(b'"finish_reason": null'):
        return False
    return _FINISH.search(data) is not None


def event_data(event: bytes) -> list[Any]:
    """The JSON of each ``data:`` line of an event (lines that are not JSON are skipped)."""
    out = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            try:
                out.append(orjson.loads(line[5:].strip()))
            except orjson.JSONDecodeError:
                continue
    return out


def _last_event_end(data: bytes) -> int:
    """Index just past the last blank line (LF or CRLF) in ``data``; -1 if there is none."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)
