"""create_app(settings): wires everything; the lifespan owns clients and stores.
uvicorn_config(app, settings): how uvicorn serves it (``sieve serve`` and the tests' server).

::

    app = create_app(Settings.from_env())
    uvicorn.Server(uvicorn_config(app, settings)).run()
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
from typing import Any, AsyncIterator

import orjson
import uvicorn
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect

from gateway.api.admin import ADMIN_ROUTES
from gateway.api.connections import header_bound_protocol, raw_header_bound
from gateway.api.openapi import describe
from gateway.api.rendering import (handle_client_disconnect, handle_http_error, handle_sieve_error, handle_unexpected,
                                   handle_validation_error)
from gateway.api.routes import ROUTES
from gateway.api.shutdown import AnswerCutRequests
from gateway.errors import SieveError
from gateway.api.services import Services
from gateway.config import Settings
from gateway.telemetry import Metrics

LOCK_SWITCH_INTERVAL_S = 0.001
# A request allocates a few thousand short-lived containers; at the default (700, 10, 10)
# the young generation is collected several times per request. Most of them are gone well
# before 20,000 allocations, so collections are rarer and each finds less alive.
GC_THRESHOLDS = (20_000, 20, 20)


def create_app(settings: Settings, metrics: Metrics | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await Services.start(settings, metrics)
        app.state.services = services
        # Everything built so far lives as long as the process: move it out of the
        # collector's reach, so full collections on the request path stay short.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        # No log format of Sieve's names the caller's frame, thread or process; without these
        # a record (an access line per request) is not given them, each a lookup.
        logging._srcfile = None  # type: ignore[attr-defined]
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
        # Big bodies are pruned in worker threads (gateway.exchange.big_bodies) that share the interpreter
        # lock with the event loop. The loop asks for the lock again after each wait for I/O,
        # several times per request, and a thread waiting for it is served only after the
        # switch interval (5 ms by default): small chats beside a big prune slow down by that
        # much each time. At 1 ms the loop gets its turn sooner (BENCHMARKS.md, "Big bodies");
        # with no thread waiting the interval changes nothing.
        sys.setswitchinterval(LOCK_SWITCH_INTERVAL_S)
        try:
            yield
        finally:
            await services.stop()

    # The ops routes serve the description and its page themselves, behind the access guard.
    # FastAPI's own OpenTelemetry hooks stay off: Sieve's metrics are its Prometheus contract,
    # and the hooks look the global providers up again on every request.
    app = FastAPI(lifespan=lifespan, routes=[*ROUTES, *ADMIN_ROUTES], openapi_url=None, docs_url=None, redoc_url=None,
                  telemetry={"tracing": False, "metrics": False, "logs": False},
                  middleware=[Middleware(AnswerCutRequests)],
                  exception_handlers={SieveError: handle_sieve_error, HTTPException: handle_http_error,
                                      RequestValidationError: handle_validation_error,
                                      ClientDisconnect: handle_client_disconnect, Exception: handle_unexpected})
    app.state.openapi_json = orjson.dumps(describe(app))
    return app


def uvicorn_config(app: FastAPI, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """uvicorn's config for ``app``: Sieve's bind, the header bounds of every connection
    (:mod:`gateway.api.connections`) and the graceful shutdown's grace."""
    options: dict[str, Any] = dict(
        host=settings.host, port=settings.port, log_level=settings.log_level, loop="auto",
        http=header_bound_protocol(settings.header_timeout_s, raw_header_bound(settings.max_header_bytes)),
        access_log=False, timeout_graceful_shutdown=settings.shutdown_grace_s)
    options.update(overrides)
    return uvicorn.Config(app, **options)
