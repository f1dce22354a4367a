"""Rendering: JSON bodies with orjson, and the one error handler."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import ClientClosedRequest, SieveError

log = logging.getLogger("sieve")


def json_response(payload: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, headers=dict(headers or {}),
                    media_type="application/json")


def error_response(exc: SieveError, request_id: str | None = None) -> Response:
    headers = dict(exc.headers)
    if request_id:
        headers["x-sieve-request-id"] = request_id
    try:
        return json_response(exc.body(), exc.status, headers)
    except TypeError:  # an extra field orjson cannot write (a number beyond 64 bits): say it as text
        body = exc.body()
        body["error"] = {k: v if isinstance(v, (str, type(None))) else str(v) for k, v in body["error"].items()}
        return json_response(body, exc.status, headers)


async def handle_sieve_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SieveError)
    services = getattr(request.app.state, "services", None)
    if services is not None and request.url.path.endswith("/chat/completions"):
        services.count_rejection(exc, getattr(request.state, "org", None), getattr(request.state, "model", None))
    return error_response(exc, getattr(request.state, "request_id", None))


async def handle_client_disconnect(request: Request, exc: Exception) -> Response:
    """Starlette's ``ClientDisconnect`` while reading the body: an everyday event, counted
    like any refused request rather than logged as a crash."""
    return await handle_sieve_error(request, ClientClosedRequest(
        "the client closed the connection before sending its whole request"))


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 and friends, in OpenAI's error shape."""
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", "") or "error"
    message = (f"no route {request.method} {request.url.path}" if status in (404, 405) else str(detail))
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": "not_found" if status == 404 else "method_not_allowed" if status == 405 else None}}
    return json_response(body, status, getattr(exc, "headers", None))


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Last resort: a bug must still answer in OpenAI's shape, without a traceback."""
    request_id = getattr(request.state, "request_id", None)
    log.exception("unhandled error in request %s", request_id)
    services = getattr(request.app.state, "services", None)
    if services is not None and request.url.path.endswith("/chat/completions"):
        services.count_outcome("internal_error", getattr(request.state, "org", None),
                               getattr(request.state, "model", None))
    body = {"error": {"message": "internal error in the Sieve gateway; the request was not forwarded"
                                 f" (request id {request_id})", "type": "internal_error",
                      "param": None, "code": "internal_error"}}
    return json_response(body, 500, {"x-sieve-request-id": request_id} if request_id else None)
