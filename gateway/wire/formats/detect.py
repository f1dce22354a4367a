"""Which wire format a request body is written in, from what only that format has.

For a body that comes without a route or a header to say (``sieve prune FILE``)::

    detect_format({"model": "m", "input": "hi"})                      # WireFormat.RESPONSES
    detect_format({"model": "m", "system": "be brief", "messages": []})   # WireFormat.MESSAGES
    detect_format({"model": "m", "messages": [{"role": "user", "content": "hi"}]})  # WireFormat.CHAT

Each format leaves marks the others cannot carry: Responses has ``input`` (or
``instructions``) and no ``messages``; Anthropic Messages has a top-level
``system`` and typed blocks (``tool_use``, ``tool_result``, ``thinking``, a
``source`` on an image or document); Chat Completions has system, developer, tool
and function roles, ``tool_calls`` and its own part types. A body that shows
marks of two formats is ``AmbiguousFormat``; one with none (plain user and
assistant text) reads the same in Chat and Messages and is taken as Chat.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.errors import InvalidRequest
from gateway.wire.formats.view import WireFormat

__all__ = ["AmbiguousFormat", "detect_format"]

_ANTHROPIC_BLOCKS = frozenset(("tool_use", "tool_result", "thinking", "redacted_thinking", "document",
                               "server_tool_use", "web_search_tool_result", "search_result"))
_CHAT_PARTS = frozenset(("image_url", "input_audio", "file", "refusal"))
_CHAT_ROLES = frozenset(("system", "developer", "tool", "function"))
_CHAT_FIELDS = frozenset(("tool_calls", "tool_call_id", "function_call", "name"))


class AmbiguousFormat(InvalidRequest):
    """The body carries marks of more than one format: the caller must say which it is."""


def detect_format(body: Mapping[str, Any]) -> WireFormat:
    """The format ``body`` is written in (module docstring); ``AmbiguousFormat`` when it shows two."""
    if "messages" not in body and ("input" in body or "instructions" in body):
        return WireFormat.RESPONSES
    anthropic, chat = _marks(body)
    if anthropic and chat:
        raise AmbiguousFormat(f"the body looks like Anthropic Messages ({anthropic}) and like Chat Completions "
                              f"({chat}): say which it is")
    return WireFormat.MESSAGES if anthropic else WireFormat.CHAT


def _marks(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The first mark of Anthropic Messages and of Chat Completions the body shows, if any."""
    anthropic = "a top-level 'system'" if "system" in body else None
    chat = None
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, Mapping):
            continue
        if chat is None and message.get("role") in _CHAT_ROLES:
            chat = f"messages[{i}].role {message['role']!r}"
        if chat is None and _CHAT_FIELDS & set(message):
            chat = f"messages[{i}].{sorted(_CHAT_FIELDS & set(message))[0]}"
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if not isinstance(kind, str):
                continue
            if anthropic is None and (kind in _ANTHROPIC_BLOCKS or "source" in part):
                anthropic = f"messages[{i}].content[{j}] of type {kind!r}"
            if chat is None and kind in _CHAT_PARTS:
                chat = f"messages[{i}].content[{j}] of type {kind!r}"
        if anthropic and chat:
            break
    return anthropic, chat
