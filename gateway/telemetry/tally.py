"""The request path's metric moves, kept as plain numbers and written into their Prometheus
series whenever the registry is collected (a scrape, a test's read).

::

    tally = Tally()
    registry.register(tally)          # first: every collect writes the tally before it is read
    with tally.lock:
        tally.count(requests, ("acme", "gpt-4o-mini", "pruned"), 1)
        tally.observe(upstream_seconds, (), 0.42)

Why: a request moves some twenty series, and each ``child.inc()`` of ``prometheus_client``
is four Python calls and a lock (argument checks, the value's own lock); that was a ninth
of a small passthrough request's instructions. Here a move is one call, and one lock is
taken per request.

Exactly the same series and values: the tally holds each series' running value from 0,
added in the order the requests came, as the series' own value would be, and sets it
whole when collected (never a sum of deltas, which would round dollars differently); a
series' child is created the moment the tally first sees it (its ``_created`` as before,
and it shows at 0 when moved by 0). A family moved through the tally is moved only
through it: the tally's value replaces the series' on every collect.

This reaches into ``prometheus_client``'s children (``_value``, ``_sum``, ``_buckets``:
version 0.2x); tests/unit/telemetry/test_tally.py compares a scrape with the same moves
made through ``prometheus_client`` itself, so a change there fails a test, not a scrape.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any, Iterable

__all__ = ["Tally"]


class Tally:
    def __init__(self) -> None:
        # Held around a request's moves and while collecting: moves come from the event
        # loop, reads may come from any thread.
        self.lock = threading.Lock()
        self._counts: dict[tuple[Any, tuple[str, ...]], float] = {}
        self._counted: dict[tuple[Any, tuple[str, ...]], Any] = {}  # the same keys: their children
        self._histograms: dict[tuple[Any, tuple[str, ...]], list[float]] = {}
        self._observed: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._bounds: dict[int, tuple[float, ...]] = {}

    def count(self, counter: Any, labels: tuple[str, ...], amount: float) -> None:
        """``counter.labels(*labels).inc(amount)``, under ``lock``, for a positive amount: a
        request's figure that is 0 (or junk: negative, NaN) adds nothing, and its series shows
        all the same (at 0 until a request moves it). ``labels``: plain strings (an enum
        member hashes otherwise than its value, and the series is the same)."""
        key = (counter, labels)
        value = self._counts.get(key)
        if value is None:
            self._counted[key] = counter.labels(*labels) if labels else counter
            self._counts[key] = value = 0.0
        if amount > 0:
            self._counts[key] = value + amount

    def observe(self, histogram: Any, labels: tuple[str, ...], amount: float) -> None:
        """``histogram.labels(*labels).observe(amount)``, under ``lock``."""
        key = (histogram, labels)
        found = self._histograms.get(key)
        if found is None:
            child = self._observed[key] = histogram.labels(*labels) if labels else histogram
            bounds = self._bounds.setdefault(id(histogram), tuple(child._upper_bounds))
            found = self._histograms[key] = [0.0] * (len(bounds) + 1)  # the sum, then each bucket
        else:
            bounds = self._bounds[id(histogram)]
        found[0] += amount
        found[1 + bisect_left(bounds, amount)] += 1  # the first bucket whose bound is >= amount

    def collect(self) -> Iterable[Any]:
        """Write every series' value (the registry calls this before reading the others);
        no samples of its own."""
        with self.lock:
            counts = [(self._counted[key], value) for key, value in self._counts.items()]
            histograms = [(self._observed[key], list(found)) for key, found in self._histograms.items()]
        for child, value in counts:
            child._value.set(value)
        for child, found in histograms:
            child._sum.set(found[0])
            for bucket, n in zip(child._buckets, found[1:]):
                bucket.set(n)
        return ()
