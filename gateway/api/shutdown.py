"""A request still unanswered when the shutdown grace ends gets an OpenAI-shaped 503.

On SIGTERM uvicorn lets open requests run for ``SIEVE_SHUTDOWN_GRACE_S``, then
cancels what is left. A request cancelled before its response began would get
uvicorn's own plain-text ``500 Internal Server Error``: a client cannot tell
it from a crash. This layer answers it as every other Sieve error is answered,
503 ``shutting_down`` with ``connection: close``; the openai clients retry a
503, and the retry reaches a replica that is still serving. A response already
under way (a stream) cannot change its status: it is cut, as before.

Only the request's own task is ever cancelled at the outermost layer (client
disconnects and upstream timeouts arrive as events and exceptions, not as
cancellation), so a cancellation here is the end of the grace period.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.api.rendering import error_response
from gateway.errors import ShuttingDown

log = logging.getLogger("sieve.shutdown")


class AnswerCutRequests:
    """ASGI middleware: the 503 above, for requests cancelled before their response started."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_the_start(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_noting_the_start)
        except asyncio.CancelledError:
            if started:
                raise
            log.warning("shutdown grace ended before %s %s was answered: 503 shutting_down",
                        scope.get("method"), scope.get("path"))
            response = error_response(ShuttingDown(
                "the gateway is shutting down and its grace period ended before this request was "
                "answered; retry it (another replica will serve it)", headers={"connection": "close"}))
            # The request's task was cancelled to end it; answering is how it ends.
            await response(scope, receive, send)
