"""Redis implementations of the registries the replicas share beside the budgets: the stored
Responses ids (``gateway.exchange.stored_responses``) and the failed key checks (``gateway.auth.throttle``).

::

    stores = RedisStores.from_url(url)
    responses = RedisResponseRegistry(stores.client, stores.prefix, stores.guard)
    failures = RedisAuthFailureLog(stores.client, stores.prefix, stores.guard)

Key layout (``gateway.state.redis_store`` has the rest)::

    sieve:resp:{<response or conversation id>}    string {"org", "tokens"} json, TTL the provider's retention
    sieve:authfail:{<client address>}             zset failure -> time ms, TTL the window
"""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from gateway.billing import new_reservation_id
from gateway.state.protocols import StoredResponse
from gateway.state.redis_store import _Guard, _enc, _lua, _ms

__all__ = ["RedisAuthFailureLog", "RedisResponseRegistry"]


class RedisResponseRegistry:
    """Stored Responses ids, one key each (its own hash tag), with the provider's retention as TTL."""

    def __init__(self, client: aioredis.Redis, prefix: str = "sieve", guard: _Guard | None = None) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._prefix = prefix
        self._claim = client.register_script(_lua("claim.lua"))

    def _key(self, response_id: str) -> str:
        return f"{self._prefix}:resp:{{{_enc(response_id)}}}"

    async def get(self, response_id: str) -> StoredResponse | None:
        raw = await self._guard("stored response lookup", self._r.get(self._key(response_id)))
        if raw is None:
            return None
        entry = json.loads(raw)
        return StoredResponse(str(entry["org"]), int(entry["tokens"]))

    async def claim(self, response_id: str, entry: StoredResponse, ttl_s: int) -> bool:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        value = json.dumps({"org": entry.org, "tokens": entry.tokens})
        done = await self._guard("stored response claim",
                                 self._claim(keys=[self._key(response_id)], args=[entry.org, value, int(ttl_s)]))
        return done == 1

    async def forget(self, response_id: str) -> None:
        await self._guard("stored response forget", self._r.delete(self._key(response_id)))


class RedisAuthFailureLog:
    """Failed key checks per client address, shared by the replicas: one sorted set each, its
    TTL the window, so an address that stops failing leaves nothing behind."""

    def __init__(self, client: aioredis.Redis, prefix: str = "sieve", guard: _Guard | None = None) -> None:
        self._r = client
        self._guard = guard or _Guard()
        self._prefix = prefix
        self._failed = client.register_script(_lua("auth_failure.lua"))

    async def failed(self, client: str, now: float, limit: int, window_s: float) -> float | None:
        key = f"{self._prefix}:authfail:{{{_enc(client)}}}"
        args = [_ms(now), max(int(window_s * 1000), 1), max(limit, 1), f"{_ms(now)}:{new_reservation_id()}"]
        until = await self._guard("auth failure count", self._failed(keys=[key], args=args))
        return None if until is None else int(until) / 1000
