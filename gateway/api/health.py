"""Readiness: whether this replica should receive traffic (``GET /readyz``).

Ready unless shared state is configured, unreachable, and the default policy is
fail-closed: under fail-open the gateway serves without Redis (unpruned state,
unmetered budgets, both counted), and marking every replica unready at once
would turn a Redis outage into a full one. A fail-open replica without Redis is
ready but *degraded*, and says so.

The probe has its own deadline, far below the store's socket timeout and retry
(seconds): a hung Redis (the port open, nothing answering) must not hold the
probe past the orchestrator's timeout, or every replica goes unready at once,
whatever the policy.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

# Half of the one second a probe may take, leaving the rest for the HTTP round trip.
READINESS_DEADLINE_S = 0.5


@dataclass(frozen=True, slots=True)
class Readiness:
    problems: tuple[str, ...] = ()   # each one makes the replica unready (503)
    degraded: tuple[str, ...] = ()   # serving, with less than usual (200)


async def readiness(redis: Any | None, store_fail_open: bool,
                    deadline_s: float = READINESS_DEADLINE_S) -> Readiness:
    if redis is None:
        return Readiness()
    try:
        async with asyncio.timeout(deadline_s):
            await redis.ping()
    except TimeoutError:
        problem = f"redis did not answer within {deadline_s:g} s"
    except Exception as exc:  # noqa: BLE001 - any failure means Redis is not there
        problem = f"redis unreachable ({exc.__class__.__name__})"
    else:
        return Readiness()
    if store_fail_open:
        return Readiness(degraded=(f"{problem}: serving unmetered and without shared conversation state "
                                   "(the default policy is fail-open)",))
    return Readiness(problems=(f"{problem} and the default policy is fail-closed",))
