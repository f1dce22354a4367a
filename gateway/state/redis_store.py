"""Redis implementations of the state stores, shared by every gateway replica.

::

    stores = RedisStores.from_url("redis://127.0.0.1:6379/0", max_connections=64)
    await stores.ping()                     # StoreUnavailable if unreachable
    reservation = await stores.budgets.reserve(rid, limits, tokens, time.time())
    ...
    await stores.aclose()

Key layout (``prefix`` defaults to ``sieve``; names are percent-encoded; every
key has a TTL except the virtual-key hash, which is configuration)::

    sieve:{org:<org>}:budget:<scope>:<scope id>:<window>:<bucket>   hash reserved, settled, limit, meta
    sieve:{org:<org>}:budget-index                                 zset counter key -> reset_at ms
    sieve:{org:<org>}:resv:<reservation id>                        hash state, tokens, counters
                                                                   (settled/released: a state marker)
    sieve:{org:<org>}:resv-expiry                                  zset reservation id -> expires_at ms
    sieve:conv:{<conversation key>}                                string
    sieve:conv:{sieve%3Acohort-secret}                             the cohort hash's key (gateway.api.services)
    sieve:score:{<score key>}                                      string
    sieve:{keys}:vkeys                                             hash sha256 -> KeyRecord json
    (the stored Responses ids and failed key checks: ``gateway.state.redis_registries``)

All budget keys of one org share the hash tag ``{org:<org>}``, so the org,
team and key counters one reservation touches sit in one Redis Cluster slot
and each of reserve/settle/release is ONE atomic Lua script.

Every call is bounded: connect and socket timeouts, a blocking pool (redis-py's
default pool raises once it has handed out its maximum of connections) with a
wait timeout, and one quick retry. Retrying is safe because each script is
idempotent by reservation id: a settled or released reservation leaves a marker
for ``marker_ttl_s``, so a settle whose reply was lost and that is sent again
finds it final and changes nothing. Any Redis failure surfaces as
``StoreUnavailable``; an error Redis answers with that no retry can cure (a script
refusing its arguments) as its subclass ``StoreRejected``.
With ``breaker_cooldown_s`` a Redis that stops answering is skipped for that
long after a timeout instead of being waited for on every call (``_Guard``).
"""

from __future__ import annotations

import inspect
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Awaitable, Mapping, Sequence, TypeVar
from urllib.parse import quote

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.billing import (BudgetLimit, BudgetStatus, Bucket, Reservation, Scope, Settlement, Window, bucket_for,
    budget_exceeded, check_tokens, new_reservation_id, reservation_org)
from gateway.errors import StoreRejected, StoreUnavailable
from gateway.state.memory import DEFAULT_COUNTER_GRACE_S, DEFAULT_MARKER_TTL_S, DEFAULT_RESERVATION_TTL_S
from gateway.state.protocols import KeyRecord

T = TypeVar("T")
_LUA = Path(__file__).with_name("lua")
_SETTLEMENTS = {1: Settlement.APPLIED, -1: Settlement.ALREADY_FINAL, 0: Settlement.UNKNOWN}
# Plain error replies (redis-py gives out of memory, loading, read-only and the like their
# own subclasses) that still mean "not now": a busy script, too few replicas.
_TRANSIENT_REPLIES = ("BUSY", "NOREPLICAS", "UNBLOCKED")


def _lua(name: str, *, with_sweep: bool = False) -> str:
    try:
        body = (_LUA / name).read_text()
        return (_LUA / "sweep.lua").read_text() + "\n" + body if with_sweep else body
    except FileNotFoundError as exc:
        raise RuntimeError(
            f"{exc.filename} is missing: the package was installed without gateway/state/lua/*.lua "
            "(declare them as setuptools package-data)"
        ) from exc


def _enc(part: str) -> str:
    # Braces would move the hash tag and ':' would blur the layout.
    return quote(part, safe="")


