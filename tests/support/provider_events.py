"""One assistant turn (text or a tool call) as the Anthropic and OpenAI APIs send it: a JSON body,
or the SSE event stream in the order and shape the real APIs stream it.

Anthropic Messages (docs.anthropic.com, "Streaming Messages"): ``message_start``, then per content
block ``content_block_start`` / ``content_block_delta`` (``text_delta`` or ``input_json_delta``) /
``content_block_stop``, a ``ping``, then ``message_delta`` (stop reason, output usage) and
``message_stop``. OpenAI Responses (platform.openai.com, "Streaming API responses"):
``response.created``, ``response.in_progress``, ``response.output_item.added``, the part's deltas
(``response.output_text.*`` or ``response.function_call_arguments.*``), ``response.output_item.done``
and ``response.completed`` with the whole response and its usage, every event numbered by
``sequence_number``. Each frame is ``event: <type>`` + ``data: <json>``, as both APIs write it.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import orjson

_ids = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Turn:
    """What the assistant says in one response: a text, or one tool call."""

    text: str | None = None
    call: ToolCall | None = None
    pieces: tuple[str, ...] | None = None  # how the text streams (default: a piece every 24 characters)
    # Preserved reasoning (tests.support.prefix_checks): a thinking block opening an Anthropic message, a
    # reasoning item opening a Responses output, and the request's input_transformations.
    thinking: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    transformations: tuple[dict[str, Any], ...] = ()
    preamble: str | None = None  # text said before the call (Claude's habit: a text block, then the tool)

    def output_tokens(self) -> int:
        size = len(self.text or "") + (len(orjson.dumps(self.call.arguments)) if self.call else 0)
        return max(1, size // 4)


@dataclasses.dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


def frame(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _chunks(text: str, size: int = 24) -> list[str]:
    """A text in the few pieces a provider streams it in (a client must join them, not take the first)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _text_pieces(turn: Turn) -> list[str]:
    return list(turn.pieces) if turn.pieces is not None else _chunks(turn.text or "")


# -- Anthropic Messages -------------------------------------------------------------------------

