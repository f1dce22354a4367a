"""OpenAI Responses read into the chat view, and the decision written back as Responses items.

Reading (``input`` in order; a string ``input`` is one user message)::

    instructions                        -> a system message (written back untouched)
    message (user, system, developer)   -> a message of that role
    reasoning, assistant message,       -> one assistant message: the messages' text, each call
      function_call, custom_tool_call      a tool call with its call_id; a reasoning item rides
                                           with the call or message it precedes
    function_call_output,               -> a tool message answering that call_id
      custom_tool_call_output
    any other item type                 -> glued to a neighbouring view message: the one whose
                                           unit its call_id already joined, else the one being
                                           built, else the previous one (the next at the start)

So a call and its output make one unit, parallel calls included, and an item
Sieve does not know goes with a unit as a whole: it is never edited, and a
call/output pair of an unknown type is never split. Writing back walks
``input`` in its own order: the items of every forwarded view message as they
came (the same objects), a masked output with the mask text as its
``output``, an inserted marker as a user message item before the view message
it precedes. Reasoning items (``encrypted_content`` included) are never edited.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.pruning import PruneResult
from gateway.wire.chat import WireLimits
from gateway.wire.formats.content import parts_text
from gateway.wire.formats.merged_markers import merged_marker_texts
from gateway.wire.formats.responses_check import CALLS, OUTPUTS, check_responses_body
from gateway.wire.formats.view import ChatView, WireFormat


@dataclass(frozen=True, slots=True)
class ItemOrigin:
    """Where a view message came from: the ``input`` items it stands for (none: the
    instructions), and the output item a mask replaces (a tool message's)."""

    items: tuple[int, ...]
    output: int | None = None


@dataclass(slots=True)
class _Turn:
    """The assistant view message being built: its items, texts and calls."""

    items: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    said: bool = False  # holds an assistant message item


class ResponsesAdapter:
    format = WireFormat.RESPONSES

    def read(self, body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> ChatView:
        check_responses_body(body, limits)
        reader = _Reader()
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            reader.messages.append({"role": "system", "content": instructions})
            reader.origins.append([])
        for i, item in enumerate(_items(body)):
            reader.take(i, item)
        reader.finish()
        view: dict[str, Any] = {"model": body["model"], "messages": reader.messages}
        if isinstance(body.get("metadata"), dict):
            view["metadata"] = body["metadata"]
        origins = tuple(ItemOrigin(tuple(sorted(items)), reader.outputs.get(v))
                        for v, items in enumerate(reader.origins))
        return ChatView(view, origins)

    def write(self, body: Mapping[str, Any], view: ChatView, result: PruneResult) -> dict[str, Any]:
        if not result.changed or not isinstance(body.get("input"), list):
            return dict(body)
        out = dict(body)
        out["input"] = _written_items(body["input"], view, result)
        return out


def _items(body: Mapping[str, Any]) -> list[Any]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return items or []


class _Reader:
    """Builds the view messages and their item lists, item by item."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins: list[list[int]] = []      # per view message, its items (lists shared by identity)
        self.outputs: dict[int, int] = {}       # view index -> its output item
        self.turn: _Turn | None = None
        self.leading: list[int] = []            # items waiting for the first view message
        self.last: list[int] | None = None      # the items of the last view message from ``input``
        self.paired: dict[str, list[int]] = {}  # call_id of an unknown item -> the item list it joined

    def take(self, i: int, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            if item["role"] == "assistant":
                if self.turn is not None and (self.turn.said or self.turn.calls):
                    self.flush()  # a message after a call, or a second message: a turn of its own
                turn = self._open()
                turn.items.append(i)
                turn.texts.append(parts_text(item.get("content")))
                turn.said = True
            else:
                self.flush()
                self._emit({"role": item["role"], "content": parts_text(item.get("content"))}, [i])
        elif kind == "reasoning":
            self._open().items.append(i)
        elif kind in CALLS:
            turn = self._open()
            turn.items.append(i)
            arguments = item["arguments"] if kind == "function_call" else item["input"]
            turn.calls.append({"id": item["call_id"], "type": "function",
                               "function": {"name": item["name"], "arguments": arguments}})
        elif kind in OUTPUTS:
            self.flush()
            self._emit({"role": "tool", "tool_call_id": item["call_id"], "content": parts_text(item.get("output"))},
                       [i], output=i)
        else:
            self._glue(i, item)

    def finish(self) -> None:
        self.flush()
        if self.leading and self.last is not None:
            self._move(self.leading, self.last)

    def flush(self) -> None:
        turn, self.turn = self.turn, None
        if turn is None:
            return
        if not turn.said and not turn.calls:
            # Reasoning or unknown items with no call or message after them: they go
            # with the previous view message (with the next one at the very start).
            self._move(turn.items, self.last if self.last is not None else self.leading)
            return
        text = "\n".join(t for t in turn.texts if t)
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if turn.calls else "")}
        if turn.calls:
            message["tool_calls"] = turn.calls
        self._emit(message, turn.items)

    def _open(self) -> _Turn:
        if self.turn is None:
            self.turn = _Turn()
        return self.turn

    def _emit(self, message: dict[str, Any], items: list[int], output: int | None = None) -> None:
        if self.leading:
            self._move(items, self.leading)
            items, self.leading = self.leading, []
        if output is not None:
            self.outputs[len(self.messages)] = output
        self.messages.append(message)
        self.origins.append(items)
        self.last = items

    def _glue(self, i: int, item: Mapping[str, Any]) -> None:
        call_id = item.get("call_id")
        owner = self.paired.get(call_id) if isinstance(call_id, str) else None
        if owner is None:
            owner = self.turn.items if self.turn is not None else self.last if self.last is not None else self.leading
        owner.append(i)
        if isinstance(call_id, str):
            self.paired.setdefault(call_id, owner)

    def _move(self, items: list[int], into: list[int]) -> None:
        """``items`` join ``into``; unknown items paired with them follow."""
        into.extend(items)
        for call_id, owner in self.paired.items():
            if owner is items:
                self.paired[call_id] = into


def _written_items(items: list[Any], view: ChatView, result: PruneResult) -> list[Any]:
    """``items`` in their order: those of every forwarded view message (a masked output
    replaced), the inserted markers before the view message they precede (omission
    markers side by side merged into one: ``markers.py``)."""
    viewed = view.body["messages"]
    owner = {i: v for v, origin in enumerate(view.origins) for i in origin.items}
    forwarded: dict[int, dict[str, Any]] = {}
    before: dict[int, list[dict[str, Any]]] = defaultdict(list)
    pending: list[dict[str, Any]] = []
    for message, src in zip(result.request["messages"], result.sources):
        if src < 0:
            pending.append(message)
            continue
        forwarded[src] = message
        if pending and view.origins[src].items:
            before[src].extend(pending)
            pending = []
    out: list[Any] = []
    for i, item in enumerate(items):
        v = owner.get(i)
        if v is None:  # no view message at all to go with: kept as it came
            out.append(item)
            continue
        origin: ItemOrigin = view.origins[v]
        if i == origin.items[0] and v in before:
            out.extend(marker_item(text) for text in merged_marker_texts([m["content"] for m in before.pop(v)]))
        message = forwarded.get(v)
        if message is None:
            continue
        if i == origin.output and message.get("content") != viewed[v].get("content"):
            item = {**item, "output": message["content"]}
        out.append(item)
    out.extend(marker_item(text) for text in merged_marker_texts([m["content"] for m in pending]))
    return out


def marker_item(text: str) -> dict[str, Any]:
    """An inserted marker (omission, summary, reminder) as a user message item."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}

