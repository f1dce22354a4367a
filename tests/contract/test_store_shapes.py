"""Both implementations satisfy the Protocols; the memory twin stays bounded."""

from __future__ import annotations

import pytest

from gateway.state.memory import MemoryConversationStore, MemoryScoreCache
from gateway.state.protocols import BudgetStore, ConversationStore, KeyStore, ScoreCache

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_protocols(stores):
    assert isinstance(stores.conversations, ConversationStore)
    assert isinstance(stores.scores, ScoreCache)
    assert isinstance(stores.budgets, BudgetStore)
    assert isinstance(stores.keys, KeyStore)


async def test_memory_twin_is_bounded_by_entries_and_bytes():
    clock = [0.0]
    store = MemoryConversationStore(max_entries=3, max_bytes=10, clock=lambda: clock[0])
    for key in "abc":
        await store.put(key, b"12", ttl_s=5)
    assert await store.get("a") == b"12"  # now most recently used
    await store.put("d", b"12", ttl_s=5)  # evicts the least recently used: b
    assert [await store.get(k) for k in "abcd"] == [b"12", None, b"12", b"12"]
    await store.put("e", b"123456789", ttl_s=5)  # 9 bytes: only e fits
    assert [await store.get(k) for k in "acde"] == [None, None, None, b"123456789"]
    await store.put("huge", b"x" * 11, ttl_s=5)  # larger than the whole cache: not kept
    assert await store.get("huge") is None and await store.get("e") == b"123456789"
    clock[0] = 5.0
    assert await store.get("e") is None

    scores = MemoryScoreCache(max_entries=2, clock=lambda: clock[0])
    await scores.put_many({"x": b"1", "y": b"2", "z": b"3"}, ttl_s=5)
    assert await scores.get_many(["x", "y", "z"]) == [None, b"2", b"3"]
