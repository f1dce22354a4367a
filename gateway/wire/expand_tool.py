"""The ``sieve_expand`` tool in each wire format: its definition, its calls in an answer,
the round Sieve appends, and an answer without the tool's calls.

The definition is fixed text placed after the client's own tools (their cached
prefix stays whole). What the tool does is ``gateway.pruning.expansion``; the rounds
are ``gateway.expander``. One :class:`Codec` per format:

==============  ======================  ============================  ===========================
                Chat Completions        Anthropic Messages            OpenAI Responses
==============  ======================  ============================  ===========================
a call          ``message.tool_calls``  a ``tool_use`` block          a ``function_call`` item
a stream names  ``delta.tool_calls[]``  ``content_block_start`` of     ``response.output_item``
it              ``.function.name``      a ``tool_use``                ``.added`` (function_call)
the round       assistant turn + tool   assistant turn + user turn    the output items +
appended        messages                of ``tool_result`` blocks     ``function_call_output``
==============  ======================  ============================  ===========================

A stream is decided by its first event that names a tool or carries text: Sieve's
tool first, and the stream is held back (read whole, assembled into the answer a
non-stream call would have given); anything else is relayed as it came.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson

from gateway.pruning.expansion import TOOL_DESCRIPTION, TOOL_NAME, TOOL_PARAMETERS
from gateway.wire.formats import WireFormat
from gateway.wire.sse import event_data, split_events

CHAT_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}
MESSAGES_TOOL: dict[str, Any] = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
RESPONSES_TOOL: dict[str, Any] = {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                  "parameters": TOOL_PARAMETERS, "strict": False}
_TOOLS = {WireFormat.CHAT: CHAT_TOOL, WireFormat.MESSAGES: MESSAGES_TOOL, WireFormat.RESPONSES: RESPONSES_TOOL}


def tool_definition(fmt: WireFormat) -> dict[str, Any]:
    return _TOOLS[fmt]


def with_tool(body: Mapping[str, Any], fmt: WireFormat) -> dict[str, Any]:
    """``body`` with the tool after the client's own (once: a body that has it keeps it as is)."""
    tools = list(body.get("tools") or ())
    if any(_tool_name(t) == TOOL_NAME for t in tools):
        return dict(body)
    return {**body, "tools": [*tools, tool_definition(fmt)]}


def _tool_name(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


@dataclass(slots=True)
class ExpandCall:
    id: str
    arguments: Any  # JSON text (Chat, Responses) or an object (Messages)


@dataclass(slots=True)
class ToolAnswer:
    """A whole answer in its format, and the ``sieve_expand`` calls it makes."""

    payload: dict[str, Any]
    calls: list[ExpandCall]


def _is_mine(name: Any) -> bool:
    return name == TOOL_NAME


# -- Chat Completions -------------------------------------------------------------------------------

def _chat_message(payload: Any) -> dict[str, Any] | None:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def chat_answer(payload: Any) -> ToolAnswer | None:
    message = _chat_message(payload)
    if message is None:
        return None
    calls = [ExpandCall(str(c.get("id")), (c.get("function") or {}).get("arguments"))
             for c in message.get("tool_calls") or () if isinstance(c, dict)
             and _is_mine((c.get("function") or {}).get("name"))]
    return ToolAnswer(payload, calls)


def chat_exchange(body: Mapping[str, Any], answer: ToolAnswer, results: list[str]) -> dict[str, Any]:
    """The assistant turn with Sieve's calls only (the client's calls of that turn are asked
    again with the content in view), and one tool message per call."""
    message = _chat_message(answer.payload) or {}
    turn = {"role": "assistant", "content": message.get("content"), "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": TOOL_NAME, "arguments": c.arguments or "{}"}}
        for c in answer.calls]}
    results_ = [{"role": "tool", "tool_call_id": c.id, "content": text} for c, text in zip(answer.calls, results)]
    return {**body, "messages": [*body["messages"], turn, *results_]}


def chat_without(payload: dict[str, Any]) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(payload))
    choice = out["choices"][0]
    message = choice["message"]
    calls = [c for c in message.get("tool_calls") or () if not _is_mine((c.get("function") or {}).get("name"))]
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
        message["content"] = message.get("content") or ""
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    return out


