"""Sieve's OpenAPI document, generated from the code.

FastAPI describes the route table (paths, admin models, response models); this
module adds what FastAPI cannot see: the request bodies (the wire layer's declarations,
:mod:`gateway.wire.shapes`: what checks a body describes it), the models of
:mod:`gateway.api.schemas` that no route returns itself, the ``x-sieve-*`` headers, and what each route's access
level implies (its security, and the errors its guard answers). Served at
``GET /openapi.json`` (and as a page at ``/docs``)::

    curl localhost:8080/openapi.json | jq '.paths | keys'
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from gateway.api.access import Access, GuardedRoute
from gateway.api.format_schemas import REQUEST_BODIES, AnthropicError
from gateway.api.schemas import (ERRORS, Error, ServerSentEvent, SieveResponseHeaders, SteeringHeaders,
                                 component_name)
from gateway.wire import components as shape_components

INFO = {
    "title": "Sieve",
    "version": "0.1.0",
    "summary": "An OpenAI-compatible gateway that prunes agent chat histories, cache-stably.",
    "license_info": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    "description": """\
Sieve speaks OpenAI's Chat Completions and Responses protocols and Anthropic's Messages protocol: point a
client's base URL at `<sieve>/v1` (an `anthropic` client's at `<sieve>`). It prunes the request's history in
its own format, forwards the request to a provider of that format and relays the answer unchanged.

**What this document describes.** Request bodies are lenient: unknown fields pass through untouched, and only
what Sieve itself relies on is checked (`model`, `messages`, the shape of each message and tool call, `stream`,
`stream_options`, `max_tokens`, `max_completion_tokens`). The schemas below state exactly those checks; what
the provider checks (content-part types, tool schemas, sampling parameters) is described but left
unconstrained, and a request Sieve accepts may still be refused by the provider.

