"""Conversation store, score cache and key store: the same behaviour from memory and Redis."""

from __future__ import annotations

import asyncio

import pytest

from gateway.auth.identity import hash_key
from gateway.state.protocols import KeyRecord

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_conversation_get_put_overwrite(stores):
    assert await stores.conversations.get("conv-1") is None
    await stores.conversations.put("conv-1", b"\x00frozen{decisions}", ttl_s=60)
    assert await stores.conversations.get("conv-1") == b"\x00frozen{decisions}"
    await stores.conversations.put("conv-1", b"v2", ttl_s=60)
    assert await stores.conversations.get("conv-1") == b"v2"
    assert await stores.conversations.get("conv-2") is None


async def test_keys_with_braces_and_colons_do_not_collide(stores):
    await stores.conversations.put("a:{b}", b"1", ttl_s=60)
    await stores.conversations.put("a:b", b"2", ttl_s=60)
    assert await stores.conversations.get("a:{b}") == b"1"
    assert await stores.conversations.get("a:b") == b"2"


async def test_score_cache_keeps_positions_of_misses(stores):
    assert await stores.scores.get_many([]) == []
    await stores.scores.put_many({"k1": b"5", "k3": b"1"}, ttl_s=60)
    assert await stores.scores.get_many(["k1", "k2", "k3", "k1"]) == [b"5", None, b"1", b"5"]


async def test_ttl_expiry(stores):
    await stores.conversations.put("short", b"x", ttl_s=1)
    await stores.conversations.put("long", b"y", ttl_s=60)
    await stores.scores.put_many({"s-short": b"1"}, ttl_s=1)
    await stores.scores.put_many({"s-long": b"2"}, ttl_s=60)
    assert await stores.conversations.get("short") == b"x"
    await asyncio.sleep(1.15)
    assert await stores.conversations.get("short") is None
    assert await stores.conversations.get("long") == b"y"
    assert await stores.scores.get_many(["s-short", "s-long"]) == [None, b"2"]


async def test_key_store_add_get_revoke_list(stores):
    alice = KeyRecord(hash_key("sk-alice"), "acme", "search", "alice")
    bob = KeyRecord(hash_key("sk-bob"), "globex", None, "bob")
    await stores.keys.add(alice)
    await stores.keys.add(bob)
    assert await stores.keys.get(alice.key_sha256) == alice
    assert await stores.keys.get(hash_key("sk-nobody")) is None
    assert await stores.keys.list("acme") == [alice]
    await stores.keys.revoke(alice.key_sha256)
    revoked = await stores.keys.get(alice.key_sha256)
    assert revoked is not None and revoked.revoked and revoked.org == "acme"
    # Revoking a key the store never saw (one from the keys file) leaves a tombstone.
    await stores.keys.revoke(hash_key("sk-from-file"))
    assert (await stores.keys.get(hash_key("sk-from-file"))).revoked
    assert len(await stores.keys.list()) == 3
