"""What the routes answer, and the headers they take, as OpenAPI sees it: models for the document only.

The request bodies are the wire layer's declarations (:mod:`gateway.wire.shapes`: the
same declaration checks a body and describes it); these models describe what Sieve
answers, and a route names them for :mod:`gateway.api.openapi` to generate the
document from::

    ClientRoute("/v1/prune", prune, methods=["POST"], response_model=PruneResponse,
                openapi_extra=steered("InvalidRequest", "Forbidden", "RequestTimeout", "BodyTooLarge"))

A field the wire may omit is written ``= OMITTED``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from gateway.pruning import Action, Cohort, Mode, STRATEGIES, Strategy
from gateway.telemetry import FailOpen
from gateway.wire import MAX_CONVERSATION_ID_BYTES, MAX_GOAL_CHARS, MAX_TARGET_TOKENS, WireFormat

OMITTED: Any = None  # an optional field that is never null on the wire (no model is ever built)
REQUEST_ID = r"^req_[0-9a-f]{24}$"


def _plain(schema: dict[str, Any]) -> None:
    # These models are never instantiated: pydantic's defaults and titles would only be noise.
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        prop.pop("default", None)


class Wire(BaseModel):
    """A JSON object as the wire carries it: unknown fields allowed."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_plain)


class Listed(BaseModel):
    """A JSON object Sieve writes itself: every field listed (none forbidden, as clients ignore new ones)."""

    model_config = ConfigDict(json_schema_extra=_plain)


# --- errors ----------------------------------------------------------------------------------

class ErrorDetail(Wire):
    """OpenAI's error object; a budget error adds the budget's fields (`budget`, `scope`, `window`,
    `limit`, `remaining`, `requested`, `reset_at`)."""

    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, budget_exceeded, "
                                  "upstream_error, upstream_timeout, service_unavailable, internal_error.")
    param: str | None = Field(description="The offending field or header, e.g. "
                                          "`messages[3].tool_calls[0].function.arguments`.")
    code: str | None = Field(description="e.g. invalid_api_key, model_not_found, request_too_large, "
                                         "override_not_allowed, budget_exceeded, store_unavailable.")


class Error(Listed):
    """Every error Sieve answers itself (a provider's own error is relayed as the provider sent it)."""

    # Inline, as the object it is in OpenAI's own error schema (it has no name of its own there).
    error: Annotated[ErrorDetail, WithJsonSchema(ErrorDetail.model_json_schema())]


# --- answers -------------------------------------------------------------------------------------

class ChatCompletion(Wire):
    """The provider's chat completion, relayed byte for byte."""

    id: str = OMITTED
    object: str = OMITTED
    choices: list[Any] = OMITTED
    usage: dict[str, Any] | None = OMITTED


class ServerSentEvent(Listed):
    """One event of a streamed answer (as OpenAPI 3.1 tools read an event stream: one schema per
    event). `data` is a `chat.completion.chunk` as JSON text; the last event's is `[DONE]`. An
    upstream failure mid-stream ends the stream with an event whose `data` is an OpenAI error object."""

    data: str
    event: str = OMITTED
    id: str = OMITTED
    retry: int = OMITTED


class MessageDecision(Listed):
    index: int = Field(ge=0, description="The message's index in the request's `messages`.")
    action: Action
    score: int | None = Field(ge=1, le=5, description="The relevance tier (1-5) it was given; null when "
                                                      "nothing was scored (see `reason`).")
    reason: str


class ActionCounts(Listed):
    kept: int = Field(ge=0)
    masked: int = Field(ge=0)
    dropped: int = Field(ge=0)


