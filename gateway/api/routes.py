"""The route table and thin handlers: parse → service → respond.

Every route is wrapped by :func:`gateway.api.access.guarded` with its access
level: /v1 routes need a client key; the ops routes (/healthz, /readyz,
/metrics, /openapi.json) are open unless ``SIEVE_OPEN_ROUTES`` closes them.
"""

from __future__ import annotations

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.api.access import Access, guarded
from gateway.api.openapi import SCHEMA_JSON
from gateway.api.protocol import check_chat_body, parse_body, parse_sieve_headers, read_body
from gateway.api.responses import json_response
from gateway.errors import StoreUnavailable
from gateway.proxy import ChatCall, sieve_headers
from gateway.services import Services

async def _chat_call(request: Request) -> ChatCall:
    services: Services = request.app.state.services
    request_id = request.state.request_id
    headers = request.headers
    identity = request.state.identity
    request.state.org = identity.org
    raw = await read_body(request, services.settings.max_body_bytes, services.settings.body_timeout_s)
    body = parse_body(raw, services.limits.max_json_depth)
    request.state.model = body.get("model") if isinstance(body.get("model"), str) else None
    check_chat_body(body, services.limits)
    return ChatCall(request_id, body, len(raw), identity, services.policy_for(identity),
                    parse_sieve_headers(headers), headers)


async def chat_completions(request: Request) -> Response:
    call = await _chat_call(request)
    return await request.app.state.services.proxy.complete(call)


async def prune(request: Request) -> Response:
    call = await _chat_call(request)
    outcome = await request.app.state.services.proxy.prune_only(call)
    r = outcome.result
    report = r.report()
    report["request_id"] = call.request_id
    report["fail_open"] = outcome.failed
    return Response(orjson.dumps({"request": r.request, "report": report}),
                    headers=sieve_headers(call.request_id, outcome), media_type="application/json")


async def models(request: Request) -> Response:
    services: Services = request.app.state.services
    return json_response({"object": "list", "data": await services.model_list(request.state.identity,
                                                                              request.headers)})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    problems = await request.app.state.services.readiness_problems()
    if problems:
        raise StoreUnavailable("not ready: " + "; ".join(problems))
    return json_response({"status": "ready"})


async def metrics(request: Request) -> Response:
    registry = request.app.state.services.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return Response(SCHEMA_JSON, media_type="application/json")


ROUTES = [
    Route("/v1/chat/completions", guarded(Access.CLIENT, chat_completions), methods=["POST"]),
    Route("/chat/completions", guarded(Access.CLIENT, chat_completions), methods=["POST"]),
    Route("/v1/prune", guarded(Access.CLIENT, prune), methods=["POST"]),
    Route("/v1/models", guarded(Access.CLIENT, models), methods=["GET"]),
    Route("/healthz", guarded(Access.OPS, healthz), methods=["GET"]),
    Route("/readyz", guarded(Access.OPS, readyz), methods=["GET"]),
    Route("/metrics", guarded(Access.OPS, metrics), methods=["GET"]),
    Route("/openapi.json", guarded(Access.OPS, openapi), methods=["GET"]),
]

from gateway.api.admin import ADMIN_ROUTES  # noqa: E402 - admin routes register after the core table

ROUTES += ADMIN_ROUTES
