"""A conversation's ``sieve_expand`` record in the state store: whether its forwards carry
the tool, and its pinned exchanges with the room they take in this request.

Kept beside the conversation's frozen plan (its key with ``|expand``), in memory or
Redis, from the conversation's first request on (it says whether its forwards carry the tool), bounded (``MAX_PINS`` exchanges, ``MAX_RECORD_BYTES``: the oldest go first) and
expiring with the plan (the policy's ``state_ttl_s``). Read before the prune: the pruner
holds the pins' room under the target (``gateway.pruning.pins``), so the record is what
the request's decision and its forward both go by.

A pin is the exchange one request's rounds appended (``gateway.expand.pinning``
``make_pin``), placed after the client turn that request ended with; its room is its
messages counted in the chat view, as the forwarded count counts messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.exchange import conversation_key
from gateway.expand.pinning import make_pin, pin_messages, pin_needs, pin_place
from gateway.pruning import PinnedRoom, PruneResult, TokenCounters
from gateway.state import ConversationStore
from gateway.wire import ModelCall, WireFormat, more_steps_follow

log = logging.getLogger("sieve.expander")
KEY_SUFFIX = "|expand"
MAX_PINS = 16            # expansions kept per conversation (the oldest go first)
MAX_RECORD_BYTES = 256 * 1024


@dataclass(slots=True)
class ExpandRecord:
    """One conversation's record as this request read it; ``rooms``: by pin index, the pins
    that have a place in this request's history, as the pruner counts them."""

    key: str
    # Whether the conversation's forwards carry the tool: decided on its first request, for its
    # whole life (None: not decided yet). ``tools`` is in the prefix a provider binds reasoning
    # and its cache to, so the tool is there from the first request or never.
    tool: bool | None = None
    pins: list[dict[str, Any]] = field(default_factory=list)
    rooms: dict[int, PinnedRoom] = field(default_factory=dict)

    @property
    def room(self) -> tuple[PinnedRoom, ...]:
        return tuple(self.rooms.values())

    def pin(self, sent: dict[str, Any], forwarded_turns: int, asked: dict[str, Any], fmt: WireFormat) -> bool:
        """Keep the exchange ``asked`` appended past the first forward's ``forwarded_turns``
        (one in the same place is replaced: a later round of the same request extends it)."""
        pin = make_pin(sent, forwarded_turns, asked, fmt)
        if pin is None:
            return False
        self.pins = [*(p for p in self.pins if p.get("at") != pin["at"]), pin][-MAX_PINS:]
        return True


class ExpandRecords:
    def __init__(self, store: ConversationStore, counters: TokenCounters) -> None:
        self._store = store
        self._counters = counters

    async def load(self, call: ModelCall) -> ExpandRecord:
        """``call``'s conversation record, its pins' room counted (an unreadable record: no
        pins; a bug counting them: none goes back; the request goes on without them)."""
        key = conversation_key(call.identity.org, call.body, call.sieve.conversation_id) + KEY_SUFFIX
        try:
            raw = await self._store.get(key)
            stored = orjson.loads(raw) if raw else {}
        except Exception as exc:  # noqa: BLE001 - the tool works without its record (no pins)
            log.warning("expansion record unavailable (%s)", exc)
            stored = {}
        tool = stored.get("tool")
        record = ExpandRecord(key, tool if isinstance(tool, bool) else None, list(stored.get("pins") or ()))
        try:
            record.rooms = self._rooms(call, record.pins)
        except Exception as exc:  # noqa: BLE001 - a bug here must not fail the request
            # No room: none goes back in this request (the pins are kept for the next).
            log.exception("pinned exchanges left out of this request (%s)", type(exc).__name__)
        return record

    def _rooms(self, call: ModelCall, pins: list[dict[str, Any]]) -> dict[int, PinnedRoom]:
        rooms = {}
        for i, pin in enumerate(pins):
            at = pin_place(call.sent_body, call.format, pin)
            if at is not None:
                rooms[i] = PinnedRoom(i, pin_needs(call.view, call.format, at), *self._size(call, pin))
        return rooms

    def _size(self, call: ModelCall, pin: dict[str, Any]) -> tuple[int, int]:
        """A pin's size (target rule, model encoding), kept in the pin with the encoding it
        was counted in: a replica that never saw the conversation does not tokenize its
        restored content (up to 32,000 characters a pin) again."""
        counter = self._counters.for_model(call.body["model"])
        known = pin.get("size")
        if isinstance(known, list) and len(known) == 3 and known[0] == counter.encoding_name:
            return int(known[1]), int(known[2])
        counts = [counter.message_counts(m) for m in pin_messages(pin, call.format, call.body["model"])]
        size = sum(c[0] for c in counts), sum(c[1] for c in counts)
        pin["size"] = [counter.encoding_name, *size]
        return size

    async def pin(self, call: ModelCall, record: ExpandRecord, forwarded_turns: int, asked: dict[str, Any]) -> None:
        """Keep the exchange ``call``'s rounds appended (``ExpandRecord.pin``), sized, in the store."""
        if record.pin(call.sent_body, forwarded_turns, asked, call.format):
            self._size(call, record.pins[-1])
            await self.save(record, call.policy.state_ttl_s)

    async def carries_tool(self, call: ModelCall, record: ExpandRecord, result: PruneResult) -> bool:
        """Whether the conversation carries the tool: its record's answer, or ``offered`` on its
        first request (saved: the answer holds for the conversation's whole life)."""
        if record.tool is None:
            record.tool = offered(call, result)
            await self.save(record, call.policy.state_ttl_s)
        return record.tool

    async def save(self, record: ExpandRecord, ttl_s: int) -> None:
        """The record, its oldest pins dropped to fit ``MAX_RECORD_BYTES``."""
        raw = orjson.dumps({"v": 1, "tool": bool(record.tool), "pins": record.pins})
        while len(raw) > MAX_RECORD_BYTES and record.pins:
            record.pins = record.pins[1:]
            raw = orjson.dumps({"v": 1, "tool": bool(record.tool), "pins": record.pins})
        try:
            await self._store.put(record.key, raw, ttl_s)
        except Exception as exc:  # noqa: BLE001
            log.warning("expansion record not saved (%s)", exc)


def offered(call: ModelCall, result: PruneResult) -> bool:
    """Whether a conversation carries the tool, decided on the first request Sieve sees of it and
    kept for its whole life (``tools`` is in the prefix a provider binds reasoning and its cache
    to: the tool is there from that request on, or never). On when that request opens the
    conversation (it holds no answer yet) and says more steps follow (``gateway.wire.continuation``),
    or is pruned already (its prefix changes anyway); otherwise the conversation goes without it,
    rather than gain it mid-way at its first prune."""
    opens = not any(m.get("role") == "assistant" for m in call.body["messages"])
    return (opens and more_steps_follow(call.sent_body, call.format, call.sieve.conversation_id)) or \
        result.changed


__all__ = ["KEY_SUFFIX", "MAX_PINS", "MAX_RECORD_BYTES", "ExpandRecord", "ExpandRecords", "offered"]
