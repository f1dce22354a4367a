"""The OpenAI chat-completions wire format: parsed leniently, checked where it matters.

Unknown fields pass through untouched (the provider decides about them).
What Sieve itself relies on — ``model``, ``messages`` and the shape of each
message, tool calls included — is checked, and a violation is a 400 that
names the field: ``messages[3].tool_calls[0].function.arguments must be a
string``. Checking plain dicts is far cheaper than building pydantic models of
a 100k-token history on every request::

    body = parse_body(raw)                 # gateway.wire.body
    check_chat_body(body, WireLimits())    # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.errors import InvalidRequest

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Far above any model's output limit, and it keeps a budget reservation (prompt + this) a
# 64-bit number: 2**64 - 1 here reached the 429's body and failed to render (a 500).
MAX_COMPLETION_TOKENS = 2**31 - 1
MAX_CHOICES = 128  # answers per chat request (OpenAI's own bound)


@dataclass(frozen=True, slots=True)
class WireLimits:
    """Bounds on one request, so no single body can take the pruner's time or memory hostage.
    The defaults let through anything a real agent sends: the largest context windows hold
    1-2M tokens, about 4 characters each, so ``max_request_chars`` (the text of all messages
    together) lets a 2M-token history through, and refuses the 30 MB history no model would
    accept, which took over half a minute of one core to prune."""

    max_messages: int = 20_000
    max_content_parts: int = 1_024
    max_message_chars: int = 4_000_000
    max_json_depth: int = 64
    max_request_chars: int = 8_000_000


def check_chat_body(body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> None:
    check_model(body)
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array of message objects", param="messages")
    if len(messages) > limits.max_messages:
        raise InvalidRequest(f"'messages' has {len(messages)} messages; the limit is {limits.max_messages}",
                             param="messages", code="too_many_messages")
    chars = 0
    for i, message in enumerate(messages):
        chars += _check_message(i, message, limits)
    check_request_chars("messages", chars, limits)
    check_stream(body)
    # Sieve merges include_usage into it when streaming, so its shape is Sieve's concern too.
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise InvalidRequest("'stream_options' must be an object", param="stream_options")
    for name in ("max_tokens", "max_completion_tokens"):
        check_token_count(body, name)
    check_choices(body)


def check_choices(body: Mapping[str, Any]) -> None:
    """``n``, the number of answers: a budget reserves once per answer, so its shape is Sieve's
    concern (OpenAI's own bound is 128)."""
    n = body.get("n")
    if n is not None and not _is_whole_in(n, 1, MAX_CHOICES):
        raise InvalidRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}", param="n")


def check_model(body: Any) -> None:
    """A JSON object naming a model, in any wire format: the route is chosen by it."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")


def check_stream(body: Mapping[str, Any]) -> None:
    """``stream``, in any wire format: it decides whether the answer is relayed as events."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")


def require_str(where: str, part: Mapping[str, Any], name: str) -> None:
    """A string field Sieve reads in a message part (an id, a name): named in the error by its path."""
    if not isinstance(part.get(name), str):
        raise InvalidRequest(f"{where}.{name} must be a string", param=f"{where}.{name}")


def check_request_chars(field: str, chars: int, limits: WireLimits) -> None:
    """The text of a whole history together, in any wire format (``field`` names where it sits)."""
    if chars > limits.max_request_chars:
        raise InvalidRequest(f"'{field}' have {chars} characters of text together; the limit is "
                             f"{limits.max_request_chars}", param=field, code="messages_too_large")


def check_token_count(body: Mapping[str, Any], name: str) -> None:
    """An output-token cap, in any wire format: budgets reserve on it, so its shape is Sieve's concern."""
    value = body.get(name)
    if value is not None and not _is_token_count(value):
        raise InvalidRequest(f"'{name}' must be a positive integer (at most {MAX_COMPLETION_TOKENS})", param=name)


def _is_token_count(value: Any) -> bool:
    return _is_whole_in(value, 1, MAX_COMPLETION_TOKENS)


def _is_whole_in(value: Any, low: int, high: int) -> bool:
    # JSON has one number type: 100.0 is the integer 100 (JSON Schema agrees), so it is
    # accepted and forwarded as sent; 100.5 is not.
    if isinstance(value, float):
        return value.is_integer() and low <= value <= high
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_message(i: int, message: Any, limits: WireLimits) -> int:
    """Checks one message; returns the characters of its text (content, text parts, tool arguments)."""
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    role = message.get("role")
    if role not in ROLES:
        raise InvalidRequest(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", param=f"{where}.role")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise InvalidRequest(f"{where}.content must be a string, an array of content parts or null",
                             param=f"{where}.content")
    chars = 0
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):
        if len(content) > limits.max_content_parts:
            raise InvalidRequest(f"{where}.content has {len(content)} parts; the limit is {limits.max_content_parts}",
                                 param=f"{where}.content", code="too_many_content_parts")
        for j, part in enumerate(content):
            if isinstance(part, str):
                chars += len(part)
            elif isinstance(part, dict):
                text = part.get("text")
                chars += len(text) if isinstance(text, str) else 0
            else:
                raise InvalidRequest(f"{where}.content[{j}] must be a content part object",
                                     param=f"{where}.content[{j}]")
    if content is None and role not in ("assistant", "tool", "function"):
        raise InvalidRequest(f"{where}.content is required for role {role!r}", param=f"{where}.content")
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise InvalidRequest(f"{where}.tool_calls must be an array on an assistant message",
                                 param=f"{where}.tool_calls")
        for j, call in enumerate(calls):
            chars += _check_tool_call(f"{where}.tool_calls[{j}]", call)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise InvalidRequest(f"{where}.tool_call_id is required on a tool message (a string)",
                             param=f"{where}.tool_call_id")
    if chars > limits.max_message_chars:
        raise InvalidRequest(f"{where} has {chars} characters of text; the limit is {limits.max_message_chars}",
                             param=where, code="message_too_large")
    return chars


def _check_tool_call(where: str, call: Any) -> int:
    """Checks one tool call; returns the characters of its arguments."""
    if not isinstance(call, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    if not isinstance(call.get("id"), str):
        raise InvalidRequest(f"{where}.id must be a string", param=f"{where}.id")
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidRequest(f"{where}.function.name must be a string", param=f"{where}.function.name")
    if not isinstance(fn.get("arguments"), str):
        raise InvalidRequest(f"{where}.function.arguments must be a string (JSON text)",
                             param=f"{where}.function.arguments")
    return len(fn["arguments"])
