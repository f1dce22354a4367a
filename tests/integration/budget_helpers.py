"""Shared pieces of the budget/identity integration tests: real servers on loopback.

``GatewayProcess`` runs ``python -m gateway.cli serve`` as its own process (the
multi-replica and fault tests need separate processes sharing one Redis);
``tests.support.gateway_server.GatewayServer`` runs the app in a thread when one
in-process gateway is enough.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.billing.budgets import BudgetStatus
from gateway.state.redis_store import RedisStores
from tests.support import bearer, free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "sieve-admin-test-key"
MODEL = "gpt-4o-mini"


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def chat_body(content: str = "hello there", max_tokens: int = 16, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


def admin_headers(key: str = ADMIN_KEY) -> dict[str, str]:
    return bearer(key)


def org_counter(statuses: list[dict[str, Any]] | list[BudgetStatus], budget: str) -> Any:
    """The status named ``budget`` (e.g. ``org:acme:day``) from an admin body or a store answer."""
    for status in statuses:
        name = status["budget"] if isinstance(status, dict) else status.limit.name
        if name == budget:
            return status
    raise AssertionError(f"no counter {budget} in {statuses}")


def redis_usage(url: str, org: str) -> list[BudgetStatus]:
    """Read an org's counters straight from Redis with the store's own ``usage()``."""

    async def read() -> list[BudgetStatus]:
        stores = RedisStores.from_url(url)
        try:
            return await stores.budgets.usage(org, time.time())
        finally:
            await stores.aclose()

    return asyncio.run(read())


def redis_day_counter(url: str, org: str) -> BudgetStatus:
    """An org's day counter, read straight from Redis (an AssertionError while it has none)."""
    return org_counter(redis_usage(url, org), f"org:{org}:day")


class GatewayProcess:
    """``python -m gateway.cli serve`` on a free loopback port, with its own environment."""

    def __init__(self, config: Path, env: dict[str, str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.config = config
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")}
        self.env.update(env)
        self.env["PYTHONPATH"] = str(ROOT) + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.setdefault("SIEVE_LOG_LEVEL", "warning")
        self._log = tempfile.NamedTemporaryFile(prefix="sieve-gw-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "GatewayProcess":
        return self.spawn().wait_ready(timeout_s)

    def spawn(self) -> "GatewayProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--config", str(self.config)],
            cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> "GatewayProcess":
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gateway did not start in {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def __enter__(self) -> "GatewayProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        Path(self._log.name).unlink(missing_ok=True)
