"""The Anthropic Messages request shape: checked where Sieve relies on it, lenient elsewhere.

Sieve reads ``model``, ``system``, ``messages`` and the blocks that make tool
chains (``tool_use`` ids, names and inputs; ``tool_result`` ids and content).
A violation is a 400 naming the field (``messages[3].content[1].tool_use_id
must be a string``); every other field and block type passes through
untouched, for the provider to judge::

    check_messages_body(body, WireLimits())   # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.errors import InvalidRequest
from gateway.wire.chat import (WireLimits, check_model, check_request_chars, check_stream, check_token_count,
                               require_str)

# "system": Claude Code (2.1.x) puts system turns between the others (its environment notes);
# the API takes them, so Sieve does too, and keeps them as pinned system messages.
ROLES = ("user", "assistant", "system")


def check_messages_body(body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> None:
    check_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' is required and must be a non-empty array of message objects",
                             param="messages")
    if len(messages) > limits.max_messages:
        raise InvalidRequest(f"'messages' has {len(messages)} messages; the limit is {limits.max_messages}",
                             param="messages", code="too_many_messages")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _check_blocks("system", system, limits)
    chars = 0
    for i, message in enumerate(messages):
        chars += _check_message(f"messages[{i}]", message, limits)
    check_request_chars("messages", chars, limits)
    check_stream(body)
    # The Messages API requires it (and says so itself); its shape is checked here because the budget
    # reserves on it, and /v1/prune reads bodies without it.
    check_token_count(body, "max_tokens")


def _check_message(where: str, message: Any, limits: WireLimits) -> int:
    """Checks one turn; returns the characters of its text."""
    if not isinstance(message, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    role = message.get("role")
    if role not in ROLES:
        raise InvalidRequest(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", param=f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        chars = len(content)
    else:
        chars = _check_blocks(f"{where}.content", content, limits)
    if chars > limits.max_message_chars:
        raise InvalidRequest(f"{where} has {chars} characters of text; the limit is {limits.max_message_chars}",
                             param=where, code="message_too_large")
    return chars


def _check_blocks(where: str, blocks: Any, limits: WireLimits) -> int:
    """Checks a block list; returns the characters of its text."""
    if not isinstance(blocks, list):
        raise InvalidRequest(f"{where} must be a string or an array of content blocks", param=where)
    if len(blocks) > limits.max_content_parts:
        raise InvalidRequest(f"{where} has {len(blocks)} blocks; the limit is {limits.max_content_parts}",
                             param=where, code="too_many_content_parts")
    chars = 0
    for j, block in enumerate(blocks):
        chars += _check_block(f"{where}[{j}]", block, limits)
    return chars


def _check_block(where: str, block: Any, limits: WireLimits) -> int:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequest(f"{where} must be a content block object with a string 'type'", param=where)
    kind = block["type"]
    if kind == "text":
        require_str(where, block, "text")
        return len(block["text"])
    if kind == "tool_use":
        require_str(where, block, "id")
        require_str(where, block, "name")
        if not isinstance(block.get("input"), dict):
            raise InvalidRequest(f"{where}.input must be an object", param=f"{where}.input")
        return 0
    if kind == "tool_result":
        require_str(where, block, "tool_use_id")
        content = block.get("content")
        if content is None or isinstance(content, str):
            return len(content or "")
        return _check_blocks(f"{where}.content", content, limits)
    return 0
