"""Fixtures the integration tests share: one real redis-server per test module."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.redis_server import RedisServer, redis_server_binary


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """A real redis-server on loopback for the module's tests (skipped where none is installed)."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed")
    with RedisServer() as server:
        yield server
