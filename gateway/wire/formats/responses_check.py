"""The OpenAI Responses request shape: checked where Sieve relies on it, lenient elsewhere.

Sieve reads ``model``, ``instructions`` and ``input`` (a string or a list of
items), and in the items what makes tool chains: messages' roles and content,
``function_call`` / ``custom_tool_call`` and their outputs by ``call_id``. A
violation is a 400 naming the field (``input[4].call_id must be a string``);
every other field and item type passes through untouched::

    check_responses_body(body, WireLimits())   # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.errors import InvalidRequest
from gateway.wire.chat import (WireLimits, check_model, check_request_chars, check_stream, check_token_count,
                               require_str)

ROLES = ("user", "assistant", "system", "developer")
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")


def check_responses_body(body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> None:
    check_model(body)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string", param="instructions")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):  # it decides whether Sieve prunes at all
        raise InvalidRequest("'previous_response_id' must be a string", param="previous_response_id")
    conversation = body.get("conversation")
    if conversation is not None and not isinstance(conversation, str) and \
            not (isinstance(conversation, dict) and isinstance(conversation.get("id"), str)):
        # Its id is checked to be the caller's (gateway.exchange.stored_responses).
        raise InvalidRequest("'conversation' must be a conversation id, or an object with a string 'id'",
                             param="conversation")
    items = body.get("input")
    if items is None and body.get("previous_response_id") is None and body.get("conversation") is None:
        # Without input the history must be the provider's (a previous response or a conversation).
        raise InvalidRequest("'input' is required (unless previous_response_id or conversation names the history)",
                             param="input")
    if items is not None and not isinstance(items, (str, list)):
        raise InvalidRequest("'input' must be a string or an array of input items", param="input")
    if isinstance(items, list):
        if len(items) > limits.max_messages:
            raise InvalidRequest(f"'input' has {len(items)} items; the limit is {limits.max_messages}",
                                 param="input", code="too_many_messages")
        chars = 0
        for i, item in enumerate(items):
            chars += _check_item(f"input[{i}]", item, limits)
        check_request_chars("input", chars, limits)
    elif isinstance(items, str):
        check_request_chars("input", len(items), limits)
    check_stream(body)
    check_token_count(body, "max_output_tokens")


def _check_item(where: str, item: Any, limits: WireLimits) -> int:
    """Checks one item; returns the characters of its text."""
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    kind = item.get("type")
    if "type" in item and not isinstance(kind, str):  # left out, it means a message; null means nothing
        raise InvalidRequest(f"{where}.type must be a string", param=f"{where}.type")
    chars = 0
    if kind == "message" or (kind is None and "role" in item):
        if item.get("role") not in ROLES:
            raise InvalidRequest(f"{where}.role must be one of {', '.join(ROLES)}; got {item.get('role')!r}",
                                 param=f"{where}.role")
        chars = _check_content(f"{where}.content", item.get("content"), limits)
    elif kind is None:
        raise InvalidRequest(f"{where} needs a 'type' (or a 'role', for a message)", param=f"{where}.type")
    elif kind in CALLS:
        require_str(where, item, "call_id")
        require_str(where, item, "name")
        field = "arguments" if kind == "function_call" else "input"
        require_str(where, item, field)
        chars = len(item[field])
    elif kind in OUTPUTS:
        require_str(where, item, "call_id")
        chars = _check_content(f"{where}.output", item.get("output"), limits)
    if chars > limits.max_message_chars:
        raise InvalidRequest(f"{where} has {chars} characters of text; the limit is {limits.max_message_chars}",
                             param=where, code="message_too_large")
    return chars


def _check_content(where: str, content: Any, limits: WireLimits) -> int:
    """Checks a string or a list of content parts; returns the characters of its text."""
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or an array of content parts", param=where)
    if len(content) > limits.max_content_parts:
        raise InvalidRequest(f"{where} has {len(content)} parts; the limit is {limits.max_content_parts}",
                             param=where, code="too_many_content_parts")
    chars = 0
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"{where}[{j}] must be a content part object", param=f"{where}[{j}]")
        if "type" in part and not isinstance(part["type"], str):  # it picks how the part is read
            raise InvalidRequest(f"{where}[{j}].type must be a string", param=f"{where}[{j}].type")
        text = part.get("text")
        chars += len(text) if isinstance(text, str) else 0
    return chars
