"""The stored-Responses registry and the failed-key-check log: the same behaviour from memory and Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.state.protocols import StoredResponse

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_response_id_belongs_to_the_org_that_claimed_it_first(stores):
    registry = stores.responses
    assert await registry.get("resp_1") is None
    assert await registry.claim("resp_1", StoredResponse("acme", 1200), ttl_s=60)
    assert await registry.get("resp_1") == StoredResponse("acme", 1200)
    # The owner refreshes its size; another org cannot take it over, nor change its size.
    assert await registry.claim("resp_1", StoredResponse("acme", 5000), ttl_s=60)
    assert not await registry.claim("resp_1", StoredResponse("globex", 1), ttl_s=60)
    assert await registry.get("resp_1") == StoredResponse("acme", 5000)
    await registry.forget("resp_1")
    assert await registry.get("resp_1") is None
    assert await registry.claim("resp_1", StoredResponse("globex", 7), ttl_s=60)  # forgotten: free again


async def test_ids_with_braces_and_colons_do_not_collide(stores):
    await stores.responses.claim("a:{b}", StoredResponse("acme", 1), ttl_s=60)
    await stores.responses.claim("a:b", StoredResponse("globex", 2), ttl_s=60)
    assert await stores.responses.get("a:{b}") == StoredResponse("acme", 1)
    assert await stores.responses.get("a:b") == StoredResponse("globex", 2)


async def test_a_stored_response_expires_with_the_providers_retention(stores):
    await stores.responses.claim("resp_short", StoredResponse("acme", 1), ttl_s=1)
    await stores.responses.claim("resp_long", StoredResponse("acme", 1), ttl_s=60)
    await asyncio.sleep(1.15)
    assert await stores.responses.get("resp_short") is None
    assert await stores.responses.get("resp_long") == StoredResponse("acme", 1)
    assert await stores.responses.claim("resp_short", StoredResponse("globex", 3), ttl_s=60)


async def test_failed_key_checks_refuse_an_address_once_the_window_holds_the_limit(stores):
    log, now = stores.auth_failures, time.time()
    assert await log.failed("203.0.113.7", now, limit=3, window_s=60) is None
    assert await log.failed("203.0.113.7", now + 1, limit=3, window_s=60) is None
    until = await log.failed("203.0.113.7", now + 2, limit=3, window_s=60)
    assert until == pytest.approx(now + 60, abs=0.01)  # until the oldest failure leaves the window
    assert await log.failed("198.51.100.1", now + 2, limit=3, window_s=60) is None  # another address
    # The old failures age out: the window holds fewer again, then three within it refuse once more.
    assert await log.failed("203.0.113.7", now + 61, limit=3, window_s=60) is None
    assert await log.failed("203.0.113.7", now + 62, limit=3, window_s=60) is None
    assert await log.failed("203.0.113.7", now + 63, limit=3, window_s=60) == pytest.approx(now + 121, abs=0.01)


async def test_failures_from_replicas_add_up(stores):
    """Two replicas are two callers of one log: the failures each counts add up (Redis is one
    log for all; the memory twin is one replica's, the same log for its callers)."""
    now = time.time()
    results = await asyncio.gather(*(stores.auth_failures.failed("192.0.2.9", now, limit=4, window_s=30)
                                     for _ in range(4)))
    assert sum(r is not None for r in results) == 1