class PruneReport(Wire):
    """Per message action, score and reason; totals; the mode of this prune."""

    request_id: str = Field(pattern=REQUEST_ID)
    fail_open: FailOpen | None = Field(description="Why the request would be forwarded unpruned (a store or "
                                              "pruning failure), else null.")
    cohort: Cohort = Field(description="The conversation's cohort: `pruned`, `control` (never pruned: "
                                       "`control_share`) or `shadow` (a shadow policy: forwarded as sent).")
    format: WireFormat = Field(description="The body's wire format (`x-sieve-format`); the per-message entries "
                                           "count the messages of its chat view (a tool result each).")
    mode: Mode
    strategy: Strategy
    epoch: int = Field(ge=0, description="How many times this conversation's plan was cut anew.")
    original_tokens: int = Field(ge=0, description="As `x-sieve-original-tokens`.")
    forwarded_tokens: int = Field(ge=0, description="As `x-sieve-forwarded-tokens`.")
    saved_tokens: int = Field(description="As `x-sieve-saved-tokens`.")
    target_tokens: int = Field(ge=1, description="The target in force for this prune (the request's, a "
                                                 "budget's tightening, or the policy's).")
    target_rule_tokens: int = Field(ge=0, description="The forwarded messages counted under the target "
                                    "rule (the larger of o200k_base and cl100k_base for the o200k families): what "
                                    "the target bounds.")
    messages_in: int = Field(ge=0)
    messages_out: int = Field(ge=0)
    actions: ActionCounts
    scored_units: int = Field(ge=0)
    goal_source: Literal["explicit", "derived"]
    problems: list[str]
    messages: list[MessageDecision]


class ForwardedRequest(Wire):
    """The body Sieve would forward."""

    model: str
    messages: list[Any]


class PruneResponse(Listed):
    request: ForwardedRequest
    report: PruneReport


class Model(Wire):
    id: str
    object: str = OMITTED
    created: int = OMITTED
    owned_by: str = OMITTED


class ModelList(Listed):
    object: Literal["list"]
    data: list[Model]


class Health(Listed):
    status: Literal["ok"]


class Readiness(Listed):
    status: Literal["ready", "degraded"]
    degraded: list[str] | None = Field(None, description="Present when `status` is `degraded`: what this replica "
                                                         "serves without (Redis, under a fail-open policy).")


class OpenAPIDocument(Wire):
    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]


# --- headers -------------------------------------------------------------------------------------

class SteeringHeaders(Listed):
    """The optional ``x-sieve-*`` request headers (:mod:`gateway.wire.headers`), one parameter each."""

    target_tokens: int = Field(OMITTED, ge=1, le=MAX_TARGET_TOKENS, alias="x-sieve-target-tokens", description=(
        "Target for the tokens of the forwarded `messages` (per message: its text content + tool-call names and "
        "argument strings, + 4; tool schemas are not counted). Overrides the policy's target; refused (403) when "
        "the policy forbids overrides or this target."))
    strategy: Literal[STRATEGIES] = Field(  # type: ignore[valid-type] - inlined: a header parameter has no $defs
        OMITTED, alias="x-sieve-strategy", description="`none` forwards unchanged; `window` keeps the recent units; "
                                                       "`relevance` scores the history. Case-insensitive.")
    goal: str = Field(OMITTED, max_length=MAX_GOAL_CHARS, alias="x-sieve-goal", description=(
        "The task's goal, in words; never dropped, and anchors relevance (else derived from the system prompt and "
        "first user message)."))
    conversation_id: str = Field(OMITTED, max_length=MAX_CONVERSATION_ID_BYTES, alias="x-sieve-conversation-id",
                                 description="Identifies the conversation whose pruning decisions stay frozen "
                                             "across turns (else a hash of org, model and the first messages). "
                                             f"At most {MAX_CONVERSATION_ID_BYTES} bytes as sent (a non-ASCII "
                                             "character sent as UTF-8 counts its bytes).")


class SieveResponseHeaders(Listed):
    """The ``x-sieve-*`` response headers of a pruned request (:func:`gateway.wire.headers.response_headers`)."""

    request_id: str = Field(pattern=REQUEST_ID, alias="x-sieve-request-id",
                            description="Sieve's id of this request (also in the audit log).")
    original_tokens: int = Field(ge=0, alias="x-sieve-original-tokens", description=(
        "Tokens of the client's `messages` in the model's own encoding (o200k_base for the gpt-4o/4.1/5 families, "
        "else cl100k_base): per message its text + tool-call names and argument strings + 4."))
    forwarded_tokens: int = Field(ge=0, alias="x-sieve-forwarded-tokens", description=(
        "Tokens of the forwarded `messages`, counted like the original. The target is held under a stricter count "
        "(the report's `target_rule_tokens`), so this never exceeds the target when the target can be met."))
    saved_tokens: int = Field(alias="x-sieve-saved-tokens", description="Original minus forwarded tokens.")
    budget_remaining_tokens: int = Field(OMITTED, ge=0, alias="x-sieve-budget-remaining-tokens", description=(
        "Tokens left in the tightest budget that applies (only where a budget applies)."))


