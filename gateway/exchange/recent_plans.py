"""The plans this process saved last, so that a warm step does not decode its own writing.

A conversation's next request reads back the plan its last request saved. When the
bytes the store hands back are the very bytes this process wrote (one replica serves
the agent loop, or the store is in memory), decoding them again only rebuilds the plan
it had in hand: on a 100k-token conversation (a 62 KB plan) that decode was about a
tenth of a warm step's instructions. So the pruner keeps, per conversation key, the
digest of the bytes it saved and a copy of the plan they encode; a read whose bytes
have that digest gets a fresh copy instead of a decode. Any other bytes (another
replica moved the conversation on, a rolling upgrade, an eviction) are decoded as
before, so what is replayed is always what the store holds::

    recent = RecentPlans(max_bytes=8 * 1024 * 1024)
    recent.remember(key, raw, plan)          # right after saving ``raw`` (= plan.to_bytes())
    plan = recent.plan(key, raw)             # a copy, or None: decode ``raw``

Copies both ways (on the way in and out): the pipeline moves the plan it gets on to
its request, and a result's plan is read after its save; neither may change the kept
one. Bounded by the bytes of the plans kept (the copies weigh a few times their bytes).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from gateway.pruning import FrozenPlan

__all__ = ["RecentPlans"]


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


class RecentPlans:
    def __init__(self, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0       # reads answered with a copy instead of a decode
        self._kept: OrderedDict[str, tuple[bytes, int, FrozenPlan]] = OrderedDict()
        self._lock = threading.Lock()  # the pipeline's thread never calls in, but a copy is cheap insurance

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, key: str, raw: bytes, plan: FrozenPlan) -> None:
        """``raw`` (``plan.to_bytes()``) was just saved under ``key``."""
        size = len(raw)
        if size > self.max_bytes // 4:
            self.forget(key)  # one giant plan would push every other out
            return
        entry = (_digest(raw), size, plan.copy())
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._kept[key] = entry
            self.bytes += size
            while self.bytes > self.max_bytes and self._kept:
                _, (_, evicted, _) = self._kept.popitem(last=False)
                self.bytes -= evicted

    def forget(self, key: str) -> None:
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= old[1]

    def plan(self, key: str, raw: bytes) -> FrozenPlan | None:
        """A copy of the plan ``raw`` encodes, if it is the one this process saved last under ``key``."""
        with self._lock:
            entry = self._kept.get(key)
            if entry is None or entry[1] != len(raw):
                return None
            self._kept.move_to_end(key)
        digest, _, plan = entry
        if digest != _digest(raw):
            return None
        self.hits += 1
        return plan.copy()
