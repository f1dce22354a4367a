"""The route table and thin handlers: parse → service → respond.

Every /v1 route authenticates first; /healthz, /readyz, /metrics and
/openapi.json are open (probes, the Prometheus scraper and API tooling carry no key).
"""

from __future__ import annotations

import uuid

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.api.openapi import SCHEMA_JSON
from gateway.api.protocol import check_chat_body, parse_body, parse_sieve_headers
from gateway.api.responses import json_response
from gateway.errors import BodyTooLarge, StoreUnavailable
from gateway.proxy import ChatCall
from gateway.services import Services

async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body is {declared} bytes; the limit is {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _chat_call(request: Request) -> ChatCall:
    services: Services = request.app.state.services
    request_id = request.state.request_id = "req_" + uuid.uuid4().hex[:24]
    headers = request.headers
    identity = await services.authenticate(headers)
    request.state.org = identity.org
    raw = await read_body(request, services.settings.max_body_bytes)
    body = parse_body(raw)
    request.state.model = body.get("model") if isinstance(body.get("model"), str) else None
    check_chat_body(body)
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
    headers = {"x-sieve-request-id": call.request_id, "x-sieve-original-tokens": str(r.original_tokens),
               "x-sieve-forwarded-tokens": str(r.forwarded_tokens), "x-sieve-saved-tokens": str(r.saved_tokens)}
    return Response(orjson.dumps({"request": r.request, "report": report}), headers=headers,
                    media_type="application/json")


async def models(request: Request) -> Response:
    services: Services = request.app.state.services
    identity = await services.authenticate(request.headers)
    return json_response({"object": "list", "data": await services.model_list(identity, request.headers)})


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
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/prune", prune, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]

from gateway.api.admin import ADMIN_ROUTES  # noqa: E402 - admin routes register after the core table

ROUTES += ADMIN_ROUTES
