"""Deferred side effects that outlive the request that caused them.

A client that disconnects mid-stream cancels its request's task; budget
settling, metrics and the audit line must still happen. ``spawn`` detaches
the work into its own task, keeps a strong reference until it ends, and
``drain`` waits for stragglers at shutdown (bounded: a hung store must not
keep the process from exiting). ``soon`` runs work that waits for nothing
(no I/O) as a plain callback of the loop, right after the current step: no
task to create, register and step through (a fifth of the accounting of a
small request). Both are counted in ``pending`` until they ran.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Coroutine

log = logging.getLogger("sieve.deferred")


class Deferred:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._soon = 0  # callbacks scheduled by ``soon`` that have not run yet

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("deferred task failed", exc_info=task.exception())

    def soon(self, work: Callable[..., Any], *args: Any) -> None:
        """Run ``work(*args)`` once the current step of the loop ends (the request's answer
        written), whatever becomes of the request's task; an error is logged as a task's is."""
        self._soon += 1
        asyncio.get_running_loop().call_soon(self._run, work, args)

    def _run(self, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            work(*args)
        except Exception as exc:  # noqa: BLE001 - as a failed task: logged, the loop goes on
            log.error("deferred task failed", exc_info=exc)
        finally:
            self._soon -= 1

    @property
    def pending(self) -> int:
        return len(self._tasks) + self._soon

    async def drain(self, timeout_s: float = 10.0) -> int:
        """Wait for every task, including any spawned while waiting; returns how many
        were still running at the deadline (abandoned: the process is exiting)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._soon and loop.time() < deadline:
            await asyncio.sleep(0)  # one turn of the loop runs them (they may spawn tasks)
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)
        if self._tasks:
            log.warning("%d deferred task(s) still running after %.0f s at shutdown: abandoned",
                        len(self._tasks), timeout_s)
        return len(self._tasks)
