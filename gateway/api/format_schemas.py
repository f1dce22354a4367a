"""The Anthropic Messages and OpenAI Responses routes, as OpenAPI sees them: models for the document only.

As in :mod:`gateway.api.schemas`: lenient request models (unknown fields allowed,
only what Sieve checks constrained), answers relayed byte for byte.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.schemas import OMITTED, TOKEN_COUNT, ChatCompletionRequest, Listed, Wire, _plain
from gateway.exchange import RESPONSE_ID_CHARS
from gateway.wire import MAX_COMPLETION_TOKENS, messages_check, responses_check


def _other_than(*kinds: str) -> str:
    """A ``type`` pattern for "any other kind": the checked kinds have schemas of their own, so a body
    that fits the document is one the checks accept (and one that does not, one they refuse)."""
    return r"^(?!(?:" + "|".join(kinds) + r")$)"


# Look-ahead is not in pydantic's default (Rust) regex engine; these models only describe, so either serves.
LOOKAHEAD = ConfigDict(regex_engine="python-re")


# --- Anthropic Messages ----------------------------------------------------------------------------

class TextBlock(Wire):
    type: Literal["text"]
    text: str


class ToolUseBlock(Wire):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Wire):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Union[str, list["Block"], None] = Field(OMITTED, description="A string or content blocks.")


class OtherBlock(Wire):
    """Any other block (`image`, `document`, `thinking`, `redacted_thinking`, `server_tool_use`, ...):
    passed through as sent; `thinking` blocks are never edited."""

    model_config = LOOKAHEAD

    type: str = Field(pattern=_other_than("text", "tool_use", "tool_result"))


Block = TextBlock | ToolUseBlock | ToolResultBlock | OtherBlock
ToolResultBlock.model_rebuild()


class AnthropicTurn(Wire):
    role: Literal[messages_check.ROLES]  # type: ignore[valid-type]
    content: str | list[Block]


# --- OpenAI Responses -------------------------------------------------------------------------------

class MessageItem(Wire):
    type: Literal["message"] = Field(OMITTED, description="Optional: an item with a `role` is a message.")
    role: Literal[responses_check.ROLES]  # type: ignore[valid-type]
    content: str | list[dict[str, Any]] = Field(description="A string or content parts (`input_text`, "
                                                            "`output_text`, `input_image`, ...).")


class FunctionCallItem(Wire):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = Field(description="The arguments as JSON text.")


class CustomToolCallItem(Wire):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str


class CallOutputItem(Wire):
    type: Literal[responses_check.OUTPUTS]  # type: ignore[valid-type]
    call_id: str = Field(description="The call it answers: the two are pruned together.")
    output: str | list[dict[str, Any]]


class OtherItem(Wire):
    """Any other item (`reasoning`, `compaction`, `web_search_call`, `item_reference`, ...): passed
    through as sent; `reasoning` items are never edited."""

    model_config = LOOKAHEAD

    type: str = Field(pattern=_other_than("message", *responses_check.CALLS, *responses_check.OUTPUTS))


InputItem = MessageItem | FunctionCallItem | CustomToolCallItem | CallOutputItem | OtherItem


class AnthropicMessagesRequest(Wire):
    """An Anthropic Messages request; every field Sieve does not check passes through (`system`, `tools`,
    `thinking`, `cache_control` on any block, `metadata`, ...)."""

    model: str = Field(pattern=r"\S", description="Any Anthropic model: the request goes to "
                                                  "`SIEVE_ANTHROPIC_BASE_URL`.")
    system: str | list[Block] | None = Field(OMITTED, description="The system prompt: never pruned.")
    messages: list[AnthropicTurn] = Field(min_length=1, description=(
        "Alternating user and assistant turns (and `system` turns between them, as Claude Code sends, kept "
        "pinned); a turn's `tool_use` blocks and the next turn's `tool_result` "
        "blocks are pruned together, `thinking` and `redacted_thinking` blocks are never edited. The same limits "
        "as a chat completion's messages apply."))
    max_tokens: int | None = Field(OMITTED, ge=1, le=MAX_COMPLETION_TOKENS, description=(
        "Reserved on the budget with the prompt. The Messages API requires it: without it, the provider's "
        "own 400 is relayed."))
    stream: bool | None = OMITTED


STORED_ID = "^" + RESPONSE_ID_CHARS + "$"


def _history_somewhere(schema: dict[str, Any]) -> None:
    """`input` may be left out when the provider holds the history (a previous response, a conversation)."""
    _plain(schema)
    stored_id = {"type": "string", "pattern": STORED_ID}
    schema["anyOf"] = [{"required": ["input"], "properties": {"input": {"not": {"type": "null"}}}},
                       {"required": ["previous_response_id"], "properties": {"previous_response_id": stored_id}},
                       {"required": ["conversation"], "properties": {"conversation": {"anyOf": [
                           stored_id, {"type": "object", "required": ["id"], "properties": {"id": stored_id}}]}}}]
    schema["properties"]["conversation"] = {"description": "A conversation the provider keeps (its id, or an object "
                                            "with its `id`): the caller's org's only, as `previous_response_id`.",
                                            "anyOf": [stored_id, {"type": "object", "required": ["id"],
                                                                  "properties": {"id": stored_id}}, {"type": "null"}]}


class OpenAIResponsesRequest(Wire):
    """An OpenAI Responses request; every field Sieve does not check passes through (`prompt_cache_key`,
    `store`, `include`, `reasoning`, `tools`, ...)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_history_somewhere)

    model: str = Field(pattern=r"\S", description="A model this gateway routes to an OpenAI-compatible upstream.")
    input: str | list[InputItem] | None = Field(OMITTED, description=(
        "A string, or items: a `function_call` and its `function_call_output` (by `call_id`) are pruned together, "
        "`reasoning` items are never edited and stay with the call they precede."))
    instructions: str | None = Field(OMITTED, description="The system prompt: never pruned.")
    previous_response_id: str | None = Field(OMITTED, pattern="^" + RESPONSE_ID_CHARS + "$", description=(
        "The history is kept at the provider: the request is forwarded unpruned. A response the caller's org "
        "made through Sieve (else 404, unless its policy sets `allow_unmanaged_response_ids`); its stored size is "
        "reserved on the budget."))
    max_output_tokens: int | None = TOKEN_COUNT
    stream: bool | None = OMITTED


class AnthropicMessage(Wire):
    """The provider's message, relayed byte for byte."""

    id: str = OMITTED
    type: str = OMITTED
    content: list[Any] = OMITTED
    usage: dict[str, Any] | None = OMITTED


class OpenAIResponse(Wire):
    """The provider's response object, relayed byte for byte."""

    id: str = OMITTED
    object: str = OMITTED
    output: list[Any] = OMITTED
    usage: dict[str, Any] | None = OMITTED


class Relayed(Wire):
    """The provider's JSON answer (or event stream), relayed byte for byte."""


class AnthropicErrorDetail(Wire):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, not_found_error, "
                                  "request_too_large, rate_limit_error, timeout_error, api_error; Sieve's own `code` "
                                  "(and a budget's fields) ride along.")


class AnthropicError(Listed):
    """Anthropic's error shape: Sieve's errors on `/v1/messages` routes."""

    type: Literal["error"]
    error: AnthropicErrorDetail


# Request-body component name: the model that describes it.
REQUEST_BODIES: dict[str, type[BaseModel]] = {"ChatCompletion": ChatCompletionRequest,
                                              "AnthropicMessages": AnthropicMessagesRequest,
                                              "OpenAIResponses": OpenAIResponsesRequest}
