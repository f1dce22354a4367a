"""The route table and thin handlers: parse → service → respond.

Each route's class is its access level (:mod:`gateway.api.access`):
the /v1 routes need a client key; the ops routes (/healthz, /readyz,
/metrics, /openapi.json, /docs) are open unless ``SIEVE_OPEN_ROUTES`` closes
them; the admin routes (:mod:`gateway.api.admin`) need the admin key.

These routes take the raw ``Request`` and answer a ``Response`` themselves
(:class:`gateway.api.access.RawRoute`): a chat body is checked as plain dicts
(:mod:`gateway.wire.chat`), far cheaper on a 100k-token history than building
models of it, and FastAPI's request handling stays off the hot path. What they
accept and answer is described for OpenAPI in :mod:`gateway.api.schemas`.
"""

from __future__ import annotations

import orjson
from fastapi.openapi.docs import get_swagger_ui_html
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from gateway.api.access import ClientRoute, OpsRoute
from gateway.api.responses import json_response, reply_response
from gateway.api.schemas import (ChatCompletion, Health, ModelList, OpenAPIDocument, PruneResponse, Readiness, answers,
                                 steered)
from gateway.big_bodies import THREAD_THRESHOLD_BYTES
from gateway.errors import StoreUnavailable
from gateway.health import readiness
from gateway.proxy import sieve_headers
from gateway.services import Services
from gateway.wire.body import parse_body, read_body
from gateway.wire.call import ChatCall
from gateway.wire.chat import check_chat_body
from gateway.wire.headers import parse_sieve_headers


async def _chat_call(request: Request) -> ChatCall:
    services: Services = request.app.state.services
    settings = services.settings
    identity = request.state.identity
    request.state.org = identity.org
    raw = await read_body(request.stream(), request.headers.get("content-length"), settings.max_body_bytes,
                          settings.body_timeout_s)
    if len(raw) > THREAD_THRESHOLD_BYTES:
        services.big_bodies.watch(request)  # its memory is given back once it is gone, refused or not
    body = parse_body(raw, services.limits.max_json_depth)
    request.state.model = body.get("model") if isinstance(body.get("model"), str) else None
    check_chat_body(body, services.limits)
    return ChatCall(request.state.request_id, body, len(raw), identity, services.policies.for_identity(identity),
                    parse_sieve_headers(request.headers), request.headers)


async def chat_completions(request: Request) -> Response:
    call = await _chat_call(request)
    return reply_response(await request.app.state.services.proxy.complete(call))


async def prune(request: Request) -> Response:
    call = await _chat_call(request)
    outcome = await request.app.state.services.proxy.prune_only(call)
    report = outcome.result.report()
    report["request_id"] = call.request_id
    report["fail_open"] = outcome.failed
    return Response(orjson.dumps({"request": outcome.result.request, "report": report}),
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


async def docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Sieve API")


CHAT = dict(
    tags=["openai"], response_model=ChatCompletion,
    description="Stream and non-stream. With `\"stream\": true` the provider's server-sent events are relayed "
                "chunk by chunk. Every body field Sieve does not know is forwarded untouched.",
    response_description="The provider's answer, relayed unchanged: a chat completion, or (with `\"stream\": true`) "
                         "its server-sent events ending with `data: [DONE]`.",
    openapi_extra=steered("InvalidRequest", "Forbidden", "NotFound", "RequestTimeout", "BodyTooLarge",
                          "BudgetExceeded", "UpstreamUnavailable", "ServiceUnavailable", "UpstreamTimeout",
                          stream=True, budget=True))
OPS = dict(tags=["operations"])

ROUTES = [
    ClientRoute("/v1/chat/completions", chat_completions, methods=["POST"], operation_id="createChatCompletion",
                summary="Prune the history, forward to the provider, relay the answer.", **CHAT),
    ClientRoute("/chat/completions", chat_completions, methods=["POST"],
                operation_id="createChatCompletionUnversioned",
                summary="The same as `POST /v1/chat/completions`, for clients whose base URL has no `/v1`.", **CHAT),
    ClientRoute("/v1/prune", prune, methods=["POST"], tags=["sieve"], operation_id="prune",
                summary="What Sieve would forward for this body, and why; nothing is forwarded, no budget is spent.",
                description="Takes the same body and headers as a chat completion. Any model name is accepted "
                            "(no provider is asked).",
                response_model=PruneResponse, response_description="The request Sieve would forward, and the "
                                                                   "prune report.",
                openapi_extra=steered("InvalidRequest", "Forbidden", "RequestTimeout", "BodyTooLarge")),
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
]
