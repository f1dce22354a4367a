"""In-memory twins of the state stores: the embedded default for one process.

Correct under asyncio concurrency because no method awaits between reading and
writing its state: each call runs to completion on the event loop, which is
what the Redis Lua scripts give the Redis store. Not thread-safe (one loop).
Semantics mirror ``redis_store`` exactly; ``tests/contract`` holds both to it.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from gateway.billing import (BudgetLimit, BudgetStatus, Bucket, Reservation, Settlement, bucket_for,
    budget_exceeded, check_tokens, reservation_org)
from gateway.state.protocols import KeyRecord, StoredResponse

DEFAULT_RESERVATION_TTL_S = 900.0  # above the default upstream timeout (600 s)
DEFAULT_COUNTER_GRACE_S = 3600.0   # a window's counter outlives its reset, for late settles
# A settled or released reservation is remembered this long, so that a settle sent again
# after its reply was lost changes nothing (Redis); above the reservation TTL, so a settle
# owed since an outage of that length is still recognised as applied.
DEFAULT_MARKER_TTL_S = 3600.0
# The in-memory twin remembers the last this many final ids (it loses no replies, but
# keeps the same semantics as Redis for its callers and the contract tests).
MEMORY_FINAL_IDS = 100_000


class _TtlLru:
    """Bytes by key with a per-entry TTL, bounded by entry count and total bytes (LRU eviction)."""

    def __init__(self, max_entries: int, max_bytes: int, clock: Callable[[], float]) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock

    def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        if key in self._entries:
            self._drop(key)
        if len(value) > self._max_bytes:
            return  # larger than the whole cache: storing it would evict everything for one entry
        self._entries[key] = (self._clock() + ttl_s, bytes(value))
        self._bytes += len(value)
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self._bytes -= len(value)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes


class MemoryConversationStore:
    def __init__(self, max_entries: int = 10_000, max_bytes: int = 256 * 1024 * 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cache = _TtlLru(max_entries, max_bytes, clock)

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def nbytes(self) -> int:
        """Bytes of the values held (the bound ``max_bytes`` applies to)."""
        return self._cache.nbytes

    async def get(self, key: str) -> bytes | None:
        return self._cache.get(key)

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        self._cache.put(key, value, ttl_s)


class MemoryScoreCache:
    def __init__(self, max_entries: int = 100_000, max_bytes: int = 64 * 1024 * 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cache = _TtlLru(max_entries, max_bytes, clock)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._cache.get(key) for key in keys]

    async def put_many(self, items: Mapping[str, bytes], ttl_s: int) -> None:
        for key, value in items.items():
            self._cache.put(key, value, ttl_s)


_CounterId = tuple[str, str, str, str, str]  # org, scope, scope id, window, bucket id


@dataclass
class _Counter:
    limit: BudgetLimit
    reset_at: float
    expires_at: float
    reserved: int = 0
    settled: int = 0


@dataclass
class _Held:
    tokens: int
    counters: tuple[_CounterId, ...]
    expires_at: float
    state: str = "reserved"  # -> "expired" by the sweep; settled/released records are deleted
    forget_at: float = 0.0


def _counter_id(limit: BudgetLimit, bucket: Bucket) -> _CounterId:
    return (limit.org, limit.scope.value, limit.scope_id, limit.window.value, bucket.id)


class MemoryBudgetStore:
    """Budget counters for one process. Time is the ``now`` callers pass, never a clock."""

    def __init__(self, reservation_ttl_s: float = DEFAULT_RESERVATION_TTL_S,
                 counter_grace_s: float = DEFAULT_COUNTER_GRACE_S) -> None:
        self._reservation_ttl_s = reservation_ttl_s
        self._counter_grace_s = counter_grace_s
        self._counters: dict[_CounterId, _Counter] = {}
        self._held: dict[str, _Held] = {}
        self._expiry: list[tuple[float, str]] = []  # heap; stale entries are skipped
        self._next_purge = 0.0
        self._final: OrderedDict[str, None] = OrderedDict()  # settled/released ids, oldest first

    async def reserve(self, reservation_id: str, limits: Sequence[BudgetLimit], tokens: int,
                      now: float) -> Reservation:
        check_tokens(tokens)
        limits = tuple(limits)
        org = reservation_org(limits)
        buckets = tuple(bucket_for(limit.window, now) for limit in limits)
        expires_at = now + self._reservation_ttl_s
        if not limits:
            return Reservation(reservation_id, None, tokens, (), (), expires_at)
        self._advance(now)
        ids = tuple(_counter_id(limit, bucket) for limit, bucket in zip(limits, buckets))
        if reservation_id not in self._held and reservation_id not in self._final:
            # A retried id is already held (or final): hold it once.
            for limit, bucket, cid in zip(limits, buckets, ids):
                status = self._status(limit, bucket, cid)
                if status.used + tokens > limit.limit:
                    raise budget_exceeded(status, tokens, now)
            for limit, bucket, cid in zip(limits, buckets, ids):
                counter = self._counters.get(cid)
                if counter is None:
                    counter = self._counters[cid] = _Counter(
                        limit, bucket.reset_at, bucket.reset_at + self._counter_grace_s
                    )
                counter.limit = limit  # a changed limit applies from now on
                counter.reserved += tokens
            self._held[reservation_id] = _Held(tokens, ids, expires_at)
            heapq.heappush(self._expiry, (expires_at, reservation_id))
        statuses = tuple(self._status(l, b, c) for l, b, c in zip(limits, buckets, ids))
        return Reservation(reservation_id, org, tokens, limits, buckets, expires_at, statuses)

    async def settle(self, reservation: Reservation, actual_tokens: int) -> Settlement:
        check_tokens(actual_tokens)
        if reservation.id in self._final:
            return Settlement.ALREADY_FINAL
        held = self._held.pop(reservation.id, None)
        if held is None:
            return Settlement.UNKNOWN
        self._mark_final(reservation.id)
        for cid in held.counters:
            counter = self._counters.get(cid)
            if counter is None:
                continue  # its window is long over; charging it would change nothing
            if held.state == "reserved":
                counter.reserved -= held.tokens
            counter.settled += actual_tokens
        return Settlement.APPLIED

    async def release(self, reservation: Reservation) -> Settlement:
        if reservation.id in self._final:
            return Settlement.ALREADY_FINAL
        held = self._held.pop(reservation.id, None)
        self._mark_final(reservation.id)
        if held is None:
            return Settlement.UNKNOWN
        if held.state != "reserved":
            return Settlement.ALREADY_FINAL
        for cid in held.counters:
            counter = self._counters.get(cid)
            if counter is not None:
                counter.reserved -= held.tokens
        return Settlement.APPLIED

    def _mark_final(self, reservation_id: str) -> None:
        self._final[reservation_id] = None
        if len(self._final) > MEMORY_FINAL_IDS:
            self._final.popitem(last=False)

    async def charge(self, limits: Sequence[BudgetLimit], tokens: int, now: float,
                     charge_id: str | None = None) -> None:
        check_tokens(tokens)
        reservation_org(tuple(limits))
        if charge_id is not None:
            if charge_id in self._final:
                return  # charged already: this is a retry
            self._mark_final(charge_id)
        self._advance(now)
        for limit in limits:
            bucket = bucket_for(limit.window, now)
            cid = _counter_id(limit, bucket)
            counter = self._counters.get(cid)
            if counter is None:
                counter = self._counters[cid] = _Counter(limit, bucket.reset_at, bucket.reset_at + self._counter_grace_s)
            counter.settled += tokens

    async def remaining(self, limits: Sequence[BudgetLimit], now: float) -> list[BudgetStatus]:
        self._advance(now)
        out = []
        for limit in limits:
            bucket = bucket_for(limit.window, now)
            out.append(self._status(limit, bucket, _counter_id(limit, bucket)))
        return out

    async def usage(self, org: str, now: float) -> list[BudgetStatus]:
        self._advance(now)
        return [
            BudgetStatus(c.limit, cid[4], c.reserved, c.settled, c.reset_at)
            for cid, c in sorted(self._counters.items())
            if cid[0] == org and c.reset_at > now
        ]

    async def ping(self) -> None:
        return None

    def _status(self, limit: BudgetLimit, bucket: Bucket, cid: _CounterId) -> BudgetStatus:
        counter = self._counters.get(cid)
        if counter is None:
            return BudgetStatus(limit, bucket.id, 0, 0, bucket.reset_at)
        return BudgetStatus(limit, bucket.id, counter.reserved, counter.settled, bucket.reset_at)

    def _advance(self, now: float) -> None:
        """Expire reservations and counters as of ``now`` (the same sweep the Lua scripts run)."""
        while self._expiry and self._expiry[0][0] <= now:
            _, rid = heapq.heappop(self._expiry)
            held = self._held.get(rid)
            if held is None:
                continue
            if held.state == "expired":
                del self._held[rid]  # kept a while for a late settle; later ones are dropped
                continue
            held.state = "expired"
            held.forget_at = now + self._reservation_ttl_s
            heapq.heappush(self._expiry, (held.forget_at, rid))
            for cid in held.counters:
                counter = self._counters.get(cid)
                if counter is not None:
                    counter.reserved -= held.tokens
        if now >= self._next_purge:
            self._next_purge = now + 60.0
            for cid in [c for c, counter in self._counters.items() if counter.expires_at <= now]:
                del self._counters[cid]


class MemoryResponseRegistry:
    """Stored Responses ids for one process, bounded (least recently claimed or read forgotten first)."""

    def __init__(self, max_entries: int = 200_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, StoredResponse]] = OrderedDict()
        self._max_entries = max_entries
        self._clock = clock

    async def get(self, response_id: str) -> StoredResponse | None:
        held = self._entries.get(response_id)
        if held is None:
            return None
        if held[0] <= self._clock():
            del self._entries[response_id]
            return None
        self._entries.move_to_end(response_id)
        return held[1]

    async def claim(self, response_id: str, entry: StoredResponse, ttl_s: int) -> bool:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        held = await self.get(response_id)
        if held is not None and held.org != entry.org:
            return False
        self._entries[response_id] = (self._clock() + ttl_s, entry)
        self._entries.move_to_end(response_id)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return True

    async def forget(self, response_id: str) -> None:
        self._entries.pop(response_id, None)


class MemoryAuthFailureLog:
    """Failed key checks per address for one process; at most ``max_clients`` addresses are
    tracked (the least recently failed forgotten first), so a spray from many cannot grow it."""

    def __init__(self, max_clients: int = 10_000) -> None:
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._max_clients = max_clients

    async def failed(self, client: str, now: float, limit: int, window_s: float) -> float | None:
        failures = self._failures.pop(client, None)
        if failures is None:
            failures = deque(maxlen=max(limit, 1))
            while len(self._failures) >= self._max_clients:
                self._failures.popitem(last=False)
        while failures and failures[0] <= now - window_s:
            failures.popleft()
        failures.append(now)
        self._failures[client] = failures  # most recently failed last
        return failures[0] + window_s if len(failures) >= limit else None


class MemoryKeyStore:
    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}

    async def get(self, key_sha256: str) -> KeyRecord | None:
        return self._records.get(key_sha256)

    async def add(self, record: KeyRecord) -> None:
        self._records[record.key_sha256] = record

    async def revoke(self, key_sha256: str) -> None:
        existing = self._records.get(key_sha256) or KeyRecord(key_sha256, org="")
        self._records[key_sha256] = replace(existing, revoked=True)

    async def list(self, org: str | None = None) -> list[KeyRecord]:
        return sorted((r for r in self._records.values() if org is None or r.org == org),
                      key=lambda r: (r.org, r.name or "", r.key_sha256))
