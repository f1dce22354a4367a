"""The ``sieve_expand`` tool in each wire format: its definition, and its calls in an answer.

The definition is fixed text placed after the client's own tools (their cached
prefix stays whole). What the tool does is ``gateway.pruning.expansion``; the
rounds are ``gateway.expander``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import orjson

from gateway.pruning.expansion import TOOL_DESCRIPTION, TOOL_NAME, TOOL_PARAMETERS
from gateway.wire.formats import WireFormat

CHAT_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}


def tool_definition(fmt: WireFormat) -> dict[str, Any]:
    if fmt is WireFormat.CHAT:
        return CHAT_TOOL
    if fmt is WireFormat.MESSAGES:
        return {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
    return {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}


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
class ChatAnswer:
    """A whole Chat Completions answer's first choice, split into Sieve's calls and the client's."""

    message: dict[str, Any]
    expand_calls: list[dict[str, Any]]
    client_calls: list[dict[str, Any]]


def chat_answer(payload: Any) -> ChatAnswer | None:
    """The first choice of a chat completion; None when it is not one."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    mine = [c for c in calls if (c.get("function") or {}).get("name") == TOOL_NAME]
    return ChatAnswer(message, mine, [c for c in calls if c not in mine])


def chat_exchange(answer: ChatAnswer, results: list[str]) -> list[dict[str, Any]]:
    """The messages a round appends: the assistant turn with Sieve's calls only (the
    client's calls of that turn are asked again with the content in view), and one
    tool result per call."""
    turn: dict[str, Any] = {"role": "assistant", "content": answer.message.get("content"),
                            "tool_calls": [{"id": c.get("id"), "type": "function", "function": {
                                "name": TOOL_NAME, "arguments": (c.get("function") or {}).get("arguments", "{}")}}
                                for c in answer.expand_calls]}
    return [turn, *({"role": "tool", "tool_call_id": c.get("id"), "content": text}
                    for c, text in zip(answer.expand_calls, results))]


def without_expand_calls(payload: dict[str, Any]) -> bytes:
    """A whole chat answer with Sieve's calls removed (what the client gets when no further
    round is possible): its own calls stay; with none left it ends as a plain answer."""
    out = orjson.loads(orjson.dumps(payload))
    choice = out["choices"][0]
    message = choice["message"]
    calls = [c for c in message.get("tool_calls") or () if (c.get("function") or {}).get("name") != TOOL_NAME]
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
        if message.get("content") is None:
            message["content"] = ""
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    return orjson.dumps(out)


def chat_stream_frames(body: bytes, usage: Any) -> list[bytes]:
    """A whole chat answer (``without_expand_calls``' output) as a stream's frames: one
    delta with its text and calls, the finish, the usage when known, ``[DONE]``."""
    payload = orjson.loads(body)
    choice = payload["choices"][0]
    message = choice["message"]
    head = {"id": payload.get("id") or "chatcmpl-sieve", "object": "chat.completion.chunk",
            "created": payload.get("created") or 0, "model": payload.get("model") or ""}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
    chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]}]
    if isinstance(usage, dict):
        chunks.append({**head, "choices": [], "usage": usage})
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
