"""Rendering: JSON bodies with orjson, and the error handlers, in each format's error shape.

``SieveError`` is the one error tree (``gateway.errors``); the other handlers
translate what the framework raises on its own (no route, wrong method, a body
that fails an admin model) into the same body: OpenAI's ``{"error": {...}}``,
or Anthropic's ``{"type": "error", "error": {...}}`` on the ``/v1/messages``
routes, whose clients parse only that (``gateway.wire.error_shapes``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncGenerator, Callable, Mapping

import orjson
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Match

from gateway.errors import ClientClosedRequest, InvalidRequest, SieveError
from gateway.exchange import Reply
from gateway.telemetry import AccessLine, log_access, redact_url
from gateway.wire import anthropic_error_body, anthropic_error_type

# The routes that forward a request (metrics count their refusals), and those that answer in Anthropic's shape.
# Matched as path endings: a route mounted under a prefix forwards all the same.
FORWARDING_PATHS = ("/chat/completions", "/v1/messages", "/v1/responses")
ANTHROPIC_PATHS = "/v1/messages"

log = logging.getLogger("sieve")


def json_response(payload: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, headers=dict(headers or {}),
                    media_type="application/json")


def reply_response(reply: Reply) -> Response:
    """The proxy's answer as the ASGI response that sends it."""
    if reply.stream is None:
        return Response(reply.body, status_code=reply.status, headers=reply.headers)
    assert reply.on_close is not None
    return RelayResponse(reply.stream, on_close=reply.on_close, status_code=reply.status, headers=reply.headers)


class RelayResponse(StreamingResponse):
    """A StreamingResponse that always ends its relay, even one that never started.

    Starlette neither closes a body iterator it stopped iterating nor starts one whose
    task was cancelled first (a client gone before the first byte, or shutdown): either
    way the relay's ``finally`` (release the upstream connection, account the request)
    would wait for the garbage collector, or never run. Closing it here runs it now;
    ``on_close`` covers the relay that never started."""

    def __init__(self, content: AsyncGenerator[bytes, None], *, on_close: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._relay = content
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._stream_until_disconnect(receive, send)
        finally:
            try:
                await self._relay.aclose()
            finally:
                self._on_close()

    async def _stream_until_disconnect(self, receive: Any, send: Any) -> None:
        """Starlette's relay for an ASGI 2.3 server, without its task group: the stream runs in
        the request's own task (its first bytes go out a loop turn sooner), and a task waits
        for the client's disconnect, which ends the relay as Starlette's does (the relay's
        ``finally`` releases the upstream and accounts the request). Any other cancellation
        (the shutdown grace ended) goes on as it came."""
        streaming = asyncio.current_task()
        assert streaming is not None
        state = {"finished": False, "left": False}

        def on_disconnect(listener: asyncio.Future[None]) -> None:
            if not state["finished"] and not listener.cancelled() and listener.exception() is None:
                state["left"] = True
                streaming.cancel()

        listener = asyncio.ensure_future(self.listen_for_disconnect(receive))
        listener.add_done_callback(on_disconnect)
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not state["left"]:
                raise
            streaming.uncancel()  # the client left: the relay ends here, as Starlette's would
        finally:
            state["finished"] = True
            listener.cancel()


def error_response(exc: SieveError, request_id: str | None = None, anthropic: bool = False) -> Response:
    headers = dict(exc.headers)
    if request_id:
        headers["x-sieve-request-id"] = request_id
    body = anthropic_error_body(exc) if anthropic else exc.body()
    message = body["error"].get("message")
    if isinstance(message, str) and "://" in message:
        # Whoever built the message, a URL in it reaches the client without its credentials.
        body["error"]["message"] = redact_url(message)
    try:
        return json_response(body, exc.status, headers)
    except TypeError:  # an extra field orjson cannot write (a number beyond 64 bits): say it as text
        body["error"] = {k: v if isinstance(v, (str, type(None))) else str(v) for k, v in body["error"].items()}
        return json_response(body, exc.status, headers)


def _anthropic(request: Request) -> bool:
    return request.url.path.startswith(ANTHROPIC_PATHS)


def _in_shape(request: Request, body: dict[str, Any], status: int) -> dict[str, Any]:
    """An OpenAI-shaped error ``body`` of the framework's own, in the shape of the route's format."""
    if not _anthropic(request):
        return body
    return {"type": "error", "error": {**body["error"], "type": anthropic_error_type(status)}}


async def handle_sieve_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SieveError)
    services = getattr(request.app.state, "services", None)
    if services is not None and request.url.path.endswith(FORWARDING_PATHS):
        services.recorder.refused(exc, getattr(request.state, "org", None), getattr(request.state, "model", None),
                                  _template(request))
    return error_response(exc, getattr(request.state, "request_id", None), _anthropic(request))


