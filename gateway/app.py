"""create_app(settings): wires everything; the lifespan owns clients and stores.

::

    app = create_app(Settings.from_env())
    uvicorn.run(app, host="127.0.0.1", port=8080)
"""

from __future__ import annotations

import contextlib
import gc
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect

from gateway.api.responses import handle_client_disconnect, handle_http_error, handle_sieve_error, handle_unexpected
from gateway.api.routes import ROUTES
from gateway.api.shutdown import AnswerCutRequests
from gateway.errors import SieveError
from gateway.services import Services
from gateway.settings import Settings
from gateway.telemetry.metrics import Metrics


def create_app(settings: Settings, metrics: Metrics | None = None) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = await Services.start(settings, metrics)
        app.state.services = services
        # Everything built so far lives as long as the process: move it out of the
        # collector's reach, so full collections on the request path stay short.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await services.stop()

    return Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=[Middleware(AnswerCutRequests)],
        exception_handlers={SieveError: handle_sieve_error, HTTPException: handle_http_error,
                            ClientDisconnect: handle_client_disconnect, Exception: handle_unexpected},
    )
