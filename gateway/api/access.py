"""Who may call which route: every route declares its access level, one guard enforces it.

A route's class is its level, so the route table reads as a list of who may
call what, and no route is reachable without the guard (a test walks the
table to keep it that way)::

    ROUTES = [ClientRoute("/v1/prune", prune, methods=["POST"]), ...]

Levels:

* ``CLIENT``: a Sieve virtual key or a mapped provider key (anonymous only on an
  open, loopback-only gateway). The identity lands in ``request.state.identity``.
* ``ADMIN``: the admin key; without one configured the route does not exist (404).
* ``OPS``: probes, the Prometheus scrape and the API description. Open when
  listed in ``settings.open_routes`` (all of them by default), else the admin key
  or the metrics key.

The guard runs before FastAPI reads or validates a body, so a request without
the right key is a 401/403 whatever its body holds. It also bounds the request
headers, before any of them is parsed. Every failed key check is counted
(``sieve_auth_failures_total{route}``, the route's path template), and a client
address that keeps failing is refused for a while, its keys unchecked
(:mod:`gateway.auth.throttle`, counted across the replicas when Redis is configured). It writes the access line of every request that
is not forwarded (:mod:`gateway.telemetry.access_log`). The client and ops routes take the raw
request (:class:`RawRoute`): FastAPI describes them and handles only the admin
routes' parameters and models.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import os
import time
from enum import StrEnum
from typing import Any, Callable, Coroutine

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import request_response

from gateway.errors import Forbidden, HeadersTooLarge, InvalidRequest, SieveError, TooManyAuthFailures, Unauthorized
from gateway.telemetry import AccessLine, log_access
from gateway.wire import presented_key

log = logging.getLogger("sieve.auth")

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class Access(StrEnum):
    CLIENT = "client"
    ADMIN = "admin"
    OPS = "ops"


class AdminDisabled(InvalidRequest):
    status = 404
    code = "not_found"


class GuardedRoute(APIRoute):
    """A route behind :func:`check_access` at its level; FastAPI then handles the request
    (path and query parameters, body and response models)."""

    access: Access

    def get_route_handler(self) -> Handler:
        return _behind_guard(super().get_route_handler(), self.access, self.path_format)


class RawRoute(GuardedRoute):
    """A guarded route whose endpoint takes the raw request and answers a response itself.

    FastAPI documents it (summary, response model, ``openapi_extra``) but does not handle
    it: no dependency solving, endpoint context or response model on the path every chat
    request takes (the guard and the endpoint are all that run; measured: 2.4 % of a
    passthrough chat request's instructions, see docs/speed.md)."""

    def __init__(self, path: str, endpoint: Handler, **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        # Starlette's request/response adapter, not FastAPI's: its two exit stacks per request
        # serve dependencies with yield, which a raw route has none of.
        self.app = request_response(self.get_route_handler())

    def get_route_handler(self) -> Handler:
        return _behind_guard(self.endpoint, self.access, self.path_format)


class ClientRoute(RawRoute):
    access = Access.CLIENT


class OpsRoute(RawRoute):
    access = Access.OPS


class AdminRoute(GuardedRoute):
    access = Access.ADMIN


def _behind_guard(handler: Handler, access: Access, route: str) -> Handler:
    async def guarded(request: Request) -> Response:
        started = time.perf_counter()
        try:
            await check_access(request, access, route)
            response = await handler(request)
        except asyncio.CancelledError:
            raise  # the shutdown grace ended: gateway.api.shutdown answers it
        except Exception as exc:
            _log_unforwarded(request, route, _status_of(exc), started)
            raise
        if access is not Access.OPS or response.status_code >= 400:
            _log_unforwarded(request, route, response.status_code, started)
        return response

    return guarded


def _log_unforwarded(request: Request, route: str, status: int, started: float) -> None:
    """The access line of a request the accounting will not see (one never forwarded)."""
    state = request.state
    call = getattr(state, "call", None)
    if call is not None and call.forwarded:
        return
    identity = getattr(state, "identity", None)
    log_access(AccessLine(request_id=getattr(state, "request_id", None), method=request.method, route=route,
                          status=status, org=identity.org if identity is not None else None,
                          model=getattr(state, "model", None),
                          duration_ms=(time.perf_counter() - started) * 1000))


def _status_of(exc: Exception) -> int:
    if isinstance(exc, SieveError):
        return exc.status
    if isinstance(exc, RequestValidationError):
        return 400  # rendered as an invalid request (gateway.api.rendering)
    if isinstance(exc, ClientDisconnect):
        return 499
    return getattr(exc, "status_code", 500)  # Starlette's HTTPException, or a bug


async def check_access(request: Request, access: Access, route: str) -> None:
    services = request.app.state.services
    request.state.request_id = "req_" + os.urandom(12).hex()  # 96 random bits, as uuid4's first 24 hex digits
    check_header_size(request, services.settings.max_header_bytes)
    if access is Access.OPS and _ops_page(request.url.path) in services.settings.open_routes:
        return
    client = request.client.host if request.client is not None else "unknown"
    wait = services.auth_throttle.retry_after(client)
    if wait is not None:
        services.metrics.auth_throttled.labels(route).inc()
        raise TooManyAuthFailures(
            f"too many failed key checks from this address; try again in {math.ceil(wait)} s",
            headers={"retry-after": str(math.ceil(wait))})
    try:
        await _check_key(request, access)
    except (Unauthorized, Forbidden):
        services.metrics.auth_failures.labels(route).inc()
        if await services.auth_throttle.failed(client):
            log.warning("client %s failed %d key checks within %g s: refused until they age out",
                        client, services.auth_throttle.limit, services.auth_throttle.window_s)
        raise


def _ops_page(path: str) -> str:
    """The ops route a path belongs to: ``/docs``'s assets are as open as the page that loads them."""
    return "/docs" if path.startswith("/docs/") else path


async def _check_key(request: Request, access: Access) -> None:
    if access is Access.CLIENT:
        request.state.identity = await request.app.state.services.authenticator.authenticate(request.headers)
    elif access is Access.ADMIN:
        require_admin(request)
    else:
        require_ops(request)


def check_header_size(request: Request, limit: int) -> None:
    size = sum(len(name) + len(value) for name, value in request.scope["headers"])
    if size > limit:
        raise HeadersTooLarge(f"request headers are {size} bytes together; the limit is {limit} bytes")


def require_admin(request: Request) -> None:
    admin_key = request.app.state.services.settings.admin_key
    if not admin_key:
        raise AdminDisabled(f"{request.url.path} not found: admin routes are off (no SIEVE_ADMIN_KEY set)")
    if not _matches(_bearer(request, "Admin routes need 'Authorization: Bearer <admin key>'."), admin_key):
        raise Forbidden("This key is not the admin key.", code="not_admin")


def require_ops(request: Request) -> None:
    settings = request.app.state.services.settings
    key = _bearer(request, f"{request.url.path} is not an open route (SIEVE_OPEN_ROUTES): send "
                           "'Authorization: Bearer <metrics key or admin key>'.")
    if not any(_matches(key, allowed) for allowed in (settings.admin_key, settings.metrics_key) if allowed):
        raise Forbidden(f"{request.url.path} needs the metrics key or the admin key.", code="not_allowed")


def _bearer(request: Request, how: str) -> str:
    try:
        key = presented_key(request.headers)
    except Unauthorized as exc:
        raise Unauthorized(f"{how} {exc.message}") from None
    if key is None:
        raise Unauthorized(how)
    return key


def _matches(presented: str, expected: str) -> bool:
    # Compare digests: equal lengths, so the comparison time says nothing about the key.
    return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(),
                               hashlib.sha256(expected.encode()).digest())