# --- errors each route answers -----------------------------------------------------------------

# Component name: (status, description). The guard's own errors are added per access level
# (gateway.api.openapi); a route lists those its handler raises with answers() or steered().
ERRORS: dict[str, tuple[int, str]] = {
    "InvalidRequest": (400, "The request is malformed; `message` says what is wrong and `param` names the field "
                            "or header."),
    "Unauthorized": (401, "Missing, malformed, unknown or revoked key (`code` is `invalid_api_key`)."),
    "Forbidden": (403, "The key may not do this: not the admin key (`not_admin`), or the policy forbids this "
                       "`x-sieve-*` override (`override_not_allowed`)."),
    "NotFound": (404, "Unknown model (`model_not_found`), or admin routes turned off (no admin key configured)."),
    "RequestTimeout": (408, "The body did not arrive within the gateway's body timeout (`request_timeout`)."),
    "BodyTooLarge": (413, "The body exceeds the gateway's limit (`request_too_large`)."),
    "BudgetExceeded": (429, "A token budget is spent (`budget_exceeded`). The error also names the budget, its "
                            "window, limit, remaining tokens and reset time, and the response carries `Retry-After`. "
                            "Or, as on every keyed route, this client address failed too many key checks "
                            "(`too_many_auth_failures`, see TooManyAuthFailures)."),
    "TooManyAuthFailures": (429, "This client address failed too many key checks lately "
                                 "(`too_many_auth_failures`); its keys are not checked until `Retry-After` "
                                 "seconds have passed."),
    "HeadersTooLarge": (431, "The request headers together exceed the gateway's limit (`headers_too_large`)."),
    "UpstreamUnavailable": (502, "The provider could not be reached, or its connection broke "
                                 "(`upstream_unavailable`), or its whole answer exceeded the gateway's limit "
                                 "(`upstream_response_too_large`)."),
    "ServiceUnavailable": (503, "A required store (Redis) is unreachable and the policy is fail-closed, or the "
                                "key store is down for a key not in the keys file (`store_unavailable`); or the "
                                "gateway is shutting down and its grace period ended before the request was "
                                "answered (`shutting_down`; retry it, another replica serves it)."),
    "UpstreamTimeout": (504, "The provider did not answer in time (`upstream_timeout`)."),
}


def answers(*errors: str) -> dict[str, Any]:
    """``openapi_extra`` for the errors a route's handler raises: ``answers("InvalidRequest")``."""
    return {"responses": {str(ERRORS[name][0]): {"$ref": f"#/components/responses/{name}"} for name in errors}}


def steered(*errors: str, stream: bool = False, budget: bool = False, body: str = "ChatCompletion") -> dict[str, Any]:
    """``openapi_extra`` of a route that prunes: its request body (a component of
    ``REQUEST_BODIES``), the ``x-sieve-*`` headers in and out, and its errors. ``stream``: it may
    answer an event stream; ``budget``: it reports the budget left."""
    out = [alias for alias, field in _aliases(SieveResponseHeaders) if budget or field != "budget_remaining_tokens"]
    ok: dict[str, Any] = {"headers": {name: {"$ref": f"#/components/headers/{component_name(name)}"}
                                      for name in out}}
    if stream:
        ok["content"] = {"text/event-stream": {"schema": {"$ref": "#/components/schemas/ServerSentEvent"}}}
    extra = answers(*errors)
    extra["responses"]["200"] = ok
    extra["parameters"] = [{"$ref": f"#/components/parameters/{component_name(alias)}"}
                           for alias, _ in _aliases(SteeringHeaders)]
    extra["requestBody"] = {"$ref": f"#/components/requestBodies/{body}"}
    return extra


def component_name(header: str) -> str:
    """``x-sieve-target-tokens`` -> ``XSieveTargetTokens``."""
    return "".join(part.capitalize() for part in header.split("-"))


def _aliases(model: type[BaseModel]) -> list[tuple[str, str]]:
    return [(field.alias or name, name) for name, field in model.model_fields.items()]