async def handle_validation_error(request: Request, exc: Exception) -> Response:
    """A body or parameter that fails a route's model (the admin routes): a 400 naming the
    field, as every other invalid request."""
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    loc = [part for part in first.get("loc", ()) if part not in ("body", "path", "query", "header")]
    param = str(loc[-1]) if loc and isinstance(loc[-1], str) else None
    if first.get("type") == "json_invalid":
        message = f"request body is not valid JSON: {first.get('ctx', {}).get('error', 'decode error')}"
    else:
        where = ".".join(str(part) for part in loc) or "request body"
        message = f"{where}: {first.get('msg', 'invalid')}"
    return await handle_sieve_error(request, InvalidRequest(message, param=param))


async def handle_client_disconnect(request: Request, exc: Exception) -> Response:
    """Starlette's ``ClientDisconnect`` while reading the body: an everyday event, counted
    like any refused request rather than logged as a crash."""
    return await handle_sieve_error(request, ClientClosedRequest(
        "the client closed the connection before sending its whole request"))


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 and friends, in OpenAI's error shape, with their access line
    (no route's guard ran to write it)."""
    status = getattr(exc, "status_code", 500)
    if getattr(request.state, "request_id", None) is None:
        route = _route_of(request)
        log_access(AccessLine(None, method=request.method, route=route, status=status,
                              path=request.url.path if route is None else None))
    detail = getattr(exc, "detail", "") or "error"
    message = (f"no route {request.method} {request.url.path}" if status in (404, 405) else str(detail))
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": "not_found" if status == 404 else "method_not_allowed" if status == 405 else None}}
    headers = {k.lower(): v for k, v in (getattr(exc, "headers", None) or {}).items()}
    if status == 405:  # replaces Starlette's own, which names one route's methods
        headers["allow"] = ", ".join(_allowed_methods(request))
    return json_response(_in_shape(request, body, status), status, headers)


def _template(request: Request) -> str | None:
    """The template of the route that served ``request`` (a forwarding route's: a closed set)."""
    route = request.scope.get("route")
    return getattr(route, "path_format", None)


def _route_of(request: Request) -> str | None:
    """The template of the first route whose path matches (a 405's), None when none does."""
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] is not Match.NONE:
            return getattr(route, "path_format", None)
    return None


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path: Starlette's 405 names only those of the
    first route whose path matches, and one path may carry a route per method."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] is not Match.NONE:  # PARTIAL: the path, not the method
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Last resort: a bug must still answer in OpenAI's shape, without a traceback."""
    request_id = getattr(request.state, "request_id", None)
    log.exception("unhandled error in request %s", request_id)
    services = getattr(request.app.state, "services", None)
    if services is not None and request.url.path.endswith(FORWARDING_PATHS):
        services.recorder.failed(getattr(request.state, "org", None), getattr(request.state, "model", None),
                                 _template(request) if request.url.path.endswith(FORWARDING_PATHS) else None)
    body = {"error": {"message": "internal error in the Sieve gateway; the request was not forwarded"
                                 f" (request id {request_id})", "type": "internal_error",
                      "param": None, "code": "internal_error"}}
    return json_response(_in_shape(request, body, 500), 500, {"x-sieve-request-id": request_id} if request_id else None)
