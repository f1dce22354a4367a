"""The route table and thin handlers: parse → service → respond.

Each route's class is its access level (:mod:`gateway.api.access`):
the /v1 routes need a client key; the ops routes (/healthz, /readyz,
/metrics, /openapi.json, /docs) are open unless ``SIEVE_OPEN_ROUTES`` closes
them; the admin routes (:mod:`gateway.api.admin`) need the admin key.

The chat routes take the raw ``Request``: the body is checked as plain dicts
(:mod:`gateway.wire.chat`), far cheaper on a 100k-token history than building
models of it. What they accept is described for OpenAPI in
:mod:`gateway.api.schemas`.
"""

from __future__ import annotations

import orjson
from fastapi.openapi.docs import get_swagger_ui_html
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.api.access import ClientRoute, OpsRoute
from gateway.api.responses import json_response, reply_response
from gateway.errors import StoreUnavailable
from gateway.health import readiness_problems
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
    problems = await readiness_problems(services.stores.redis, services.policies.default.store_fail_open)
    if problems:
        raise StoreUnavailable("not ready: " + "; ".join(problems))
    return json_response({"status": "ready"})


async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.services.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return Response(request.app.state.openapi_json, media_type="application/json")


async def docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Sieve API")


ROUTES = [
    ClientRoute("/v1/chat/completions", chat_completions, methods=["POST"]),
    ClientRoute("/chat/completions", chat_completions, methods=["POST"]),
    ClientRoute("/v1/prune", prune, methods=["POST"]),
    ClientRoute("/v1/models", models, methods=["GET"]),
    OpsRoute("/healthz", healthz, methods=["GET"]),
    OpsRoute("/readyz", readyz, methods=["GET"]),
    OpsRoute("/metrics", metrics, methods=["GET"]),
    OpsRoute("/openapi.json", openapi, methods=["GET"]),
    OpsRoute("/docs", docs, methods=["GET"]),
]