def chat_frames(payload: dict[str, Any]) -> list[bytes]:
    choice = payload["choices"][0]
    message = choice["message"]
    head = {"id": payload.get("id") or "chatcmpl-sieve", "object": "chat.completion.chunk",
            "created": payload.get("created") or 0, "model": payload.get("model") or ""}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
    chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]}]
    if isinstance(payload.get("usage"), dict):
        chunks.append({**head, "choices": [], "usage": payload["usage"]})
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


class ChatStream:
    """A chat stream's first choice assembled from its deltas (``StreamReader``)."""

    def __init__(self) -> None:
        self.decided: bool | None = None
        self.head: dict[str, Any] = {}
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Any = None

    def event(self, name: str | None, data: dict[str, Any]) -> None:
        self.head = self.head or {k: data.get(k) for k in ("id", "created", "model")}
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        choices = data.get("choices") or ()
        if not choices or not isinstance(choices[0], dict):
            return
        self.finish = choices[0].get("finish_reason") or self.finish
        delta = choices[0].get("delta") or {}
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.content += delta["content"]
            self.decided = False if self.decided is None else self.decided
        for call in delta.get("tool_calls") or ():
            slot = self.calls.setdefault(int(call.get("index", 0)), {"id": None, "name": "", "arguments": ""})
            function = call.get("function") or {}
            slot["id"] = call.get("id") or slot["id"]
            slot["name"] += function.get("name") or ""
            slot["arguments"] += function.get("arguments") or ""
            if self.decided is None and slot["name"]:
                self.decided = _is_mine(slot["name"])

    def payload(self) -> dict[str, Any]:
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for _, c in sorted(self.calls.items())]
        message = {"role": "assistant", "content": self.content or None, "tool_calls": calls}
        return {**self.head, "object": "chat.completion", "usage": self.usage,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish or "tool_calls"}]}


# -- Anthropic Messages -----------------------------------------------------------------------------

def messages_answer(payload: Any) -> ToolAnswer | None:
    blocks = payload.get("content") if isinstance(payload, dict) else None
    if not isinstance(blocks, list):
        return None
    calls = [ExpandCall(str(b.get("id")), b.get("input")) for b in blocks
             if isinstance(b, dict) and b.get("type") == "tool_use" and _is_mine(b.get("name"))]
    return ToolAnswer(payload, calls)


def messages_exchange(body: Mapping[str, Any], answer: ToolAnswer, results: list[str]) -> dict[str, Any]:
    """The assistant turn without the client's tool uses (asked again), then one user turn of
    ``tool_result`` blocks."""
    blocks = [b for b in answer.payload.get("content") or ()
              if isinstance(b, dict) and (b.get("type") != "tool_use" or _is_mine(b.get("name")))]
    turn = {"role": "assistant", "content": blocks}
    reply = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, "content": text}
                                         for c, text in zip(answer.calls, results)]}
    return {**body, "messages": [*body["messages"], turn, reply]}


def messages_without(payload: dict[str, Any]) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(payload))
    out["content"] = [b for b in out.get("content") or ()
                      if not (b.get("type") == "tool_use" and _is_mine(b.get("name")))]
    if not any(b.get("type") == "tool_use" for b in out["content"]) and out.get("stop_reason") == "tool_use":
        out["stop_reason"] = "end_turn"
    return out


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload}) + b"\n\n"


