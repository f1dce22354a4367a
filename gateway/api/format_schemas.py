"""The Anthropic Messages and OpenAI Responses routes, as OpenAPI sees them: models for the document only.

As in :mod:`gateway.api.schemas`: lenient request models (unknown fields allowed,
only what Sieve checks constrained), answers relayed byte for byte.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway.api.schemas import OMITTED, TOKEN_COUNT, ChatCompletionRequest, Listed, Wire
from gateway.wire.chat import MAX_COMPLETION_TOKENS


class AnthropicMessagesRequest(Wire):
    """An Anthropic Messages request; every field Sieve does not check passes through (`system`, `tools`,
    `thinking`, `cache_control` on any block, `metadata`, ...)."""

    model: str = Field(pattern=r"\S", description="Any Anthropic model: the request goes to "
                                                  "`SIEVE_ANTHROPIC_BASE_URL`.")
    messages: list[dict[str, Any]] = Field(min_length=1, description=(
        "Alternating user and assistant turns (and `system` turns between them, as Claude Code sends, kept "
        "pinned); a turn's `tool_use` blocks and the next turn's `tool_result` "
        "blocks are pruned together, `thinking` and `redacted_thinking` blocks are never edited. The same limits "
        "as a chat completion's messages apply."))
    max_tokens: int = Field(ge=1, le=MAX_COMPLETION_TOKENS, description="Reserved on the budget with the prompt.")
    stream: bool | None = OMITTED


class OpenAIResponsesRequest(Wire):
    """An OpenAI Responses request; every field Sieve does not check passes through (`prompt_cache_key`,
    `store`, `include`, `reasoning`, `tools`, ...)."""

    model: str = Field(pattern=r"\S", description="A model this gateway routes to an OpenAI-compatible upstream.")
    input: str | list[dict[str, Any]] = Field(description=(
        "A string, or items: a `function_call` and its `function_call_output` (by `call_id`) are pruned together, "
        "`reasoning` items are never edited and stay with the call they precede."))
    instructions: str | None = Field(OMITTED, description="The system prompt: never pruned.")
    previous_response_id: str | None = Field(OMITTED, description="The history is kept at the provider: the "
                                                                  "request is forwarded unpruned.")
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
