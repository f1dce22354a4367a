"""The ``sieve_expand`` calls in each wire format's answers, and the round Sieve appends.

One :class:`Codec` per format (the table in ``gateway.expand.tool``): a whole
answer's calls, the round appended, the answer without Sieve's calls, that answer as
a stream's events, and a stream reader that decides on the first event naming a
tool or carrying text, then assembles the held stream into the answer a non-stream
call would have given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson

from gateway.expand.restore import TOOL_NAME
from gateway.wire import WireFormat, event_data, split_events


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
    """The response without Sieve's calls, and without its tool in the ``tools`` a response
    echoes (the client never offered it)."""
    out = orjson.loads(orjson.dumps(payload))
    out["output"] = [item for item in out.get("output") or ()
                     if not (item.get("type") == "function_call" and _is_mine(item.get("name")))]
    if isinstance(out.get("tools"), list):
        out["tools"] = [t for t in out["tools"] if not (isinstance(t, dict) and _is_mine(t.get("name")))]
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