def _anthropic_usage(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": usage.output_tokens}


def _anthropic_block(turn: Turn) -> dict[str, Any]:
    if turn.call is not None:
        return {"type": "tool_use", "id": turn.call.call_id, "name": turn.call.name, "input": turn.call.arguments}
    return {"type": "text", "text": turn.text or ""}


def anthropic_message(turn: Turn, model: str, usage: Usage) -> dict[str, Any]:
    """The non-streamed ``Message``."""
    message = {"id": f"msg_fake{next(_ids):08d}", "type": "message", "role": "assistant", "model": model,
               "content": ([turn.thinking] if turn.thinking else []) +
                          ([{"type": "text", "text": turn.preamble}] if turn.preamble else []) + [_anthropic_block(turn)],
               "stop_reason": "tool_use" if turn.call else "end_turn", "stop_sequence": None,
               "usage": _anthropic_usage(usage)}
    if turn.transformations:
        message["input_transformations"] = list(turn.transformations)
    return message


def _thinking_frames(block: dict[str, Any]) -> list[bytes]:
    """A thinking block streamed (index 0): its text, then its signature."""
    return [frame({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            frame({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": block["thinking"]}}),
            frame({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "signature_delta", "signature": block["signature"]}}),
            frame({"type": "content_block_stop", "index": 0})]


def anthropic_stream(turn: Turn, model: str, usage: Usage) -> list[bytes]:
    """The SSE frames of the same message, streamed."""
    message = anthropic_message(turn, model, usage)
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**_anthropic_usage(usage), "output_tokens": 1}}
    frames = [frame({"type": "message_start", "message": start})]
    index = 0
    if turn.thinking:
        frames.extend(_thinking_frames(turn.thinking))
        index = 1
    if turn.preamble:
        frames += [frame({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                   frame({"type": "content_block_delta", "index": index,
                          "delta": {"type": "text_delta", "text": turn.preamble}}),
                   frame({"type": "content_block_stop", "index": index})]
        index += 1
    if turn.call is not None:
        frames.append(frame({"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": turn.call.call_id, "name": turn.call.name, "input": {}}}))
        frames.append(frame({"type": "ping"}))
        pieces = ["", *_chunks(orjson.dumps(turn.call.arguments).decode())]
        frames.extend(frame({"type": "content_block_delta", "index": index,
                             "delta": {"type": "input_json_delta", "partial_json": p}}) for p in pieces)
    else:
        frames.append(frame({"type": "content_block_start", "index": index,
                             "content_block": {"type": "text", "text": ""}}))
        frames.append(frame({"type": "ping"}))
        frames.extend(frame({"type": "content_block_delta", "index": index,
                             "delta": {"type": "text_delta", "text": p}}) for p in _text_pieces(turn))
    frames.append(frame({"type": "content_block_stop", "index": index}))
    frames.append(frame({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                            "stop_sequence": None},
                         "usage": {"output_tokens": usage.output_tokens}}))
    frames.append(frame({"type": "message_stop"}))
    return frames


# -- OpenAI Responses ---------------------------------------------------------------------------

def _responses_item(turn: Turn, item_id: str, *, done: bool) -> dict[str, Any]:
    status = "completed" if done else "in_progress"
    if turn.call is not None:
        return {"id": item_id, "type": "function_call", "status": status, "call_id": turn.call.call_id,
                "name": turn.call.name, "arguments": orjson.dumps(turn.call.arguments).decode() if done else ""}
    content = [{"type": "output_text", "text": turn.text or "", "annotations": [], "logprobs": []}] if done else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def responses_object(turn: Turn, model: str, usage: Usage, request: dict[str, Any], *,
                     response_id: str | None = None, item_id: str | None = None,
                     done: bool = True) -> dict[str, Any]:
    """The ``Response`` object: finished with its output and usage, or as ``response.created`` shows it."""
    n = next(_ids)
    response_id = response_id or f"resp_fake{n:08d}"
    item_id = item_id or (f"fc_fake{n:08d}" if turn.call else f"msg_fake{n:08d}")
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "status": "completed" if done else "in_progress", "error": None, "incomplete_details": None,
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "model": model, "output": (([turn.reasoning] if turn.reasoning else []) +
                                   [_responses_item(turn, item_id, done=True)]) if done else [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True), "previous_response_id": None,
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", True), "temperature": 1.0, "text": {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [], "top_p": 1.0,
        "truncation": "disabled", "user": None, "metadata": {},
        "usage": {"input_tokens": usage.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage.input_tokens + usage.output_tokens} if done else None,
        **({"input_transformations": list(turn.transformations)} if turn.transformations else {}),
    }


def responses_stream(turn: Turn, model: str, usage: Usage, request: dict[str, Any]) -> list[bytes]:
    """The SSE frames of one streamed response."""
    final = responses_object(turn, model, usage, request)
    rid, item = final["id"], final["output"][-1]
    pending = responses_object(turn, model, usage, request, response_id=rid, item_id=item["id"], done=False)
    seq = itertools.count()
    out = 1 if turn.reasoning else 0
    at = {"item_id": item["id"], "output_index": out}

    def ev(kind: str, **fields: Any) -> bytes:
        return frame({"type": kind, "sequence_number": next(seq), **fields})

    frames = [ev("response.created", response=pending), ev("response.in_progress", response=pending)]
    if turn.reasoning:
        frames += [ev("response.output_item.added", output_index=0,
                      item={**turn.reasoning, "encrypted_content": None}),
                   ev("response.output_item.done", output_index=0, item=turn.reasoning)]
    frames.append(ev("response.output_item.added", output_index=out,
                     item=_responses_item(turn, item["id"], done=False)))
    if turn.call is not None:
        frames.extend(ev("response.function_call_arguments.delta", **at, delta=p)
                      for p in _chunks(item["arguments"]))
        frames.append(ev("response.function_call_arguments.done", **at, arguments=item["arguments"]))
    else:
        part = item["content"][0]
        frames.append(ev("response.content_part.added", **at, content_index=0,
                         part={**part, "text": ""}))
        frames.extend(ev("response.output_text.delta", **at, content_index=0, delta=p, logprobs=[])
                      for p in _text_pieces(turn))
        frames.append(ev("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[]))
        frames.append(ev("response.content_part.done", **at, content_index=0, part=part))
    frames.append(ev("response.output_item.done", output_index=out, item=item))
    frames.append(ev("response.completed", response=final))
    return frames
