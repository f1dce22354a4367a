"""create_app(settings): wires everything; the lifespan owns clients and stores.

::

    app = create_app(Settings.from_env())
    uvicorn.run(app, host="127.0.0.1", port=8080)
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from starlette.applications import Starlette

from gateway.api.responses import handle_sieve_error, handle_unexpected
from gateway.api.routes import ROUTES
from gateway.errors import SieveError
from gateway.services import Services
from gateway.settings import Settings
from gateway.telemetry.metrics import Metrics


def create_app(settings: Settings, metrics: Metrics | None = None) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = await Services.start(settings, metrics)
        app.state.services = services
        try:
            yield
        finally:
            await services.stop()

    return Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        exception_handlers={SieveError: handle_sieve_error, Exception: handle_unexpected},
    )