class _Guard:
    """Every Redis failure becomes ``StoreUnavailable``. With ``cooldown_s`` > 0 it is also a
    breaker: once Redis stops answering (a timeout; a refused connection fails fast anyway),
    calls fail at once for ``cooldown_s``, then one call probes. A hung Redis then costs one
    timeout per cooldown instead of one per call (a fail-open request makes three: state get,
    reserve, state put, each waiting out the socket timeout and a retry). Errors Redis answers
    with (out of memory, a script error) never trip it: the reads that still work go on."""

    def __init__(self, cooldown_s: float = 0.0) -> None:
        self.cooldown_s = cooldown_s
        self._open_until = 0.0

    async def __call__(self, what: str, call: Awaitable[T]) -> T:
        if self._open_until:
            now = time.monotonic()
            if now < self._open_until:
                if inspect.iscoroutine(call):
                    call.close()
                raise StoreUnavailable(f"Shared state store (Redis) unavailable during {what}: it stopped "
                                       f"answering; not asked again for up to {self.cooldown_s:g}s")
            self._open_until = now + self.cooldown_s  # this call probes; the others keep failing fast
        try:
            result = await call
        except ResponseError as exc:
            # Answered, so not hung: the breaker stays closed. A refusal of the command itself
            # (a script error, a value out of range) fails the same way every time it is sent.
            self._open_until = 0.0
            if type(exc) is ResponseError and not str(exc).startswith(_TRANSIENT_REPLIES):
                raise StoreRejected(f"Shared state store (Redis) refused {what}: {exc}") from exc
            raise StoreUnavailable(f"Shared state store (Redis) unavailable during {what}: {exc}") from exc
        except (RedisError, OSError) as exc:
            hung = isinstance(exc, (RedisTimeoutError, TimeoutError))
            self._open_until = time.monotonic() + self.cooldown_s if hung and self.cooldown_s > 0 else 0.0
            # The error's type only: its text names Redis's address (and a client may read this).
            raise StoreUnavailable(
                f"Shared state store (Redis) unavailable during {what}: {type(exc).__name__}"
            ) from exc
        self._open_until = 0.0
        return result


class RedisConversationStore:
    def __init__(self, client: aioredis.Redis, prefix: str = "sieve", guard: _Guard | None = None) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}:conv:{{{_enc(key)}}}"

    async def get(self, key: str) -> bytes | None:
        return await self._guard("conversation get", self._r.get(self._key(key)))

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        await self._guard("conversation put", self._r.set(self._key(key), value, ex=ttl_s))


class RedisScoreCache:
    """One key per score (own hash tag): a cluster client can spread them; a pipeline keeps it one trip."""

    def __init__(self, client: aioredis.Redis, prefix: str = "sieve", guard: _Guard | None = None) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}:score:{{{_enc(key)}}}"

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.get(self._key(key))
        return list(await self._guard("score cache get", pipe.execute()))

    async def put_many(self, items: Mapping[str, bytes], ttl_s: int) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        if not items:
            return
        pipe = self._r.pipeline(transaction=False)
        for key, value in items.items():
            pipe.set(self._key(key), value, ex=ttl_s)
        await self._guard("score cache put", pipe.execute())