def messages_frames(payload: dict[str, Any]) -> list[bytes]:
    usage = payload.get("usage") or {}
    start = {**payload, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    frames = [_event("message_start", {"message": start})]
    for i, block in enumerate(payload.get("content") or ()):
        frames.append(_event("content_block_start", {"index": i, "content_block": block}))
        frames.append(_event("content_block_stop", {"index": i}))
    frames.append(_event("message_delta", {"delta": {"stop_reason": payload.get("stop_reason"),
                                                     "stop_sequence": None},
                                           "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    return frames + [_event("message_stop", {})]


class MessagesStream:
    """An Anthropic message assembled from its events (``StreamReader``)."""

    def __init__(self) -> None:
        self.decided: bool | None = None
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}

    def event(self, name: str | None, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self.message = dict(data["message"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            block = dict(data["content_block"])
            self.blocks[int(data.get("index", 0))] = block
            if self.decided is None and block.get("type") == "tool_use":
                self.decided = _is_mine(block.get("name"))
        elif kind == "content_block_delta":
            self._delta(int(data.get("index", 0)), data.get("delta") or {})
        elif kind == "message_delta":
            self.message.update({k: v for k, v in (data.get("delta") or {}).items() if v is not None})
            self.message["usage"] = {**(self.message.get("usage") or {}), **(data.get("usage") or {})}

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
            if delta.get("text") and self.decided is None:
                self.decided = False
        elif delta.get("type") == "input_json_delta":
            self.json[index] = self.json.get(index, "") + str(delta.get("partial_json", ""))
        elif delta.get("type") == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif delta.get("type") == "signature_delta":
            block["signature"] = str(delta.get("signature", ""))

    def payload(self) -> dict[str, Any]:
        blocks = []
        for i, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use" and i in self.json:
                try:
                    block = {**block, "input": orjson.loads(self.json[i] or "{}")}
                except orjson.JSONDecodeError:
                    block = {**block, "input": {}}
            blocks.append(block)
        return {**self.message, "content": blocks}


# -- OpenAI Responses -------------------------------------------------------------------------------

def responses_answer(payload: Any) -> ToolAnswer | None:
    output = payload.get("output") if isinstance(payload, dict) else None
    if not isinstance(output, list):
        return None
    calls = [ExpandCall(str(item.get("call_id")), item.get("arguments")) for item in output
             if isinstance(item, dict) and item.get("type") == "function_call" and _is_mine(item.get("name"))]
    return ToolAnswer(payload, calls)


def responses_exchange(body: Mapping[str, Any], answer: ToolAnswer, results: list[str]) -> dict[str, Any]:
    """The output items but the client's calls (asked again), then one ``function_call_output`` per call."""
    items = [item for item in answer.payload.get("output") or () if isinstance(item, dict)
             and (item.get("type") != "function_call" or _is_mine(item.get("name")))]
    before = body.get("input")
    history = [{"role": "user", "content": before}] if isinstance(before, str) else list(before or ())
    outputs = [{"type": "function_call_output", "call_id": c.id, "output": text}
               for c, text in zip(answer.calls, results)]
    return {**body, "input": [*history, *items, *outputs]}


def responses_without(payload: dict[str, Any]) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(payload))
    out["output"] = [item for item in out.get("output") or ()
                     if not (item.get("type") == "function_call" and _is_mine(item.get("name")))]
    return out


def responses_frames(payload: dict[str, Any]) -> list[bytes]:
    events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": {
        **payload, "status": "in_progress", "output": [], "usage": None}})]
    for i, item in enumerate(payload.get("output") or ()):
        events += [("response.output_item.added", {"output_index": i, "item": item}),
                   ("response.output_item.done", {"output_index": i, "item": item})]
    events.append(("response.completed", {"response": payload}))
    return [_event(name, {"sequence_number": n, **data}) for n, (name, data) in enumerate(events)]


class ResponsesStream:
    """A response assembled from its events: the whole one ``response.completed`` carries."""

    def __init__(self) -> None:
        self.decided: bool | None = None
        self.response: dict[str, Any] = {}

    def event(self, name: str | None, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "response.output_item.added" and isinstance(data.get("item"), dict):
            item = data["item"]
            if self.decided is None and item.get("type") == "function_call":
                self.decided = _is_mine(item.get("name"))
        elif kind == "response.output_text.delta" and data.get("delta") and self.decided is None:
            self.decided = False
        elif kind in ("response.completed", "response.incomplete") and isinstance(data.get("response"), dict):
            self.response = data["response"]

    def payload(self) -> dict[str, Any]:
        return self.response


# -- per format ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Codec:
    answer: Callable[[Any], ToolAnswer | None]
    exchange: Callable[[Mapping[str, Any], ToolAnswer, list[str]], dict[str, Any]]
    without: Callable[[dict[str, Any]], dict[str, Any]]
    frames: Callable[[dict[str, Any]], list[bytes]]
    stream: Callable[[], Any]


CODECS = {
    WireFormat.CHAT: Codec(chat_answer, chat_exchange, chat_without, chat_frames, ChatStream),
    WireFormat.MESSAGES: Codec(messages_answer, messages_exchange, messages_without, messages_frames, MessagesStream),
    WireFormat.RESPONSES: Codec(responses_answer, responses_exchange, responses_without, responses_frames,
                                ResponsesStream),
}


@dataclass(slots=True)
class EventReader:
    """SSE bytes cut into events, each handed to a format's stream reader."""

    reader: Any
    _buffer: bytes = b""
    chunks: list[bytes] = field(default_factory=list)

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        cut = self._buffer.rfind(b"\n\n")
        if cut < 0 or b"\r" in self._buffer:
            self._buffer = self._buffer.replace(b"\r\n", b"\n")
            cut = self._buffer.rfind(b"\n\n")
            if cut < 0:
                return
        whole, self._buffer = self._buffer[:cut + 2], self._buffer[cut + 2:]
        for event in split_events(whole, True):
            for data in event_data(event):
                if isinstance(data, dict):
                    self.reader.event(None, data)


# -- pins: a conversation's expansion exchanges, back where they were made ----------------------------

def history_of(body: Mapping[str, Any], fmt: WireFormat) -> list[Any] | None:
    """The body's list of turns or items (None: a Responses ``input`` given as one string)."""
    turns = body.get("input" if fmt is WireFormat.RESPONSES else "messages")
    return turns if isinstance(turns, list) else None


def digest(item: Any) -> str:
    return hashlib.blake2b(orjson.dumps(item, option=orjson.OPT_SORT_KEYS), digest_size=12).hexdigest()


def make_pin(sent: Mapping[str, Any], forwarded_before: int, asked: Mapping[str, Any],
             fmt: WireFormat) -> dict[str, Any] | None:
    """The exchange a request's rounds appended (``asked``'s turns past ``forwarded_before``),
    to go after the client's last turn of that request (``sent``)."""
    history, turns = history_of(sent, fmt), history_of(asked, fmt)
    if not history or turns is None:
        return None
    return {"at": len(history), "after": digest(history[-1]), "items": turns[forwarded_before:]}


def with_pins(forwarded: dict[str, Any], sent: Mapping[str, Any], fmt: WireFormat,
              pins: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    """``forwarded`` with each pin's exchange back after the client turn it followed, when the
    client's history still holds that turn (same place, same bytes) and something after it,
    and the forward kept the turn as it is; and the items put back."""
    history, turns = history_of(sent, fmt), history_of(forwarded, fmt)
    if not history or turns is None:
        return forwarded, []
    out, added = list(turns), []
    for pin in sorted(pins, key=lambda p: -int(p.get("at", 0))):
        at = int(pin.get("at", 0))
        if not 0 < at < len(history) or digest(history[at - 1]) != pin.get("after"):
            continue
        place = _kept_at(out, history, at - 1)
        if place is None:
            continue
        items = list(pin.get("items") or ())
        out[place + 1:place + 1] = items
        added += items
    key = "input" if fmt is WireFormat.RESPONSES else "messages"
    return ({**forwarded, key: out} if added else forwarded), added


def _kept_at(turns: list[Any], history: list[Any], index: int) -> int | None:
    """Where the client's turn ``history[index]`` is in the forwarded ``turns``, when it was kept
    as it is with the turn after it: counted from the end (a later turn equal to it, a repeated
    "continue", is told apart by how many equal ones follow), the newest turns being the ones a
    prune keeps."""
    item, following = history[index], history[index + 1]
    nth = sum(1 for h in history[index:] if h == item)
    for i in range(len(turns) - 1, -1, -1):
        if turns[i] == item:
            nth -= 1
            if nth == 0:
                return i if i + 1 < len(turns) and turns[i + 1] == following else None
    return None


# -- a relayed stream that names the tool after text: its calls taken out --------------------------------

class CallFilter:
    """Whole events in, whole events out, with Sieve's calls removed (a stream relayed because
    text or a client call came first; a ``sieve_expand`` call after that is not the client's
    to see, and no round can follow what was already sent). Events that cannot concern a
    call go out byte for byte; ``removed`` counts the calls taken out."""

    def __init__(self, fmt: WireFormat) -> None:
        self._fmt = fmt
        self._buffer = b""
        self.removed = 0
        self._mine: set[Any] = set()      # Sieve's calls: chat indices, block indices, item ids
        self._shift: dict[int, int] = {}  # a kept index -> its index once Sieve's are gone
        self._kept_calls = 0

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
            self._mine.update((item.get("id"), data.get("output_index")))
            self.removed += 1
            return None
        if data.get("item_id") in self._mine or item.get("id") in self._mine:
            return None
        if isinstance(data.get("response"), dict):
            response = data["response"]
            output = [i for i in response.get("output") or ()
                      if not (i.get("type") == "function_call" and _is_mine(i.get("name")))]
            return {**data, "response": {**response, "output": output}}
        index = data.get("output_index")
        if isinstance(index, int):
            return {**data, "output_index": index - sum(1 for m in self._mine if isinstance(m, int) and m < index)}
        return data
