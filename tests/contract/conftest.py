"""Stores under contract: each test runs against the in-memory twin and a real Redis.

Redis is one session-wide ``redis-server`` on a free loopback port, flushed
before each test. Tests that need their own server (outage) start one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import pytest
import redis

from gateway.state.memory import (MemoryAuthFailureLog, MemoryBudgetStore, MemoryConversationStore, MemoryKeyStore,
                                  MemoryResponseRegistry, MemoryScoreCache)
from gateway.state.redis_registries import RedisAuthFailureLog, RedisResponseRegistry
from gateway.state.redis_store import RedisStores
from tests.support.redis_server import RedisServer, skip_without_redis

RESERVATION_TTL_S = 30.0


@dataclass
class StoreSet:
    kind: str
    conversations: Any
    scores: Any
    budgets: Any
    keys: Any
    responses: Any = None
    auth_failures: Any = None


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    skip_without_redis()
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[StoreSet]:
    if request.param == "memory":
        yield StoreSet("memory", MemoryConversationStore(), MemoryScoreCache(),
                       MemoryBudgetStore(reservation_ttl_s=RESERVATION_TTL_S), MemoryKeyStore(),
                       MemoryResponseRegistry(), MemoryAuthFailureLog())
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(server.url) as admin:
        admin.flushdb()
    redis_stores = RedisStores.from_url(server.url, reservation_ttl_s=RESERVATION_TTL_S)
    try:
        yield StoreSet("redis", redis_stores.conversations, redis_stores.scores, redis_stores.budgets,
                       redis_stores.keys, RedisResponseRegistry(redis_stores.client, guard=redis_stores.guard),
                       RedisAuthFailureLog(redis_stores.client, guard=redis_stores.guard))
    finally:
        await redis_stores.aclose()