class RedisBudgetStore:
    def __init__(self, client: aioredis.Redis, prefix: str = "sieve",
                 reservation_ttl_s: float = DEFAULT_RESERVATION_TTL_S,
                 counter_grace_s: float = DEFAULT_COUNTER_GRACE_S, guard: _Guard | None = None,
                 marker_ttl_s: float = DEFAULT_MARKER_TTL_S) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._prefix = prefix
        self._reservation_ttl_ms = int(reservation_ttl_s * 1000)
        self._grace_ms = int(counter_grace_s * 1000)
        self._marker_ttl_ms = int(marker_ttl_s * 1000)
        self._reserve = client.register_script(_lua("reserve.lua", with_sweep=True))
        self._status = client.register_script(_lua("status.lua", with_sweep=True))
        self._settle = client.register_script(_lua("settle.lua"))
        self._release = client.register_script(_lua("release.lua"))

    # -- key layout -------------------------------------------------------------------
    def _tag(self, org: str) -> str:
        return f"{self._prefix}:{{org:{_enc(org)}}}"

    def _counter_key(self, limit: BudgetLimit, bucket: Bucket) -> str:
        return (f"{self._tag(limit.org)}:budget:{limit.scope.value}:{_enc(limit.scope_id)}:"
                f"{limit.window.value}:{bucket.id}")

    def _resv_prefix(self, org: str) -> str:
        return f"{self._tag(org)}:resv:"

    def _expiry_key(self, org: str) -> str:
        return f"{self._tag(org)}:resv-expiry"

    def _index_key(self, org: str) -> str:
        return f"{self._tag(org)}:budget-index"

    def _counter_ttl_ms(self, bucket: Bucket, now: float) -> int:
        return int((bucket.reset_at - now) * 1000) + self._grace_ms

    # -- protocol ---------------------------------------------------------------------
    async def reserve(self, reservation_id: str, limits: Sequence[BudgetLimit], tokens: int,
                      now: float, *, enforce: bool = True) -> Reservation:
        check_tokens(tokens)
        limits = tuple(limits)
        org = reservation_org(limits)
        buckets = tuple(bucket_for(limit.window, now) for limit in limits)
        expires_at = now + self._reservation_ttl_ms / 1000
        if org is None:
            return Reservation(reservation_id, None, tokens, (), (), expires_at)
        counters = [self._counter_key(limit, bucket) for limit, bucket in zip(limits, buckets)]
        ttls = [self._counter_ttl_ms(bucket, now) for bucket in buckets]
        rid = _enc(reservation_id)
        args: list[Any] = [rid, tokens, _ms(now), self._reservation_ttl_ms, self._reservation_ttl_ms,
                           max(ttls) + self._reservation_ttl_ms, self._resv_prefix(org), 1 if enforce else 0]
        for limit, bucket, ttl in zip(limits, buckets, ttls):
            meta = json.dumps([limit.scope.value, limit.scope_id, limit.window.value, bucket.id, bucket.reset_at])
            args += [limit.limit, ttl, _ms(bucket.reset_at), meta]
        keys = [self._resv_prefix(org) + rid, self._expiry_key(org), self._index_key(org), *counters]
        out = await self._guard("budget reserve", self._reserve(keys=keys, args=args))
        if out[0] == 0:
            i = out[1] - 1
            raise budget_exceeded(BudgetStatus(limits[i], buckets[i].id, out[2], out[3], buckets[i].reset_at),
                                  tokens, now)
        statuses = tuple(
            BudgetStatus(limit, bucket.id, out[1 + 2 * i], out[2 + 2 * i], bucket.reset_at)
            for i, (limit, bucket) in enumerate(zip(limits, buckets))
        )
        return Reservation(reservation_id, org, tokens, limits, buckets, expires_at, statuses)

    def _final_keys(self, reservation: Reservation) -> list[str]:
        assert reservation.org is not None
        counters = [self._counter_key(l, b) for l, b in zip(reservation.limits, reservation.buckets)]
        return [self._resv_prefix(reservation.org) + _enc(reservation.id), self._expiry_key(reservation.org),
                *counters]

    async def settle(self, reservation: Reservation, actual_tokens: int) -> Settlement:
        check_tokens(actual_tokens)
        if reservation.org is None:
            return Settlement.UNKNOWN
        keys = self._final_keys(reservation)
        args = [_enc(reservation.id), actual_tokens, self._marker_ttl_ms]
        return _SETTLEMENTS[await self._guard("budget settle", self._settle(keys=keys, args=args))]

    async def release(self, reservation: Reservation) -> Settlement:
        if reservation.org is None:
            return Settlement.UNKNOWN
        keys = self._final_keys(reservation)
        args = [_enc(reservation.id), self._marker_ttl_ms]
        return _SETTLEMENTS[await self._guard("budget release", self._release(keys=keys, args=args))]

    async def charge(self, limits: Sequence[BudgetLimit], tokens: int, now: float,
                     charge_id: str | None = None) -> None:
        # Rare (fail-open reconciliation), so two trips rather than a fifth script. Both are
        # idempotent by ``charge_id``: a charge retried after a lost reply is counted once.
        reservation = await self.reserve(charge_id or new_reservation_id(), limits, tokens, now, enforce=False)
        await self.settle(reservation, tokens)

    async def remaining(self, limits: Sequence[BudgetLimit], now: float) -> list[BudgetStatus]:
        by_org: dict[str, list[BudgetLimit]] = {}
        for limit in limits:
            by_org.setdefault(limit.org, []).append(limit)
        found: dict[BudgetLimit, BudgetStatus] = {}
        for org, group in by_org.items():
            buckets = [bucket_for(limit.window, now) for limit in group]
            rows = await self._read(org, [self._counter_key(l, b) for l, b in zip(group, buckets)], now)
            for limit, bucket, row in zip(group, buckets, rows):
                found[limit] = BudgetStatus(limit, bucket.id, row[0], row[1], bucket.reset_at)
        return [found[limit] for limit in limits]

    async def usage(self, org: str, now: float) -> list[BudgetStatus]:
        index = self._index_key(org)
        await self._guard("budget usage", self._r.zremrangebyscore(index, "-inf", _ms(now) - self._grace_ms - 1))
        live = await self._guard("budget usage", self._r.zrangebyscore(index, f"({_ms(now)}", "+inf"))
        keys = [k.decode() for k in live]
        out = []
        for key, (reserved, settled, limit, meta) in zip(keys, await self._read(org, keys, now)):
            if not meta:
                continue  # the counter expired between the two reads
            scope, scope_id, window, bucket_id, reset_at = json.loads(meta)
            budget = BudgetLimit(org, Scope(scope), scope_id, Window(window), int(limit))
            out.append(BudgetStatus(budget, bucket_id, reserved, settled, reset_at))
        return sorted(out, key=lambda s: (s.limit.scope.value, s.limit.scope_id, s.limit.window.value, s.bucket))

    async def _read(self, org: str, counters: list[str], now: float) -> list[tuple[int, int, str, str]]:
        args = [_ms(now), self._reservation_ttl_ms, self._resv_prefix(org)]
        flat = await self._guard("budget status",
                                 self._status(keys=[self._expiry_key(org), *counters], args=args))
        return [
            (int(flat[i]), int(flat[i + 1]), _text(flat[i + 2]), _text(flat[i + 3]))
            for i in range(0, len(flat), 4)
        ]

    async def ping(self) -> None:
        await self._guard("ping", self._r.ping())


