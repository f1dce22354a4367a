"""The plans this process saved last, so that a warm step does not decode its own writing.

A conversation's next request reads back the plan its last request saved. When the
bytes the store hands back are the very bytes this process wrote (one replica serves
the agent loop, or the store is in memory), decoding them again only rebuilds the plan
it had in hand: on a 100k-token conversation (a 62 KB plan) that decode was about a
tenth of a warm step's instructions. So the pruner keeps, per conversation key, the
bytes it saved and a copy of the plan they encode; a read of those same bytes is handed
that copy instead of a decode. Any other bytes (another replica moved the conversation
on, a rolling upgrade, an eviction) are decoded as before, so what is replayed is always
what the store holds::

    recent = RecentPlans(max_bytes=8 * 1024 * 1024)
    recent.remember(key, raw, plan)          # right after saving ``raw`` (= plan.to_bytes())
    plan = recent.plan(key, raw)             # the kept copy, or None: decode ``raw``

The bytes are kept whole and compared, not digested: on a 62 KB plan a comparison costs a
sixth of a digest's instructions, and a digest was taken twice a step (save and read).
A copy is made on the way in (a result's plan is read after its save, and nothing may
change the kept one); on the way out the kept copy itself is handed over and forgotten,
since the pipeline moves the plan it gets on to its request and the save that follows
keeps the next one. A second read of the same bytes before that save (a concurrent
request of the conversation, or a ``/v1/prune`` rehearsal reading the live plan) decodes.
Bounded by the bytes of the plans kept (the copies weigh a few times their bytes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from gateway.pruning import FrozenPlan

__all__ = ["RecentPlans"]


class RecentPlans:
    def __init__(self, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0       # reads answered with the kept plan instead of a decode
        self._kept: OrderedDict[str, tuple[bytes, FrozenPlan]] = OrderedDict()
        self._lock = threading.Lock()  # the pipeline's thread never calls in, but a copy is cheap insurance

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, key: str, raw: bytes, plan: FrozenPlan) -> None:
        """``raw`` (``plan.to_bytes()``) was just saved under ``key``."""
        size = len(raw)
        if size > self.max_bytes // 4:
            self.forget(key)  # one giant plan would push every other out
            return
        entry = (raw, plan.copy())
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= len(old[0])
            self._kept[key] = entry
            self.bytes += size
            while self.bytes > self.max_bytes and self._kept:
                _, (evicted, _) = self._kept.popitem(last=False)
                self.bytes -= len(evicted)

    def forget(self, key: str) -> None:
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= len(old[0])

    def plan(self, key: str, raw: bytes) -> FrozenPlan | None:
        """The plan ``raw`` encodes, if it is the one this process saved last under ``key``:
        the kept copy, now the caller's own (it is forgotten here)."""
        with self._lock:
            entry = self._kept.get(key)
            if entry is None or entry[0] != raw:
                return None
            del self._kept[key]
            self.bytes -= len(raw)
        self.hits += 1
        return entry[1]
