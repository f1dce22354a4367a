"""Redis killed: calls fail fast with StoreUnavailable (never hang), and recover after a restart."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.billing.budgets import BudgetLimit, Scope, Window, new_reservation_id
from gateway.errors import StoreUnavailable
from gateway.state.redis_store import RedisStores
from tests.support.redis_server import RedisServer, needs_redis

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.redis,
    needs_redis,
]

DAY = BudgetLimit("acme", Scope.ORG, "acme", Window.DAY, 1000)


async def test_outage_raises_store_unavailable_then_recovers():
    server = RedisServer().start()
    stores = RedisStores.from_url(server.url, socket_timeout_s=1.0, connect_timeout_s=0.5)
    try:
        held = await stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())
        server.kill()
        for call in (
            lambda: stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time()),
            lambda: stores.budgets.settle(held, 50),
            lambda: stores.budgets.release(held),
            lambda: stores.budgets.remaining([DAY], time.time()),
            lambda: stores.conversations.get("c"),
            lambda: stores.scores.get_many(["s"]),
            lambda: stores.ping(),
        ):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as info:
                await call()
            assert time.monotonic() - started < 3.0
            assert info.value.status == 503 and "Redis" in info.value.message
        server.start()  # same port, empty: the pool reconnects on its own
        await stores.ping()
        fresh = await stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())
        assert fresh.remaining_tokens == 900
    finally:
        await stores.aclose()
        server.stop()


async def test_hung_redis_times_out_instead_of_hanging():
    server = RedisServer().start()
    stores = RedisStores.from_url(server.url, socket_timeout_s=0.5, connect_timeout_s=0.5)
    try:
        await stores.ping()
        server.pause()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())
        assert time.monotonic() - started < 3.0
        server.resume()
        reservation = await stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())
        assert reservation.remaining_tokens is not None
    finally:
        server.resume()
        await stores.aclose()
        server.stop()


async def test_breaker_skips_a_hung_redis_then_probes_it_again():
    server = RedisServer().start()
    stores = RedisStores.from_url(server.url, socket_timeout_s=0.3, connect_timeout_s=0.3, breaker_cooldown_s=0.5)
    try:
        await stores.ping()
        server.pause()
        with pytest.raises(StoreUnavailable, match="TimeoutError"):
            await stores.conversations.get("c")  # waits out the timeout once ...
        started = time.monotonic()
        for call in (lambda: stores.conversations.put("c", b"v", 60), lambda: stores.scores.get_many(["s"]),
                     lambda: stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())):
            with pytest.raises(StoreUnavailable, match="stopped answering"):
                await call()  # ... then every store fails at once
        assert time.monotonic() - started < 0.1
        server.resume()
        with pytest.raises(StoreUnavailable, match="stopped answering"):
            await stores.ping()  # still within the cooldown
        await asyncio.sleep(0.6)
        await stores.ping()  # the probe gets through and closes the breaker
        assert (await stores.budgets.reserve(new_reservation_id(), [DAY], 100, time.time())).remaining_tokens == 900
    finally:
        server.resume()
        await stores.aclose()
        server.stop()