class RedisKeyStore:
    """Admin-added and revoked virtual keys. No TTL on purpose: this is configuration, not cache."""

    def __init__(self, client: aioredis.Redis, prefix: str = "sieve", guard: _Guard | None = None) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._key = f"{prefix}:{{keys}}:vkeys"

    async def get(self, key_sha256: str) -> KeyRecord | None:
        raw = await self._guard("key lookup", self._r.hget(self._key, key_sha256))
        return None if raw is None else KeyRecord.from_dict(json.loads(raw))

    async def add(self, record: KeyRecord) -> None:
        await self._guard("key add", self._r.hset(self._key, record.key_sha256, json.dumps(record.to_dict())))

    async def revoke(self, key_sha256: str) -> None:
        existing = await self.get(key_sha256) or KeyRecord(key_sha256, org="")
        await self.add(replace(existing, revoked=True))

    async def list(self, org: str | None = None) -> list[KeyRecord]:
        raw = await self._guard("key list", self._r.hgetall(self._key))
        records = [KeyRecord.from_dict(json.loads(v)) for v in raw.values()]
        return sorted((r for r in records if org is None or r.org == org),
                      key=lambda r: (r.org, r.name or "", r.key_sha256))


class RedisStores:
    """One client and pool for all the Redis-backed stores; created in the app's lifespan."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "sieve",
                 reservation_ttl_s: float = DEFAULT_RESERVATION_TTL_S,
                 counter_grace_s: float = DEFAULT_COUNTER_GRACE_S, breaker_cooldown_s: float = 0.0) -> None:
        self.client = client
        self._guard = _Guard(breaker_cooldown_s)  # one breaker: the stores share the server
        self.conversations = RedisConversationStore(client, prefix, self._guard)
        self.scores = RedisScoreCache(client, prefix, self._guard)
        self.budgets = RedisBudgetStore(client, prefix, reservation_ttl_s, counter_grace_s, self._guard)
        self.keys = RedisKeyStore(client, prefix, self._guard)
        self.prefix = prefix

    @property
    def guard(self) -> _Guard:
        """The breaker the stores share (the stores of ``gateway.state.redis_registries`` too)."""
        return self._guard

    @classmethod
    def from_url(cls, url: str, *, max_connections: int = 64, pool_timeout_s: float = 5.0,
                 socket_timeout_s: float = 2.0, connect_timeout_s: float = 1.0, retries: int = 1,
                 **store_options: Any) -> "RedisStores":
        retry = Retry(ExponentialBackoff(cap=0.05, base=0.01), retries)
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=pool_timeout_s,
            socket_timeout=socket_timeout_s, socket_connect_timeout=connect_timeout_s, retry=retry,
        )
        return cls(aioredis.Redis(connection_pool=pool, retry=retry), **store_options)

    async def ping(self) -> None:
        await self._guard("ping", self.client.ping())

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.client.connection_pool.disconnect()


def _ms(ts: float) -> int:
    return int(ts * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
