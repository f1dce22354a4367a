"""An aiohttp app served on 127.0.0.1 from a background thread with its own event loop.

The fake providers (:mod:`tests.support.fake_upstream`, :mod:`tests.support.fake_providers`,
:mod:`tests.support.scripted_provider`) are real HTTP servers that sync and async tests
alike can talk to; this is the lifecycle they share::

    class Provider(ThreadedServer):
        def make_app(self) -> web.Application: ...

    with Provider() as server:          # started; port 0 picks a free port
        server.port
"""

from __future__ import annotations

import asyncio
import threading
from typing import TypeVar

from aiohttp import web

__all__ = ["ThreadedServer"]

Server = TypeVar("Server", bound="ThreadedServer")


class ThreadedServer:
    thread_name = "test-server"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    def make_app(self) -> web.Application:
        raise NotImplementedError

    async def start_async(self) -> None:
        """Start on the current loop (the thread's, or a command line's)."""
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self: Server) -> Server:
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as e:  # surfaced to start()'s caller
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.thread_name} did not start in 10 s")
        if error:
            raise error[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self: Server) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
