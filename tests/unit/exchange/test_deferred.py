"""Deferred work outlives the request's task: a task (``spawn``) or, for work that waits for
nothing, a callback of the loop (``soon``); both counted as pending until done, both drained."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.exchange import deferred as deferred_module
from gateway.exchange.deferred import Deferred


def test_soon_runs_after_the_current_step_even_when_the_task_that_asked_is_cancelled() -> None:
    ran: list[str] = []

    async def request(d: Deferred) -> None:
        d.soon(ran.append, "accounted")
        assert ran == [] and d.pending == 1  # not yet: the answer is written first
        await asyncio.sleep(3600)  # the client goes away: this task is cancelled

    async def main() -> None:
        d = Deferred()
        task = asyncio.get_running_loop().create_task(request(d))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ran == ["accounted"] and d.pending == 0

    asyncio.run(main())


def test_a_failing_callback_is_logged_and_counted_done(caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> None:
        raise RuntimeError("a bug in the accounting")

    async def main() -> int:
        d = Deferred()
        d.soon(boom)
        d.soon(lambda: None)
        await asyncio.sleep(0)
        return d.pending

    with caplog.at_level(logging.ERROR, logger=deferred_module.log.name):
        assert asyncio.run(main()) == 0
    assert [r.getMessage() for r in caplog.records] == ["deferred task failed"]


def test_drain_runs_the_callbacks_and_the_tasks_they_spawn() -> None:
    ran: list[str] = []

    async def main() -> int:
        d = Deferred()

        async def settle() -> None:
            await asyncio.sleep(0.01)
            ran.append("settled")

        d.soon(lambda: d.spawn(settle()))
        left = await d.drain(timeout_s=5)
        return left + d.pending

    assert asyncio.run(main()) == 0 and ran == ["settled"]
