"""The work on big request bodies: how much of it runs at once, and giving its memory back.

Pruning a big body (tens of thousands of messages) is pure Python: a worker thread keeps
the event loop serving, but threads share one interpreter lock, so each big prune in
flight takes a share of the time the loop needs for every other request, and holds its
own working set (a few times the body's size) meanwhile. Run a handful at once and
small chats crawl while memory climbs by gigabytes. So big prunes are admitted by
*bytes in flight*: their bodies together stay within ``max_bytes``; one body larger
than that runs alone. Many medium bodies still run side by side, a giant one never
shares the interpreter with another giant, and memory grows with the budget, not with
the number of clients that send big bodies at once.

When the last big request is gone and no other has come for ``quiet_s``, the C allocator
is asked to return its free pages (``malloc_trim``, glibc): freed Python strings and lists
of a 30 MB body otherwise stay in the process's heap, and its RSS stays at the peak for
good. Not at once: the pages a trim gives back are the ones the next big body is parsed
and pruned in, and faulting them in again costs it more than the trim (a warm step of a
100k-token conversation, 410 KiB, spent ~2.5 ms of CPU more, ~300 page faults, when every
step was followed by a trim; ``bench/warm_step.py``). An agent loop sending its steps back
to back keeps its pages; once big bodies stop coming, the heap is trimmed all the same.

::

    big = BigBodies(max_bytes=8 * 1024 * 1024)
    big.watch(request)                          # a big body was read: trim once request and call are
                                                # gone and no big body came for quiet_s
    big.watch(call)
    async with big.slot(call.body_bytes):       # waits for room
        result = await asyncio.to_thread(prune, ...)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import ctypes.util
import logging
import weakref
from typing import Any, AsyncIterator, Callable

log = logging.getLogger("sieve.big_bodies")

# Bodies above this size are pruned in a worker thread, under the bytes-in-flight bound,
# so one cold 100k-token prune does not stall every other request on the event loop.
THREAD_THRESHOLD_BYTES = 256 * 1024

# How long no big request must be alive before the heap is trimmed (see the module docstring).
TRIM_QUIET_S = 1.0


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = getattr(ctypes.CDLL(name), "malloc_trim")
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class BigBodies:
    """Admits big prunes by bytes in flight; trims the heap once the last big request has been
    freed for ``quiet_s``."""

    def __init__(self, max_bytes: int, trim: Callable[[], object] | None = None,
                 quiet_s: float = TRIM_QUIET_S) -> None:
        self.max_bytes = max_bytes
        self.quiet_s = quiet_s
        self.in_flight = 0      # bytes of the bodies being pruned now
        self.alive = 0          # big requests whose objects are still referenced
        self.watched = 0        # big requests ever watched: a trim due finds whether one came since
        self.trims = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._trim = trim if trim is not None else _malloc_trim()
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, owner: Any) -> None:
        """``owner`` holds a big body (the HTTP request, the parsed call): once it and every
        other watched owner are freed, the heap is trimmed. Refused bodies count too: parsing
        one costs as much memory as pruning a smaller one."""
        self._loop = asyncio.get_running_loop()
        self.alive += 1
        self.watched += 1
        weakref.finalize(owner, self._freed)

    @contextlib.asynccontextmanager
    async def slot(self, size: int) -> AsyncIterator[None]:
        """Room for ``size`` bytes of pruning, in the order asked."""
        await self._acquire(size)
        try:
            yield
        finally:
            self._release(size)

    def _fits(self, size: int) -> bool:
        # A body over the whole budget waits for an empty room, then runs alone.
        return self.in_flight == 0 or self.in_flight + size <= self.max_bytes

    async def _acquire(self, size: int) -> None:
        # First come, first served: a giant waiting for room is not overtaken by a stream of
        # smaller bodies that would each still fit.
        if not self._waiting and self._fits(size):
            self.in_flight += size
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiting.append((size, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(size)  # admitted just as the request was cancelled
            else:
                with contextlib.suppress(ValueError):  # unless an admission already dropped it
                    self._waiting.remove((size, granted))
                self._admit()
            raise

    def _release(self, size: int) -> None:
        self.in_flight -= size
        self._admit()

    def _admit(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            size, granted = self._waiting.popleft()
            if not granted.done():
                self.in_flight += size
                granted.set_result(None)

    def _freed(self) -> None:
        # Runs where the last reference went: the loop, or a worker thread.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._one_fewer)

    def _one_fewer(self) -> None:
        self.alive -= 1
        if self.alive == 0 and self._trim is not None:
            self._loop.call_later(self.quiet_s, self._trim_if_quiet, self.watched)  # type: ignore[union-attr]

    def _trim_if_quiet(self, watched: int) -> None:
        if self.alive == 0 and self.watched == watched:  # none came since: a later freeing trims otherwise
            # malloc_trim walks the whole heap: in a thread, so the loop keeps serving.
            self._loop.run_in_executor(None, self._trim_now)  # type: ignore[union-attr]

    def _trim_now(self) -> None:
        self._trim()  # type: ignore[misc]
        self.trims += 1
        log.debug("heap trimmed after big request bodies")
