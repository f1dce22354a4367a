"""The bytes-in-flight bound on big prunes (``gateway.exchange.big_bodies.BigBodies``): room by bytes,
first come first served, a body over the whole budget alone, cancellation that gives its
room back, and the heap trimmed once the last big request has been freed for a quiet spell."""

from __future__ import annotations

import asyncio
import gc

from gateway.exchange.big_bodies import BigBodies


class Owner:
    """Stands for the request that holds a body (a ModelCall): something with a weak reference."""


async def hold(big: BigBodies, size: int, order: list[str], name: str, release: asyncio.Event) -> None:
    async with big.slot(size):
        order.append(name)
        await release.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_bodies_share_the_budget_and_wait_in_order() -> None:
    async def run() -> list[str]:
        big, order, release = BigBodies(max_bytes=100, trim=lambda: None), [], asyncio.Event()
        tasks = [asyncio.create_task(hold(big, size, order, name, release))
                 for name, size in (("a", 60), ("b", 30), ("giant", 500), ("c", 10))]
        await settle()
        assert order == ["a", "b"] and big.in_flight == 90  # "c" would fit, but the giant came first
        release.set()
        await asyncio.gather(*tasks)
        assert big.in_flight == 0
        return order

    assert asyncio.run(run()) == ["a", "b", "giant", "c"]


def test_the_giant_runs_alone() -> None:
    async def run() -> None:
        big, order, release = BigBodies(max_bytes=100, trim=lambda: None), [], asyncio.Event()
        giant = asyncio.create_task(hold(big, 500, order, "giant", release))
        await settle()
        small = asyncio.create_task(hold(big, 1, order, "small", asyncio.Event()))
        await settle()
        assert order == ["giant"] and big.in_flight == 500
        release.set()
        await giant
        await settle()
        assert order == ["giant", "small"] and big.in_flight == 1
        small.cancel()

    asyncio.run(run())


def test_a_request_cancelled_while_waiting_gives_its_turn_back() -> None:
    async def run() -> None:
        big, order, release = BigBodies(max_bytes=100, trim=lambda: None), [], asyncio.Event()
        first = asyncio.create_task(hold(big, 100, order, "first", release))
        await settle()
        gone = asyncio.create_task(hold(big, 50, order, "gone", asyncio.Event()))
        later = asyncio.create_task(hold(big, 50, order, "later", release))
        await settle()
        gone.cancel()
        await settle()
        release.set()
        await asyncio.gather(first, later)
        assert order == ["first", "later"] and big.in_flight == 0

    asyncio.run(run())


def test_the_heap_is_trimmed_once_the_last_big_request_is_freed() -> None:
    async def run() -> int:
        trims = []
        big = BigBodies(max_bytes=100, trim=lambda: trims.append(1), quiet_s=0.01)
        first, second = Owner(), Owner()
        big.watch(first)
        big.watch(second)
        del first
        gc.collect()
        await asyncio.sleep(0.05)
        assert trims == [] and big.alive == 1  # the second request still holds its body
        del second
        gc.collect()
        for _ in range(100):
            if big.trims:
                break
            await asyncio.sleep(0.01)
        return len(trims)

    assert asyncio.run(run()) == 1


def test_big_requests_back_to_back_keep_their_pages_until_a_quiet_spell() -> None:
    """An agent loop sending big steps one after the other: each step is freed before the next
    arrives, but the heap is not trimmed between them (the next step would fault the pages in
    again); once none comes for ``quiet_s``, it is, once."""
    async def run() -> tuple[list[int], int]:
        trims: list[int] = []
        big = BigBodies(max_bytes=100, trim=lambda: trims.append(1), quiet_s=0.2)
        for _ in range(5):  # five steps, 0.05 s apart, each freed before the next
            step = Owner()
            big.watch(step)
            del step
            gc.collect()
            await asyncio.sleep(0.05)
        during = list(trims)
        for _ in range(100):
            if big.trims:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # no second trim follows
        return during, len(trims)

    during, after = asyncio.run(run())
    assert during == [] and after == 1, (during, after)
