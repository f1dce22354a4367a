"""The OpenAI chat-completions wire format: parsed leniently, checked where it matters.

Unknown fields pass through untouched (the provider decides about them).
What Sieve itself relies on — ``model``, ``messages`` and the shape of each
message, tool calls included — is checked, and a violation is a 400 that
names the field: ``messages[3].tool_calls[0].function.arguments must be a
string``. The shape is declared once (``CHAT_BODY``, :mod:`gateway.wire.shapes`): the
check below and the OpenAPI document's ``ChatCompletionRequest`` both come from it.
Checking plain dicts is far cheaper than building pydantic models of a 100k-token
history on every request::

    body = parse_body(raw)                 # gateway.wire.body
    check_chat_body(body, WireLimits())    # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.errors import InvalidRequest
from gateway.wire.limits import WireLimits
from gateway.wire.shapes import Anything, Const, Flag, Null, Text, Whole, compiled, is_whole_in
from gateway.wire.structures import Either, Field, Many, Record, Tagged

# Far above any model's output limit, and it keeps a budget reservation (prompt + this) a
# 64-bit number: 2**64 - 1 here reached the 429's body and failed to render (a 500).
MAX_COMPLETION_TOKENS = 2**31 - 1
MAX_CHOICES = 128  # answers per chat request (OpenAI's own bound)


LIMITS = WireLimits()  # the defaults, as the document states them
NAME = Anything("An optional participant name; forwarded as sent.")
NO_TOOL_CALLS = Null("must be an array on an assistant message", "Tool calls belong to assistant messages only.")
CONTENT_PART = Either(
    (Text(counts=True),
     Record("ContentPartObject", (Field("type", Anything("text, image_url, input_audio, file, refusal, ...")),
                                  Field("text", Anything("The text of a `text` part.", counts=True))))),
    says="must be a content part object", name="ContentPart",
    doc="A content part object, e.g. `{\"type\": \"text\", \"text\": \"...\"}` or `{\"type\": \"image_url\", "
        "\"image_url\": {\"url\": \"...\"}}`. Sieve reads the `text` of text parts and passes every part through; "
        "the provider decides which types it takes. A bare string part is accepted and read as text.")
CONTENT = Either((Text(counts=True), Many(CONTENT_PART, limit="max_content_parts", noun="parts",
                                          code="too_many_content_parts")),
                 says="must be a string, an array of content parts or null", name="Content",
                 doc="A string, or an array of content parts.")
FUNCTION = Record("FunctionCall", (
    Field("name", Text(), required=True, missing="must be a string"),
    Field("arguments", Text(counts=True, says="must be a string (JSON text)"), required=True,
          missing="must be a string (JSON text)", doc="The arguments as JSON text (a string, not an object).")))
TOOL_CALL = Record("ToolCall", (Field("id", Text(), required=True, missing="must be a string"),
                                Field("type", Anything("`function`; forwarded as sent.")),
                                Field("function", FUNCTION, required=True)))


def _message(role: str, *fields: Field, name: str | None = None, doc: str = "") -> Record:
    return Record(name or f"{role.capitalize()}Message", (Field("role", Const(role), required=True), *fields),
                  doc=doc, char_limit=True)


def _spoken(role: str, doc: str = "") -> Record:
    """A message whose content is required (system, developer, user)."""
    return _message(role, Field("content", CONTENT, required=True, missing=f"is required for role {role!r}"),
                    Field("name", NAME), Field("tool_calls", NO_TOOL_CALLS), doc=doc)


MESSAGE = Tagged("role", {
    "system": _spoken("system"),
    # A schema of its own, though it checks the same: the discriminator's mapping stays one-to-one
    # (tools read a schema named by two roles as one role's only).
    "developer": _spoken("developer", "A system message under its newer name."),
    "user": _spoken("user"),
    "assistant": _message("assistant", Field("content", CONTENT),
                          Field("tool_calls", Many(TOOL_CALL, says="must be an array on an assistant message")),
                          Field("function_call", Anything("The legacy single call, answered by a `function` message.")),
                          Field("refusal", Anything("Forwarded as sent.")), Field("name", NAME)),
    "tool": _message("tool", Field("content", CONTENT), Field("tool_calls", NO_TOOL_CALLS),
                     Field("tool_call_id", Text(says="is required on a tool message (a string)"), required=True,
                           missing="is required on a tool message (a string)",
                           doc="The id of the call of the assistant message just before that this answers.")),
    "function": _message("function", Field("name", NAME), Field("content", CONTENT), Field("tool_calls", NO_TOOL_CALLS)),
}, name="Message", doc="One chat message; which fields apply depends on its role.")
ROLES = tuple(MESSAGE.variants)
TOKEN_COUNT = Whole(1, MAX_COMPLETION_TOKENS, f"must be a positive integer (at most {MAX_COMPLETION_TOKENS})")
MODEL = Field("model", Text(nonblank=True, says="is required and must be a non-empty string"), required=True,
              missing="is required and must be a non-empty string",
              doc="A model this gateway routes (any name goes to the default upstream when one is set; "
                  "`/v1/prune` takes any).")
STREAM = Field("stream", Flag())
CHAT_BODY = Record("ChatCompletionRequest", (
    MODEL,
    Field("messages", Many(MESSAGE, says="must be a non-empty array of message objects", nonempty=True,
                           limit="max_messages", noun="messages", code="too_many_messages", total=True),
          required=True, doc=(
              f"At most {LIMITS.max_messages:,} messages (`SIEVE_MAX_MESSAGES`), each with at most "
              f"{LIMITS.max_content_parts:,} content parts (`SIEVE_MAX_CONTENT_PARTS`) and "
              f"{LIMITS.max_message_chars:,} characters of text, tool-call arguments included "
              f"(`SIEVE_MAX_MESSAGE_CHARS`); the body nests at most {LIMITS.max_json_depth} levels deep "
              "(`SIEVE_MAX_JSON_DEPTH`). These are the defaults; past them, a 400.")),
    STREAM,
    # Sieve merges include_usage into it when streaming, so its shape is Sieve's concern too.
    Field("stream_options", Record("StreamOptions", (Field("include_usage", Anything(
        "Sieve always asks the provider for usage when streaming, and strips it again unless the client asked "
        "for it.")),))),
    Field("max_tokens", TOKEN_COUNT),
    Field("max_completion_tokens", TOKEN_COUNT),
    # The number of answers: a budget reserves once per answer (OpenAI's own bound is 128).
    Field("n", Whole(1, MAX_CHOICES, f"must be an integer from 1 to {MAX_CHOICES}"),
          doc="Answers to make; a budget reserves for each."),
    Field("metadata", Anything("`metadata.sieve_goal` (a string) sets the goal like `x-sieve-goal`; "
                               "forwarded as sent.")),
    Field("tools", Anything("Tool schemas; forwarded as sent, not counted against the target.")),
    Field("tool_choice", Anything("Forwarded as sent.")),
), doc="An OpenAI chat-completion request; every field Sieve does not check passes through.",
    says="the request body must be a JSON object")


def check_chat_body(body: Mapping[str, Any], limits: WireLimits = LIMITS) -> None:
    compiled(CHAT_BODY, limits)(body)


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
    return is_whole_in(value, 1, MAX_COMPLETION_TOKENS)
