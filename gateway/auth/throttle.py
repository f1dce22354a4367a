"""Throttling key guessing: a client whose keys keep failing is refused for a while.

A key is 256 bits of chance, but nothing should let a client try 2,000 of them
in half a second. Per client address, the failed key checks are kept in a
sliding window of ``window_s`` seconds; with ``limit`` failures in the window
the address is refused (429 with ``Retry-After``) until the oldest of them
leaves it. Its key checks stop meanwhile, right or wrong, so a guess that
happens to be right teaches nothing while throttled::

    throttle = AuthThrottle(limit=20, window_s=60, log=stores.auth_failures)
    throttle.retry_after("203.0.113.7")       # None, or seconds until it may try again
    await throttle.failed("203.0.113.7")      # True when this failure starts throttling it

The failures are counted in an ``AuthFailureLog``: in memory for one process,
in Redis when it is configured, so the replicas count one window together and a
guesser spreading its tries over N replicas gets ``limit`` of them, not N x
``limit``. Only a failure asks the log (a request whose key is right costs no
round trip): each replica keeps the addresses it learned are refused, and a
replica that has not learned it yet learns it at that address's next failure
there, so at most one try per replica gets past the shared limit. When Redis
cannot be reached the failures are counted by this replica alone meanwhile.
The addresses tracked are bounded (least recently failed forgotten first), so
a spray from many addresses cannot grow them without bound. Behind a proxy or an
ingress every client has the proxy's address: uvicorn takes the client's from
``X-Forwarded-For`` when the proxy is trusted (``FORWARDED_ALLOW_IPS``), which
is what keeps one guesser from throttling everyone (docs/security.md).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Callable

from gateway.errors import StoreUnavailable
from gateway.state import AuthFailureLog, MemoryAuthFailureLog

log = logging.getLogger("sieve.auth")
MAX_TRACKED_CLIENTS = 10_000


class AuthThrottle:
    def __init__(self, limit: int, window_s: float, failures: AuthFailureLog | None = None, *,
                 max_clients: int = MAX_TRACKED_CLIENTS, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self.window_s = window_s
        self._max_clients = max_clients
        self._clock = clock
        self._local = MemoryAuthFailureLog(max_clients)
        self._failures = failures or self._local
        self._refused: OrderedDict[str, float] = OrderedDict()  # address -> refused until (wall clock)

    @property
    def enabled(self) -> bool:
        return self.limit > 0 and self.window_s > 0

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may present a key again; None when it may now (no store trip)."""
        until = self._refused.get(client)
        if until is None:
            return None
        wait = until - self._clock()
        if wait > 0:
            return wait
        del self._refused[client]
        return None

    async def failed(self, client: str) -> bool:
        """Count one failed key check; True when it is the one that starts the throttling here."""
        if not self.enabled:
            return False
        now = self._clock()
        try:
            until = await self._failures.failed(client, now, self.limit, self.window_s)
        except StoreUnavailable:
            log.warning("auth failure log unreachable: counting this replica's failures alone meanwhile")
            until = await self._local.failed(client, now, self.limit, self.window_s)
        if until is None or until <= now:
            return False
        starts = client not in self._refused
        self._refused.pop(client, None)
        self._refused[client] = until  # most recently refused last
        while len(self._refused) > self._max_clients:
            self._refused.popitem(last=False)
        return starts
