"""The Anthropic Messages request shape: checked where Sieve relies on it, lenient elsewhere.

Sieve reads ``model``, ``system``, ``messages`` and the blocks that make tool
chains (``tool_use`` ids, names and inputs; ``tool_result`` ids and content).
A violation is a 400 naming the field (``messages[3].content[1].tool_use_id
must be a string``); every other field and block type passes through
untouched, for the provider to judge. Declared once (``MESSAGES_BODY``,
:mod:`gateway.wire.shapes`): the check and the OpenAPI document's
``AnthropicMessagesRequest`` both come from it::

    check_messages_body(body, WireLimits())   # or InvalidRequest (400) naming the field
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.wire.chat import LIMITS, MODEL, STREAM, TOKEN_COUNT
from gateway.wire.limits import WireLimits
from gateway.wire.shapes import Choice, Const, Text, compiled
from gateway.wire.structures import Either, Field, Later, Many, Record, Tagged

# "system": Claude Code (2.1.x) puts system turns between the others (its environment notes);
# the API takes them, so Sieve does too, and keeps them as pinned system messages.
ROLES = ("user", "assistant", "system")
BLOCK_LIST = "must be a string or an array of content blocks"
BLOCKS = Many(Later(lambda: BLOCK), says=BLOCK_LIST, limit="max_content_parts", noun="blocks",
              code="too_many_content_parts")
A_STRING = {"required": True, "missing": "must be a string"}
BLOCK = Tagged("type", {
    "text": Record("TextBlock", (Field("type", Const("text"), required=True),
                                 Field("text", Text(counts=True), **A_STRING))),
    "tool_use": Record("ToolUseBlock", (
        Field("type", Const("tool_use"), required=True), Field("id", Text(), **A_STRING),
        Field("name", Text(), **A_STRING), Field("input", Record(), required=True, missing="must be an object"))),
    "tool_result": Record("ToolResultBlock", (
        Field("type", Const("tool_result"), required=True), Field("tool_use_id", Text(), **A_STRING),
        Field("content", Either((Text(counts=True), BLOCKS), says=BLOCK_LIST), doc="A string or content blocks."))),
}, name="Block", says="must be a content block object with a string 'type'",
    tag_says="must be a content block object with a string 'type'", other="OtherBlock",
    other_doc="Any other block (`image`, `document`, `thinking`, `redacted_thinking`, `server_tool_use`, ...): "
              "passed through as sent; `thinking` blocks are never edited.")
TURN = Record("AnthropicTurn", (
    Field("role", Choice(ROLES), required=True, missing=f"must be one of {', '.join(ROLES)}; got None"),
    Field("content", Either((Text(counts=True), BLOCKS), says=BLOCK_LIST), required=True, missing=BLOCK_LIST),
), char_limit=True)
MESSAGES_BODY = Record("AnthropicMessagesRequest", (
    MODEL,
    Field("system", Either((Text(), BLOCKS), says=BLOCK_LIST), doc="The system prompt: never pruned."),
    Field("messages", Many(TURN, says="is required and must be a non-empty array of message objects",
                           nonempty=True, limit="max_messages", noun="messages", code="too_many_messages", total=True),
          required=True, missing="is required and must be a non-empty array of message objects", doc=(
              "Alternating user and assistant turns (and `system` turns between them, as Claude Code sends, kept "
              "pinned); a turn's `tool_use` blocks and the next turn's `tool_result` blocks are pruned together, "
              "`thinking` and `redacted_thinking` blocks are never edited. The same limits as a chat completion's "
              "messages apply.")),
    STREAM,
    # The Messages API requires it (and says so itself); its shape is checked here because the budget
    # reserves on it, and /v1/prune reads bodies without it.
    Field("max_tokens", TOKEN_COUNT, doc="Reserved on the budget with the prompt. The Messages API requires it: "
                                         "without it, the provider's own 400 is relayed."),
), doc="An Anthropic Messages request; every field Sieve does not check passes through (`system`, `tools`, "
       "`thinking`, `cache_control` on any block, `metadata`, ...).", says="the request body must be a JSON object")


def check_messages_body(body: Mapping[str, Any], limits: WireLimits = LIMITS) -> None:
    compiled(MESSAGES_BODY, limits)(body)


__all__ = ["BLOCK", "MESSAGES_BODY", "ROLES", "check_messages_body"]
