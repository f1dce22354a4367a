"""The Anthropic Messages and OpenAI Responses routes' answers, as OpenAPI sees them: models for
the document only (the answers are relayed byte for byte). The request bodies of every route
are the wire layer's declarations (``REQUEST_BODIES``): what is checked is what is documented.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.api.schemas import OMITTED, Listed, Wire
from gateway.wire import CHAT_BODY, MESSAGES_BODY, RESPONSES_BODY

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


# Request-body component name: the wire declaration that checks it and describes it.
REQUEST_BODIES = {"ChatCompletion": CHAT_BODY, "AnthropicMessages": MESSAGES_BODY, "OpenAIResponses": RESPONSES_BODY}
