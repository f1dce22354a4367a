"""What the tests share, in one import (as Starlette's TestClient is): ports, clients, waits, readers.

::

    from tests.support import NO_PRUNING, free_port, metric_value, openai_client, wait_until

    llm = openai_client(gw, "sk-acme", headers=NO_PRUNING)   # a GatewayServer, GatewayProcess or FakeUpstream
    assert wait_until(lambda: metric_value(gw.metrics, "sieve_requests_total", **labels) == 1)

The bottom layer of the test helpers: ``tests.support.gateway_server``, ``tests.support.redis_server`` and the
integration helpers import it, so it imports nothing from ``tests`` and nothing of the gateway.
The fixtures (the fake upstreams, the gateway, the clock clear of a window edge) are in the
``conftest.py`` files.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import openai

if TYPE_CHECKING:
    from gateway.telemetry.metrics import Metrics

NO_PRUNING = {"x-sieve-strategy": "none"}  # forwarded unchanged; keys, budgets and accounting still apply
CLIENT_TIMEOUT_S = 30.0
SCORER_FAILURE_REASONS = ("timeout", "deadline", "http_error", "connection", "bad_response", "parse",
                          "id_mismatch", "error")


class Server(Protocol):
    """A server on loopback: the gateway (in a thread or a process) or a fake upstream."""

    @property
    def base_url(self) -> str: ...


# -- ports and clients ---------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick), for a server a test or bench starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api_base(server: Server) -> str:
    """The OpenAI API root of ``server``: the gateway's ``/v1``; a fake upstream's base_url is that already."""
    base = server.base_url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def openai_client(server: Server, key: str = "sk-test", *, headers: Mapping[str, str] | None = None,
                  timeout: float = CLIENT_TIMEOUT_S) -> openai.OpenAI:
    """The official client for ``server``, sending ``headers`` with every request.

    ``max_retries=0``: the client would otherwise retry a 429 or a 5xx and hide what was answered.
    """
    return openai.OpenAI(base_url=api_base(server), api_key=key, max_retries=0, timeout=timeout,
                         default_headers=headers)


def async_openai_client(server: Server, key: str = "sk-test", *, headers: Mapping[str, str] | None = None,
                        timeout: float = CLIENT_TIMEOUT_S) -> openai.AsyncOpenAI:
    """``openai_client``'s async twin (close it with ``await client.close()``)."""
    return openai.AsyncOpenAI(base_url=api_base(server), api_key=key, max_retries=0, timeout=timeout,
                              default_headers=headers)


def bearer(key: str) -> dict[str, str]:
    """The Authorization header that presents ``key``."""
    return {"authorization": f"Bearer {key}"}


# -- waiting ---------------------------------------------------------------------------------------

def wait_until(predicate: Callable[[], object], timeout_s: float = 5.0, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; whether it held (asked once more at the end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def wait_clear_of_window_edge(period_s: float, margin_s: float) -> None:
    """Sleep past the next UTC edge of a ``period_s`` window if fewer than ``margin_s`` seconds remain.

    Budget windows are calendar windows on the wall clock: a test that charges a counter and then
    reads it back must not straddle an edge, or it reads the next, empty window.
    """
    left = period_s - time.time() % period_s
    if left < margin_s:
        time.sleep(left + 0.05)


# -- reading what the gateway counted and wrote -------------------------------------------------------

def metric_value(metrics: Metrics, name: str, **labels: str) -> float:
    """One sample of a gateway's in-process metrics (``gw.metrics``); 0.0 where there is none yet."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


def scorer_failures(metrics: Metrics) -> dict[str, float]:
    """``sieve_scorer_failures_total`` by reason: only the reasons counted so far."""
    return {reason: value for reason in SCORER_FAILURE_REASONS
            if (value := metric_value(metrics, "sieve_scorer_failures_total", reason=reason))}


def read_jsonl(path: Path) -> list[Any]:
    """Every line of a JSON-lines file (the audit log), parsed; a line that is not JSON fails."""
    return [json.loads(line) for line in path.read_bytes().splitlines()]
