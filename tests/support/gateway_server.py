"""Run the real gateway under uvicorn on a free loopback port, for tests and benchmarks.

    with GatewayServer(Settings(upstream_base_url=upstream.base_url)) as gw:
        client = tests.support.openai_client(gw)
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import uvicorn

from gateway.api.app import create_app, uvicorn_config
from gateway.config.settings import Settings, prepare_offline_environment
from gateway.telemetry.metrics import Metrics
from tests.support import free_port, wait_until


class GatewayServer:
    def __init__(self, settings: Settings) -> None:
        prepare_offline_environment()
        self.port = settings.port if settings.port not in (0, 8080) else free_port()
        self.settings = settings
        self.metrics = Metrics()
        self.app = create_app(settings, self.metrics)
        # The config `sieve serve` uses (its HTTP protocol with the header bounds included).
        config = uvicorn_config(self.app, settings, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def services(self):
        return self.app.state.services

    def start(self) -> "GatewayServer":
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True,
                                        name="sieve-gateway")
        self._thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.server.started:
                return self
            if not self._thread.is_alive():
                raise RuntimeError("gateway failed to start")
            time.sleep(0.02)
        raise RuntimeError("gateway did not start in 30 s")

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)

    def wait_idle(self, timeout_s: float = 5.0) -> None:
        """Wait for deferred accounting tasks to finish (they run after the response)."""
        wait_until(lambda: not self.services.deferred.pending, timeout_s, interval_s=0.01)

    def get(self, path: str, **kwargs) -> httpx.Response:
        return httpx.get(self.base_url + path, timeout=10, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(self.base_url + path, timeout=30, **kwargs)

    def __enter__(self) -> "GatewayServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
