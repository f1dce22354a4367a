"""The usage taps of the Anthropic Messages and OpenAI Responses event streams.

Beside :class:`gateway.wire.sse.SSEUsageTap` (Chat Completions), with the same
framing (whole events go out at once, byte for byte; only an incomplete one is
held back) and the same readings, each from its format's own events:

==================  ==========================================  ================================
                    Anthropic Messages                          OpenAI Responses
==================  ==========================================  ================================
``usage``           ``message_start``'s ``message.usage``,      ``response.completed`` (or
                    updated by each ``message_delta.usage``     ``.incomplete`` / ``.failed``)
                                                                ``response.usage``
``finished``        ``message_stop``                            ``response.completed`` /
                                                                ``response.incomplete``
``error``           ``event: error``'s ``error``                ``error``, ``response.failed``
``delta_events``    ``content_block_delta`` events              ``response.*.delta`` events
==================  ==========================================  ================================

and the event that ends a stream Sieve could not finish, in the format's own
shape (``error_event``). Only events that name one of these types are parsed:
a type name in quotes only matches JSON structure, never text inside a string
(where its quotes are escaped), and content deltas, nearly every event, are
counted, not parsed.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

import orjson

from gateway.errors import SieveError
from gateway.wire.error_shapes import anthropic_error_body
from gateway.wire.formats.reasoning import input_transformations
from gateway.wire.sse import SSEUsageTap, event_data, split_events

_ANTHROPIC_READ = (b'"message_start"', b'"message_delta"', b'"message_stop"', b'"error"')
_RESPONSES_READ = (b'"response.created"', b'"response.completed"', b'"response.incomplete"',
                   b'"response.failed"', b'"error"')
_RESPONSES_END = ("response.completed", "response.incomplete")
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def _read_each(data: bytes, whole: bool, read: Callable[[dict[str, Any]], None]) -> None:
    """Every JSON object the events in ``data`` carry, handed to ``read`` (only parsed once a cheap
    byte test said an event worth reading is there)."""
    for event in split_events(data, whole):
        for payload in event_data(event):
            if isinstance(payload, dict):
                read(payload)


class AnthropicEventTap(SSEUsageTap):
    """Anthropic's events relayed unchanged; usage, the end and errors read on the way."""

    def __init__(self, strip_usage_chunk: bool = False) -> None:
        super().__init__(strip_usage_chunk=False)  # the usage rides on events the client needs

    def _pass(self, data: bytes, whole: bool) -> bytes:
        deltas = data.count(b'"content_block_delta"')
        if deltas:
            self.delta_events += deltas
            self.output.add(data)
        if any(marker in data for marker in _ANTHROPIC_READ):
            _read_each(data, whole, self._read)
        return data

    def _read(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind in ("message_start", "message_delta") and not self.transformations:
            # Announced with the message; a later event repeats them at most (read once).
            self.transformations = input_transformations(payload)
        if kind == "message_start" and isinstance(payload.get("message"), dict):
            usage = payload["message"].get("usage")
            if isinstance(usage, dict):
                self.usage = dict(usage)
        elif kind == "message_delta" and isinstance(payload.get("usage"), dict):
            # Cumulative counts: output_tokens, and (newer API versions) the input figures again.
            # message_start's usage counts one output token: only this one is the bill.
            self.usage = {**(self.usage or {}), **{k: v for k, v in payload["usage"].items() if v is not None}}
            self.usage_final = True
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error" and self.error is None:
            self.error = payload.get("error") if isinstance(payload.get("error"), dict) else {}

    @staticmethod
    def texts_of(payload: dict[str, Any]) -> Iterable[Any]:
        delta = payload.get("delta") if payload.get("type") == "content_block_delta" else None
        if isinstance(delta, dict):
            yield from (delta.get(name) for name in ("text", "partial_json", "thinking"))

    def error_event(self, exc: SieveError) -> bytes:
        return b"event: error\ndata: " + orjson.dumps(anthropic_error_body(exc)) + b"\n\n"


class ResponsesEventTap(SSEUsageTap):
    """The Responses API's events relayed unchanged; usage, the end and errors read on the way.

    It remembers the response object of ``response.created`` and the last
    ``sequence_number``, so a stream Sieve cannot finish ends as the API itself
    ends a failed one: ``response.failed`` with that response, status ``failed``
    and the error, numbered next in sequence (an ``error`` event when the stream
    broke before the response was announced)."""

    def __init__(self, strip_usage_chunk: bool = False) -> None:
        super().__init__(strip_usage_chunk=False)  # response.completed carries usage and the answer
        self.response: dict[str, Any] | None = None
        self.sequence = -1

    def _pass(self, data: bytes, whole: bool) -> bytes:
        deltas = data.count(b'.delta"')
        if deltas:
            self.delta_events += deltas
            self.output.add(data)
        last = data.rfind(b'"sequence_number"')
        if last >= 0:
            found = _SEQUENCE.match(data, last)
            if found:
                self.sequence = max(self.sequence, int(found.group(1)))
        if any(marker in data for marker in _RESPONSES_READ):
            _read_each(data, whole, self._read)
        return data

    def _read(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        response = payload.get("response") if isinstance(payload.get("response"), dict) else None
        if kind == "response.created" and response is not None:
            self.response = response
        elif kind in _RESPONSES_END or kind == "response.failed":
            self.transformations.extend(input_transformations(payload))
            if response is not None and isinstance(response.get("usage"), dict):
                self.usage = response["usage"]
                self.usage_final = True
            if kind in _RESPONSES_END:
                self.finished = True
            elif self.error is None:
                error = response.get("error") if response is not None else None
                self.error = error if isinstance(error, dict) else {}
        elif kind == "error" and self.error is None:
            self.error = {k: v for k, v in payload.items() if k != "type"}

    @staticmethod
    def texts_of(payload: dict[str, Any]) -> Iterable[Any]:
        kind = payload.get("type")
        if isinstance(kind, str) and kind.endswith(".delta"):
            yield payload.get("delta")

    def error_event(self, exc: SieveError) -> bytes:
        error = {"code": exc.code or exc.type, "message": exc.message}
        sequence = self.sequence + 1
        if self.response is not None:
            failed = {**self.response, "status": "failed", "error": error}
            payload = {"type": "response.failed", "sequence_number": sequence, "response": failed}
            return b"event: response.failed\ndata: " + orjson.dumps(payload) + b"\n\n"
        payload = {"type": "error", **error, "param": exc.param, "sequence_number": sequence}
        return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"
