"""Throttling key guessing: a client whose keys keep failing is refused for a while.

A key is 256 bits of chance, but nothing should let a client try 2,000 of them
in half a second. Per client address, the last ``limit`` failed key checks are
kept in a sliding window of ``window_s`` seconds; with ``limit`` failures in the
window the address is refused (429 with ``Retry-After``) until the oldest of
them leaves it. Its key checks stop meanwhile, right or wrong, so a guess that
happens to be right teaches nothing while throttled::

    throttle = AuthThrottle(limit=20, window_s=60)
    throttle.retry_after("203.0.113.7")   # None, or seconds until it may try again
    throttle.failed("203.0.113.7")        # True when this failure starts throttling it

In memory, per process: each replica counts the failures it sees, which bounds
the guessing rate per replica, and no store round trip is added to a request.
The addresses tracked are bounded (least recently failed forgotten first), so
a spray from many addresses cannot grow it without bound. Behind a proxy or an
ingress every client has the proxy's address: uvicorn takes the client's from
``X-Forwarded-For`` when the proxy is trusted (``FORWARDED_ALLOW_IPS``), which
is what keeps one guesser from throttling everyone (docs/security.md).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable

MAX_TRACKED_CLIENTS = 10_000


class AuthThrottle:
    def __init__(self, limit: int, window_s: float, *, max_clients: int = MAX_TRACKED_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self._max_clients = max_clients
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.limit > 0 and self.window_s > 0

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may present a key again; None when it may now."""
        failures = self._failures.get(client)
        if failures is None or len(failures) < self.limit:
            return None
        wait = failures[0] + self.window_s - self._clock()
        return wait if wait > 0 else None

    def failed(self, client: str) -> bool:
        """Count one failed key check; True when it is the one that starts the throttling."""
        if not self.enabled:
            return False
        now = self._clock()
        failures = self._failures.pop(client, None)
        if failures is None:
            failures = deque(maxlen=self.limit)
            while len(self._failures) >= self._max_clients:
                self._failures.popitem(last=False)
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        failures.append(now)
        self._failures[client] = failures  # most recently failed last
        return len(failures) == self.limit
