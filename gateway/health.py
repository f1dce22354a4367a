"""Readiness: whether this replica should receive traffic (``GET /readyz``).

Ready unless shared state is configured, unreachable, and the default policy is
fail-closed: under fail-open the gateway serves without Redis (unpruned state,
unmetered budgets, both counted), and marking every replica unready at once
would turn a Redis outage into a full one.
"""

from __future__ import annotations

from typing import Any


async def readiness_problems(redis: Any | None, store_fail_open: bool) -> list[str]:
    if redis is None:
        return []
    try:
        await redis.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        if store_fail_open:
            return []
        return [f"redis unreachable ({exc.__class__.__name__}) and the default policy is fail-closed"]
    return []