**Errors** have OpenAI's shape `{"error": {"message", "type", "param", "code"}}`, and Anthropic's
`{"type": "error", "error": {"type", "message"}}` on the `/v1/messages` routes. An error status and
body from the provider itself are relayed unchanged (with the provider's status), and never pass through
Sieve's own error handler. An unknown path is a 404 (`not_found`) and a method a path does not serve a 405
(`method_not_allowed`, with `Allow`), in the same shape. A client that leaves before its body has arrived is
counted as a 499 (`client_closed_request`), which nobody receives.

**Authentication.** `/v1` routes need a Sieve virtual key (or, in passthrough mode, a mapped provider key) as
`Authorization: Bearer <key>` or `x-api-key`. A gateway with no keys configured is open (allowed on a loopback
address only) and takes anonymous requests. `/admin` routes need the admin key and do not exist (404) when none
is configured. `/healthz`, `/readyz`, `/metrics`, `/openapi.json` and `/docs` are open unless
`SIEVE_OPEN_ROUTES` leaves them out; then they take the metrics key or the admin key.""",
}
TAGS = [
    {"name": "openai", "description": "OpenAI-compatible routes: Chat Completions and Responses."},
    {"name": "anthropic", "description": "Anthropic's Messages API, forwarded in its own format."},
    {"name": "sieve", "description": "Sieve's own routes."},
    {"name": "operations", "description": "Probes, metrics and this document."},
    {"name": "admin", "description": "Budgets, usage, savings and virtual keys, behind the admin key."},
]


def _key(bearer: str, header: str) -> dict[str, dict[str, str]]:
    return {"bearer": {"type": "http", "scheme": "bearer", "description": f"`Authorization: Bearer <key>`: {bearer}"},
            "header": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": header}}


_VIRTUAL = _key("a Sieve virtual key (or, in passthrough mode, a mapped provider key).",
                "The same key in `x-api-key`, for clients that send it there; `Authorization` wins when both are sent.")
_ADMIN = _key("the admin key (`SIEVE_ADMIN_KEY`); a virtual key is not an admin key (403).",
              "The admin key in `x-api-key`; `Authorization` wins when both are sent.")
_METRICS = _key("the metrics key (`SIEVE_METRICS_KEY`) or the admin key, for an ops route `SIEVE_OPEN_ROUTES` "
                "leaves out.", "The metrics key or the admin key in `x-api-key`.")
SECURITY_SCHEMES = {"virtualKey": _VIRTUAL["bearer"], "virtualKeyHeader": _VIRTUAL["header"],
                    "adminKey": _ADMIN["bearer"], "adminKeyHeader": _ADMIN["header"],
                    "metricsKey": _METRICS["bearer"], "metricsKeyHeader": _METRICS["header"]}
# Each access level's guard (gateway.api.access): who may call, and the errors the guard itself answers.
SECURITY: dict[Access, list[dict[str, list[str]]]] = {
    Access.CLIENT: [{"virtualKey": []}, {"virtualKeyHeader": []}],
    Access.ADMIN: [{"adminKey": []}, {"adminKeyHeader": []}],
    Access.OPS: [{}, {"metricsKey": []}, {"metricsKeyHeader": []}],  # {}: open by default
}
GUARD_ERRORS: dict[Access, dict[int, str]] = {
    # 503: the admin key store is down and the key is not in the keys file.
    # 429: too many failed key checks from the address (a route's own 429, a budget, keeps its place).
    Access.CLIENT: {401: "Unauthorized", 429: "TooManyAuthFailures", 431: "HeadersTooLarge",
                    503: "ServiceUnavailable"},
    Access.ADMIN: {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 429: "TooManyAuthFailures",
                   431: "HeadersTooLarge"},
    Access.OPS: {401: "ClosedOpsRoute", 403: "ClosedOpsRoute", 429: "TooManyAuthFailures", 431: "HeadersTooLarge"},
}
CLOSED_OPS_ROUTE = ("This route is not listed in `SIEVE_OPEN_ROUTES` (all ops routes are by default): 401 "
                    "without a key, 403 with a key that is neither the metrics key nor the admin key.")


def describe(app: FastAPI) -> dict[str, Any]:
    """The whole document, for ``app.state.openapi_json``."""
    document = get_openapi(**INFO, tags=TAGS, routes=app.routes, openapi_version="3.1.0")
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    # A body or parameter that fails a model is a 400 in OpenAI's shape (gateway.api.rendering), never a 422.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas.update(shape_components(*REQUEST_BODIES.values()))
    schemas.update(_schemas(Error, AnthropicError, ServerSentEvent))
    components["securitySchemes"] = SECURITY_SCHEMES
    components["parameters"] = _header_parameters(SteeringHeaders)
    components["headers"] = _response_headers(SieveResponseHeaders)
    components["requestBodies"] = {name: {
        "required": True, "description": shape.doc,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{shape.name}"}}}}
        for name, shape in REQUEST_BODIES.items()}
    components["responses"] = _error_responses(components["headers"]["XSieveRequestId"]["schema"])
    for route in app.routes:
        if isinstance(route, GuardedRoute):
            for method in route.methods - {"HEAD"}:
                operation = document["paths"][route.path_format][method.lower()]  # no convertors
                _guarded(operation, route.access)
                if route.path.startswith(ANTHROPIC_PATHS):
                    _anthropic_errors(operation, components["responses"])
    return document


ANTHROPIC_PATHS = "/v1/messages"


def _anthropic_errors(operation: dict[str, Any], responses: dict[str, Any]) -> None:
    """The Messages routes answer Sieve's errors in Anthropic's shape: each error response of
    ``operation`` points to its Anthropic twin (made on first use)."""
    for status, response in operation["responses"].items():
        ref = response.get("$ref", "")
        if status.startswith(("4", "5")) and ref.startswith("#/components/responses/"):
            name = ref.rsplit("/", 1)[1]
            twin = "Anthropic" + name
            if twin not in responses:
                responses[twin] = {**responses[name], "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/AnthropicError"}}}}
            response["$ref"] = f"#/components/responses/{twin}"


def _guarded(operation: dict[str, Any], access: Access) -> None:
    operation["security"] = SECURITY[access]
    responses = operation["responses"]
    responses.pop("422", None)
    for status, name in GUARD_ERRORS[access].items():
        responses.setdefault(str(status), {"$ref": f"#/components/responses/{name}"})
    operation["responses"] = dict(sorted(responses.items()))


def _schemas(*models: type[BaseModel]) -> dict[str, Any]:
    """Components for models no route parses or returns itself (FastAPI generates the others)."""
    components: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    return components


def _header_parameters(model: type[BaseModel]) -> dict[str, Any]:
    """One optional header parameter per field of ``model``, named by its alias."""
    return {component_name(name): {"name": name, "in": "header", "required": False,
                                   "description": schema.pop("description"), "schema": schema}
            for name, schema in model.model_json_schema(by_alias=True)["properties"].items()}


def _response_headers(model: type[BaseModel]) -> dict[str, Any]:
    """One response header per field of ``model``; the required fields are always sent."""
    schema = model.model_json_schema(by_alias=True)
    return {component_name(name): {"description": field.pop("description"),
                                   "required": name in schema.get("required", ()), "schema": field}
            for name, field in schema["properties"].items()}


def _error_responses(request_id: dict[str, Any]) -> dict[str, Any]:
    # Not the required x-sieve-request-id of a pruned answer: a 503 at shutdown has none.
    headers: dict[str, Any] = {"x-sieve-request-id": {"description": "Sieve's id of this request.",
                                                      "schema": request_id}}
    described = {name: description for name, (_, description) in ERRORS.items()}
    described["ClosedOpsRoute"] = CLOSED_OPS_ROUTE
    responses = {name: {"description": description, "headers": dict(headers),
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                 for name, description in described.items()}
    responses["BudgetExceeded"]["headers"].update({
        "Retry-After": {"description": "Seconds until the budget's window resets.",
                        "required": True, "schema": {"type": "integer", "minimum": 1}},
        "x-sieve-budget-remaining-tokens": {"$ref": "#/components/headers/XSieveBudgetRemainingTokens"}})
    responses["TooManyAuthFailures"]["headers"]["Retry-After"] = {
        "description": "Seconds until this address may present a key again.", "required": True,
        "schema": {"type": "integer", "minimum": 1}}
    return responses
