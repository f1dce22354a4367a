"""The route table and thin handlers: parse → service → respond.

Each route's class is its access level (:mod:`gateway.api.access`):
the /v1 routes need a client key; the ops routes (/healthz, /readyz,
/metrics, /openapi.json, /docs) are open unless ``SIEVE_OPEN_ROUTES`` closes
them; the admin routes (:mod:`gateway.api.admin`) need the admin key.

These routes take the raw ``Request`` and answer a ``Response`` themselves
(:class:`gateway.api.access.RawRoute`): a chat body is checked as plain dicts
(:mod:`gateway.wire.chat`), far cheaper on a 100k-token history than building
models of it, and FastAPI's request handling stays off the hot path. What they
accept is described for OpenAPI by the same declarations that check it
(:mod:`gateway.wire.shapes`); what they answer, in :mod:`gateway.api.schemas`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from starlette.convertors import Convertor, register_url_convertor
from fastapi.openapi.docs import get_swagger_ui_html
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

from gateway.api.access import ClientRoute, OpsRoute
from gateway.api.rendering import json_response, reply_response
from gateway.api.format_schemas import AnthropicMessage, OpenAIResponse, Relayed
from gateway.api.schemas import (ChatCompletion, Health, ModelList, OpenAPIDocument, PruneResponse, Readiness, answers,
                                 steered)
from gateway.exchange import PassThroughCall, RESPONSE_ID_CHARS, THREAD_THRESHOLD_BYTES, sieve_headers
from gateway.errors import StoreUnavailable
from gateway.api.health import readiness
from gateway.api.services import Services
from gateway.config import litellm_package_dir
from gateway.wire import (FORMAT_HEADER, INGRESSES, ModelCall, WireFormat, adapter_for, parse_body, parse_format,
    parse_sieve_headers, read_body)


async def _read_json(request: Request, required: bool = True) -> tuple[bytes, dict[str, Any] | None]:
    """The body, bounded, and its JSON object (None for an empty body that may be empty)."""
    services: Services = request.app.state.services
    settings = services.settings
    state = request.state  # a property (and a cast) each time it is named
    state.org = state.identity.org
    raw = await read_body(request.stream(), request.headers.get("content-length"), settings.max_body_bytes,
                          settings.body_timeout_s)
    if not raw and not required:
        return raw, None
    if len(raw) > THREAD_THRESHOLD_BYTES:
        services.big_bodies.watch(request)  # its memory is given back once it is gone, refused or not
    body = parse_body(raw, services.limits.max_json_depth)
    state.model = body.get("model") if isinstance(body.get("model"), str) else None
    return raw, body


async def _call(request: Request, fmt: WireFormat = WireFormat.CHAT) -> ModelCall:
    """The request as the forwarder takes it: in a format other than chat, ``body`` is its view."""
    services: Services = request.app.state.services
    state, headers = request.state, request.headers  # properties: named once
    identity = state.identity
    raw, body = await _read_json(request)
    assert body is not None
    view = INGRESSES[fmt].read(body, services.limits)
    native = body if fmt is not WireFormat.CHAT else None
    call = ModelCall(state.request_id, view.body, len(raw), identity, services.policies.for_identity(identity),
                    parse_sieve_headers(headers), headers, format=fmt, native=native, view=view,
                    route=request.scope["route"].path_format)
    state.call = call
    return call


async def chat_completions(request: Request) -> Response:
    call = await _call(request)
    return reply_response(await request.app.state.services.forwarder.complete(call))


async def messages(request: Request) -> Response:
    call = await _call(request, WireFormat.MESSAGES)
    return reply_response(await request.app.state.services.forwarder.complete(call))


async def responses(request: Request) -> Response:
    call = await _call(request, WireFormat.RESPONSES)
    return reply_response(await request.app.state.services.forwarder.complete(call))


async def _pass_on(request: Request, fmt: WireFormat, suffix: str, billed: bool = False) -> Response:
    services: Services = request.app.state.services
    body = (await _read_json(request, required=False))[1] if request.method == "POST" else None
    identity = request.state.identity
    call = PassThroughCall(request.state.request_id, identity, request.method, fmt, suffix,
                           request.url.query, request.headers, body, route=request.scope["route"].path_format,
                           policy=services.policies.for_identity(identity), billed=billed,
                           response_id=request.path_params.get("response_id"))
    return reply_response(await services.passthrough.forward(call))


async def count_tokens(request: Request) -> Response:
    return await _pass_on(request, WireFormat.MESSAGES, "/count_tokens")


async def compact_response(request: Request) -> Response:
    """Compaction runs the model over the input: billed, so budgeted (gateway.exchange.passthrough)."""
    return await _pass_on(request, WireFormat.RESPONSES, "/compact", billed=True)


async def response_input_tokens(request: Request) -> Response:
    return await _pass_on(request, WireFormat.RESPONSES, "/input_tokens")


async def cancel_response(request: Request) -> Response:
    return await _pass_on(request, WireFormat.RESPONSES, f"/{quote(request.path_params['response_id'], safe='')}/cancel")


async def stored_response(request: Request) -> Response:
    return await _pass_on(request, WireFormat.RESPONSES, "/" + quote(request.path_params["response_id"], safe=""))


async def response_input_items(request: Request) -> Response:
    response_id = quote(request.path_params["response_id"], safe="")
    return await _pass_on(request, WireFormat.RESPONSES, f"/{response_id}/input_items")


async def prune(request: Request) -> Response:
    fmt = parse_format(request.headers.get(FORMAT_HEADER))
    call = await _call(request, fmt)
    outcome = await request.app.state.services.forwarder.prune_only(call)
    report = outcome.result.report()
    report["request_id"] = call.request_id
    report["fail_open"] = outcome.failed
    report["cohort"] = outcome.cohort
    report["format"] = fmt
    if outcome.unpruned_reason is not None:  # one reason for the whole request (the control group)
        for message in report["messages"]:
            message["reason"] = outcome.unpruned_reason
    assert call.view is not None
    forwarded = adapter_for(fmt).write(call.sent_body, call.view, outcome.result)
    return Response(orjson.dumps({"request": forwarded, "report": report}),
                    headers=sieve_headers(call.request_id, outcome), media_type="application/json")


async def models(request: Request) -> Response:
    services: Services = request.app.state.services
    listed = await services.models.list(request.state.identity, request.headers)
    return json_response({"object": "list", "data": listed})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    services: Services = request.app.state.services
    state = await readiness(services.stores.redis, services.policies.default.store_fail_open)
    if state.problems:
        raise StoreUnavailable("not ready: " + "; ".join(state.problems))
    if state.degraded:
        return json_response({"status": "degraded", "degraded": list(state.degraded)})
    return json_response({"status": "ready"})


async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.services.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return Response(request.app.state.openapi_json, media_type="application/json")


# Swagger UI's page loads its script and style from /docs/<asset>, served from the copy litellm (a
# dependency) ships, so /docs works offline; without it the page falls back to Swagger UI's CDN.
SWAGGER_ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon.png": "image/png"}


@functools.cache
def swagger_assets() -> Path | None:
    package = litellm_package_dir()
    folder = package / "proxy" / "swagger" if package is not None else None
    return folder if folder is not None and all((folder / name).is_file() for name in SWAGGER_ASSETS) else None


async def docs(request: Request) -> HTMLResponse:
    if swagger_assets() is None:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Sieve API")
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Sieve API",
                               swagger_js_url="/docs/swagger-ui-bundle.js", swagger_css_url="/docs/swagger-ui.css",
                               swagger_favicon_url="/docs/favicon.png")


def _asset_answers() -> dict[str, Any]:
    extra = answers("NotFound")
    extra["responses"]["200"] = {"description": "The asset.",
                                 "content": {kind: {"schema": {"type": "string"}} for kind in SWAGGER_ASSETS.values()}}
    return extra


async def docs_asset(request: Request) -> Response:
    name, folder = request.path_params["asset"], swagger_assets()
    if name not in SWAGGER_ASSETS or folder is None:
        return json_response({"error": {"message": f"no route GET {request.url.path}", "type": "invalid_request_error",
                                        "param": None, "code": "not_found"}}, 404)
    return FileResponse(folder / name, media_type=SWAGGER_ASSETS[name], headers={"cache-control": "max-age=86400"})


CHAT = dict(
    tags=["openai"], response_model=ChatCompletion,
    description="Stream and non-stream. With `\"stream\": true` the provider's server-sent events are relayed "
                "chunk by chunk. Every body field Sieve does not know is forwarded untouched.",
    response_description="The provider's answer, relayed unchanged: a chat completion, or (with `\"stream\": true`) "
                         "its server-sent events ending with `data: [DONE]`.",
    openapi_extra=steered("InvalidRequest", "Forbidden", "NotFound", "RequestTimeout", "BodyTooLarge",
                          "BudgetExceeded", "UpstreamUnavailable", "ServiceUnavailable", "UpstreamTimeout",
                          stream=True, budget=True))
MESSAGES = dict(
    tags=["anthropic"], response_model=AnthropicMessage,
    description="Anthropic's Messages API (Claude Code, the `anthropic` SDK), stream and non-stream: the history "
                "is pruned in its own format (tool uses and their results together, thinking blocks untouched, "
                "`cache_control` breakpoints kept) and forwarded to `SIEVE_ANTHROPIC_BASE_URL` + `/v1/messages` "
                "with `SIEVE_ANTHROPIC_API_KEY` (as `x-api-key`), or with the client's own key in open or "
                "passthrough mode. `anthropic-version` and `anthropic-beta` pass through. Errors have Anthropic's "
                "shape `{\"type\": \"error\", \"error\": {\"type\", \"message\"}}`.",
    response_description="The provider's message, relayed unchanged: a message, or (with `\"stream\": true`) its "
                         "events (`message_start`, `content_block_*`, `message_delta`, `message_stop`, `ping`); a "
                         "stream Sieve cannot finish ends with an `error` event.",
    openapi_extra=steered("InvalidRequest", "Forbidden", "RequestTimeout", "BodyTooLarge", "BudgetExceeded",
                          "UpstreamUnavailable", "ServiceUnavailable", "UpstreamTimeout",
                          stream=True, budget=True, body="AnthropicMessages"))
RESPONSES = dict(
    tags=["openai"], response_model=OpenAIResponse,
    description="OpenAI's Responses API (Codex CLI, openai-agents), stream and non-stream: `input` is pruned in its "
                "own format (calls and their outputs together, reasoning items untouched) and forwarded to the "
                "model's OpenAI-compatible upstream + `/responses`. A request with `previous_response_id` (or "
                "`conversation`) keeps its history at the provider: it is forwarded unpruned. `prompt_cache_key`, "
                "`store`, `include`, `reasoning`, the `session-id` header and every unknown field pass through.",
    response_description="The provider's response, relayed unchanged: a response object, or (with "
                         "`\"stream\": true`) its `response.*` events; a stream Sieve cannot finish ends with "
                         "`response.failed` (or `error`, before the response was announced).",
    openapi_extra=steered("InvalidRequest", "Forbidden", "NotFound", "RequestTimeout", "BodyTooLarge",
                          "BudgetExceeded", "UpstreamUnavailable", "ServiceUnavailable", "UpstreamTimeout",
                          stream=True, budget=True, body="OpenAIResponses"))
class ResponseId(Convertor):
    """A stored response's id: one path segment of the providers' id alphabet (letters, digits,
    ``_`` and ``-``: never ``..`` or an encoded ``/``, which would reach another upstream path
    with the gateway's key), and not the name of a route of its own, so that
    ``/v1/responses/compact`` is the compaction route only (and its 405 advertises only POST)."""

    regex = r"(?!(?:compact|input_tokens)(?:/|$))" + RESPONSE_ID_CHARS

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("response_id", ResponseId())
RESPONSE_ID_PATTERN = "^" + ResponseId.regex + "$"

# What a pass-through route answers besides its own errors: any refusal of the provider, as sent.
PROVIDER_REFUSAL = {"4XX": {"description": "The provider's own refusal (a body it rejects, an unknown id), "
                                           "relayed as it sent it."}}


# A pass-through body is the provider's to judge; Sieve only needs it to be a JSON object.
ANY_OBJECT = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "The provider's request body, forwarded as sent."}}}}


def relayed(*errors: str, body: bool = False) -> dict[str, Any]:
    extra = answers(*errors)
    extra["responses"].update(PROVIDER_REFUSAL)
    if body:
        extra["requestBody"] = ANY_OBJECT
    return extra


RELAYED = dict(response_model=Relayed, response_description="The provider's answer, relayed unchanged.",
               openapi_extra=relayed("UpstreamUnavailable", "UpstreamTimeout", body=True))
# Compaction runs the model: budgeted like a forwarded request (gateway.exchange.passthrough).
BILLED = {**RELAYED, "openapi_extra": relayed("BudgetExceeded", "ServiceUnavailable", "UpstreamUnavailable",
                                              "UpstreamTimeout", body=True)}
RESPONSE_ID = {**RELAYED, "openapi_extra": {**relayed("NotFound", "UpstreamUnavailable", "UpstreamTimeout"),
                                            "parameters": [{"name": "response_id", "in": "path", "required": True,
                                                            "schema": {"type": "string",
                                                                       "pattern": RESPONSE_ID_PATTERN}}]}}
OPS = dict(tags=["operations"])
PRUNE = steered("InvalidRequest", "Forbidden", "RequestTimeout", "BodyTooLarge")
PRUNE["parameters"].append({
    "name": FORMAT_HEADER, "in": "header", "required": False,
    "schema": {"type": "string", "enum": [f.value for f in WireFormat], "default": WireFormat.CHAT.value},
    "description": "The body's format: `chat` (Chat Completions), `messages` (Anthropic Messages) or `responses` "
                   "(OpenAI Responses); the pruned body comes back in the same format."})

ROUTES = [
    ClientRoute("/v1/chat/completions", chat_completions, methods=["POST"], operation_id="createChatCompletion",
                summary="Prune the history, forward to the provider, relay the answer.", **CHAT),
    ClientRoute("/chat/completions", chat_completions, methods=["POST"],
                operation_id="createChatCompletionUnversioned",
                summary="The same as `POST /v1/chat/completions`, for clients whose base URL has no `/v1`.", **CHAT),
    ClientRoute("/v1/messages", messages, methods=["POST"], operation_id="createMessage",
                summary="Prune the history, forward to Anthropic, relay the message.", **MESSAGES),
    ClientRoute("/v1/messages/count_tokens", count_tokens, methods=["POST"], tags=["anthropic"],
                operation_id="countMessageTokens", summary="Passed through to Anthropic as sent (not pruned).",
                **RELAYED),
    ClientRoute("/v1/responses", responses, methods=["POST"], operation_id="createResponse",
                summary="Prune the input, forward to the provider's Responses API, relay the response.", **RESPONSES),
    ClientRoute("/v1/responses/compact", compact_response, methods=["POST"], tags=["openai"],
                operation_id="compactResponse", summary="Passed through to the provider as sent; budgeted (it runs "
                                                        "the model): reserved on its input, settled on its usage.",
                **BILLED),
    ClientRoute("/v1/responses/input_tokens", response_input_tokens, methods=["POST"], tags=["openai"],
                operation_id="countResponseInputTokens", summary="Passed through to the provider as sent.",
                **RELAYED),
    ClientRoute("/v1/responses/{response_id:response_id}/cancel", cancel_response, methods=["POST"], tags=["openai"],
                operation_id="cancelResponse", summary="A background response cancelled at the default upstream; "
                                                       "passed through.", **RESPONSE_ID),
    ClientRoute("/v1/responses/{response_id:response_id}", stored_response, methods=["GET"], tags=["openai"],
                operation_id="getResponse", summary="A stored response, from the default upstream; passed through.",
                **RESPONSE_ID),
    ClientRoute("/v1/responses/{response_id:response_id}", stored_response, methods=["DELETE"], tags=["openai"],
                operation_id="deleteResponse", summary="A stored response deleted at the default upstream; passed "
                                                       "through.", **RESPONSE_ID),
    ClientRoute("/v1/responses/{response_id:response_id}/input_items", response_input_items, methods=["GET"], tags=["openai"],
                operation_id="listResponseInputItems", summary="A stored response's input items, from the default "
                                                               "upstream; passed through.", **RESPONSE_ID),
    ClientRoute("/v1/prune", prune, methods=["POST"], tags=["sieve"], operation_id="prune",
                summary="What Sieve would forward for this body, and why; nothing is forwarded, no budget is spent.",
                description="Takes the same body and headers as a chat completion, or (with `x-sieve-format`) an "
                            "Anthropic Messages or OpenAI Responses body, and answers the pruned body in the same "
                            "format. Any model name is accepted (no provider is asked).",
                response_model=PruneResponse, response_description="The request Sieve would forward, and the "
                                                                   "prune report.",
                openapi_extra=PRUNE),
    ClientRoute("/v1/models", models, methods=["GET"], tags=["openai"], operation_id="listModels",
                summary="The models this gateway routes (configured ones, plus what the default upstream lists).",
                response_model=ModelList, response_description="A list of models, as OpenAI lists them."),
    OpsRoute("/healthz", healthz, methods=["GET"], operation_id="healthz", summary="Liveness.",
             response_model=Health, response_description="The process is serving.", **OPS),
    OpsRoute("/readyz", readyz, methods=["GET"], operation_id="readyz",
             summary="Readiness, answered within a second; not ready when a fail-closed policy cannot reach "
                     "Redis, ready but `degraded` when a fail-open one cannot.",
             response_model=Readiness, response_description="Ready to serve (`degraded` lists what is missing).",
             openapi_extra=answers("ServiceUnavailable"), **OPS),
    OpsRoute("/metrics", metrics, methods=["GET"], operation_id="metrics",
             summary="Prometheus exposition (`sieve_*` metrics).", response_class=PlainTextResponse,
             response_description=f"Prometheus text format (`{CONTENT_TYPE_LATEST}`).", **OPS),
    OpsRoute("/openapi.json", openapi, methods=["GET"], operation_id="openapi", summary="This document, as JSON.",
             response_model=OpenAPIDocument, response_description="The OpenAPI document of this gateway.", **OPS),
    OpsRoute("/docs", docs, methods=["GET"], operation_id="docs", summary="This document, as a Swagger UI page.",
             response_class=HTMLResponse, response_description="An HTML page that loads `/openapi.json`.", **OPS),
    OpsRoute("/docs/{asset}", docs_asset, methods=["GET"], operation_id="docsAsset",
             summary="The Swagger UI script, style and icon `/docs` loads (served locally: the page works offline).",
             response_class=PlainTextResponse, response_description="The asset (JavaScript, CSS or PNG).",
             openapi_extra={**_asset_answers(), "parameters": [{
                 "name": "asset", "in": "path", "required": True,
                 "schema": {"type": "string", "enum": sorted(SWAGGER_ASSETS)}}]}, **OPS),
]
