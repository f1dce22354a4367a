"""Deferred side effects that outlive the request that caused them.

A client that disconnects mid-stream cancels its request's task; budget
settling, metrics and the audit line must still happen. ``spawn`` detaches
the work into its own task, keeps a strong reference until it ends, and
``drain`` waits for stragglers at shutdown (bounded: a hung store must not
keep the process from exiting).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine

log = logging.getLogger("sieve.deferred")


class Deferred:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("deferred task failed", exc_info=task.exception())

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout_s: float = 10.0) -> int:
        """Wait for every task, including any spawned while waiting; returns how many
        were still running at the deadline (abandoned: the process is exiting)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)
        if self._tasks:
            log.warning("%d deferred task(s) still running after %.0f s at shutdown: abandoned",
                        len(self._tasks), timeout_s)
        return len(self._tasks)
