"""What the tests share, in one import (as Starlette's TestClient is): ports and clients.

::

    from tests.support import free_port, openai_client

    llm = openai_client(gw, "sk-acme")   # a GatewayServer, GatewayProcess or FakeUpstream

The bottom layer of the test helpers: ``tests.gateway_server``, ``tests.redis_server`` and the
integration helpers import it, so it imports nothing from ``tests`` and nothing of the gateway.
"""

from __future__ import annotations

import socket
from typing import Mapping, Protocol

import openai

CLIENT_TIMEOUT_S = 30.0


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
