"""What the tests share, in one import (as Starlette's TestClient is).

::

    from tests.support import free_port

The bottom layer of the test helpers: ``tests.gateway_server``, ``tests.redis_server`` and the
integration helpers import it, so it imports nothing from ``tests`` and nothing of the gateway.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick), for a server a test or bench starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
