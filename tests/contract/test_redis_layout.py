"""Redis key layout: prefixed, one cluster slot per org, a TTL on every key."""

from __future__ import annotations

import time

import pytest
import redis
from redis.crc import key_slot

from gateway.billing.budgets import BudgetLimit, Scope, Window, new_reservation_id
from gateway.errors import StoreRejected
from gateway.auth.identity import hash_key
from gateway.state.protocols import KeyRecord
from gateway.state.redis_store import RedisStores

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.redis]


async def test_keys_are_prefixed_tagged_by_org_and_expire(redis_server):
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    stores = RedisStores.from_url(redis_server.url)
    now = time.time()
    limits = [
        BudgetLimit("acme", Scope.ORG, "acme", Window.MONTH, 10**9),
        BudgetLimit("acme", Scope.TEAM, "se{arch}", Window.DAY, 10**9),  # braces must not move the tag
        BudgetLimit("acme", Scope.KEY, "ci:bot", Window.MINUTE, 10**9),
    ]
    try:
        held = await stores.budgets.reserve(new_reservation_id(), limits, 10, now)
        settled = await stores.budgets.reserve(new_reservation_id(), limits, 10, now)
        await stores.budgets.settle(settled, 7)
        await stores.conversations.put("conv", b"x", ttl_s=60)
        await stores.scores.put_many({"s1": b"1", "s2": b"2"}, ttl_s=60)
        await stores.keys.add(KeyRecord(hash_key("sk"), "acme"))
        keys = sorted(k.decode() for k in admin.scan_iter())
        assert all(k.startswith("sieve:") for k in keys)
        org_keys = [k for k in keys if k.startswith("sieve:{org:acme}:")]
        # counters, the held reservation, the settled one's marker, expiry and index zsets
        assert len(org_keys) == 3 + 1 + 1 + 2
        assert admin.hgetall(f"sieve:{{org:acme}}:resv:{settled.id}") == {b"state": b"settled"}
        assert len({key_slot(k.encode()) for k in org_keys}) == 1
        assert f"sieve:{{org:acme}}:resv:{held.id}" in keys
        for key in keys:
            if key != "sieve:{keys}:vkeys":  # virtual keys are configuration: no TTL on purpose
                assert admin.pttl(key) > 0, key
    finally:
        await stores.aclose()
        admin.close()


async def test_settle_script_refuses_an_out_of_range_amount_before_writing(redis_server):
    """HINCRBY fails on 1e20; a script that failed there kept its earlier writes (Redis does
    not roll back), so the amount is checked first, and the refusal is a ``StoreRejected``
    (not worth a retry), not an outage."""
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    stores = RedisStores.from_url(redis_server.url)
    limit = BudgetLimit("acme", Scope.ORG, "acme", Window.DAY, 10**9)
    try:
        held = await stores.budgets.reserve(new_reservation_id(), [limit], 10, time.time())
        budgets = stores.budgets
        for amount in ("100000000000000000000", "-5", "1e3"):
            with pytest.raises(StoreRejected, match="at most 15 digits"):
                await budgets._guard("settle", budgets._settle(keys=budgets._final_keys(held),
                                                               args=[held.id, amount, 1000]))
        [status] = await budgets.remaining([limit], time.time())
        assert (status.reserved, status.settled) == (10, 0)
    finally:
        await stores.aclose()
        admin.close()
