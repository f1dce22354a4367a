"""Budget store contract: reserve before forwarding, settle after, exactly, under concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.billing.budgets import BudgetLimit, Reservation, Scope, Settlement, Window, bucket_for, new_reservation_id
from gateway.errors import BudgetExceeded

from .conftest import RESERVATION_TTL_S

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAY_S = 86_400
LATEST_OFFSET_S = 120  # the furthest any test here moves past NOW


def deterministic_now(wall: float) -> float:
    """One second into a UTC minute, a little in the future, so minute windows are deterministic.

    Near midnight the tests' offsets would cross into the next UTC day and change the
    day and month windows under them, so NOW then moves to the first minute of that day.
    """
    now = (int(wall) // 60 + 2) * 60 + 1.0
    if now % DAY_S > DAY_S - LATEST_OFFSET_S - 60:
        now = (now // DAY_S + 1) * DAY_S + 1.0
    return now


NOW = deterministic_now(time.time())


def org_limit(limit: int, window: Window = Window.DAY, org: str = "acme") -> BudgetLimit:
    return BudgetLimit(org, Scope.ORG, org, window, limit)


def team_limit(limit: int, window: Window = Window.DAY, org: str = "acme", team: str = "search") -> BudgetLimit:
    return BudgetLimit(org, Scope.TEAM, team, window, limit)


async def reserve(stores, limits, tokens, now=NOW, rid=None):
    return await stores.budgets.reserve(rid or new_reservation_id(), limits, tokens, now)


async def used(stores, limit, now=NOW) -> tuple[int, int]:
    [status] = await stores.budgets.remaining([limit], now)
    return status.reserved, status.settled


async def test_now_leaves_room_for_every_offset_in_one_utc_day_and_minute():
    just_before_midnight = 20 * DAY_S - 150  # CI once ran here: NOW + 60 fell in the next day
    for wall in (just_before_midnight, 20 * DAY_S - 1, 20 * DAY_S + 43_200.5):
        now = deterministic_now(wall)
        assert now > wall and now % 60 == 1.0
        assert now // DAY_S == (now + LATEST_OFFSET_S) // DAY_S
    assert deterministic_now(just_before_midnight) == 20 * DAY_S + 1.0


async def test_reserve_settle_release_arithmetic(stores):
    day = org_limit(1000)
    first = await reserve(stores, [day], 300)
    assert first.remaining_tokens == 700
    assert await used(stores, day) == (300, 0)
    second = await reserve(stores, [day], 200)
    assert second.remaining_tokens == 500
    assert await stores.budgets.settle(first, 120) is Settlement.APPLIED  # less than reserved
    assert await used(stores, day) == (200, 120)
    assert await stores.budgets.settle(second, 450) is Settlement.APPLIED  # more than reserved
    assert await used(stores, day) == (0, 570)
    third = await reserve(stores, [day], 400)
    assert await stores.budgets.release(third) is Settlement.APPLIED
    [status] = await stores.budgets.remaining([day], NOW)
    assert (status.reserved, status.settled, status.remaining) == (0, 570, 430)
    assert status.reset_at == bucket_for(Window.DAY, NOW).reset_at


async def test_settle_and_release_act_once(stores):
    day = org_limit(1000)
    a = await reserve(stores, [day], 100)
    assert await stores.budgets.release(a) is Settlement.APPLIED
    assert await stores.budgets.release(a) is Settlement.ALREADY_FINAL
    assert await stores.budgets.settle(a, 80) is Settlement.ALREADY_FINAL  # settle after release: not counted
    b = await reserve(stores, [day], 100)
    assert await stores.budgets.settle(b, 90) is Settlement.APPLIED
    assert await stores.budgets.settle(b, 90) is Settlement.ALREADY_FINAL
    assert await stores.budgets.release(b) is Settlement.ALREADY_FINAL
    assert await used(stores, day) == (0, 90)


async def test_a_retried_settle_is_told_apart_from_an_unknown_reservation(stores):
    """A settle sent again after its reply was lost finds the reservation final and changes
    nothing; only a reservation the store never held (or forgot) is UNKNOWN, which the
    guard answers with a charge. Both were one answer (0) once, and a lost reply was charged twice."""
    day = org_limit(1000)
    held = await reserve(stores, [day], 100)
    assert await stores.budgets.settle(held, 70) is Settlement.APPLIED
    assert await stores.budgets.settle(held, 70) is Settlement.ALREADY_FINAL
    assert await used(stores, day) == (0, 70)
    never = Reservation.planned("never-held", (day,), 100, NOW, RESERVATION_TTL_S)
    assert await stores.budgets.settle(never, 70) is Settlement.UNKNOWN


async def test_a_reserve_arriving_after_its_release_holds_nothing(stores):
    """Redis hung with a reserve in its socket: the replica gave up on it and released the
    id once Redis answered; when the reserve then runs, it must not hold the tokens."""
    day = org_limit(1000)
    late = Reservation.planned("late-one", (day,), 300, NOW, RESERVATION_TTL_S)
    assert await stores.budgets.release(late) is Settlement.UNKNOWN
    await reserve(stores, [day], 300, rid="late-one")
    assert await used(stores, day) == (0, 0)
    assert await stores.budgets.settle(late, 300) is Settlement.ALREADY_FINAL


async def test_a_charge_sent_twice_with_its_id_counts_once(stores):
    day = org_limit(1000)
    for _ in range(2):
        await stores.budgets.charge([day], 250, NOW, charge_id="unmetered-1")
    assert await used(stores, day) == (0, 250)


async def test_token_figures_are_bounded(stores):
    day = org_limit(1000)
    held = await reserve(stores, [day], 100)
    with pytest.raises(ValueError):
        await stores.budgets.settle(held, 10**20)
    with pytest.raises(ValueError):
        await reserve(stores, [day], -1)
    assert await used(stores, day) == (100, 0)


async def test_retried_reservation_id_is_held_once(stores):
    day = org_limit(1000)
    a = await reserve(stores, [day], 100, rid="retry-me")
    again = await reserve(stores, [day], 100, rid="retry-me")
    assert again.remaining_tokens == a.remaining_tokens == 900
    assert await used(stores, day) == (100, 0)


async def test_exact_under_concurrency(stores):
    day = org_limit(37 * 100 + 99)  # room for 37 reservations of 100, not 38
    results = await asyncio.gather(*(reserve(stores, [day], 100) for _ in range(200)), return_exceptions=True)
    accepted = [r for r in results if not isinstance(r, BaseException)]
    rejected = [r for r in results if isinstance(r, BaseException)]
    assert len(accepted) == 37
    assert all(isinstance(r, BudgetExceeded) for r in rejected) and len(rejected) == 163
    [status] = await stores.budgets.remaining([day], NOW)
    assert (status.reserved, status.remaining) == (3700, 99)
    await asyncio.gather(*(stores.budgets.settle(r, 60) for r in accepted))
    assert await used(stores, day) == (0, 37 * 60)


async def test_multi_limit_is_all_or_nothing(stores):
    org, team = org_limit(10_000), team_limit(100)
    with pytest.raises(BudgetExceeded) as info:
        await reserve(stores, [org, team], 150)
    assert info.value.extra["budget"] == "team:acme/search:day"
    assert await used(stores, org) == (0, 0)  # the org was not charged for the team's refusal
    ok = await reserve(stores, [org, team], 80)
    assert [s.remaining for s in ok.statuses] == [9920, 20]
    assert ok.remaining_tokens == 20


async def test_budget_exceeded_body(stores):
    minute = org_limit(500, Window.MINUTE)
    await reserve(stores, [minute], 450)
    with pytest.raises(BudgetExceeded) as info:
        await reserve(stores, [minute], 100)
    err = info.value
    reset_at = bucket_for(Window.MINUTE, NOW).reset_at
    assert err.status == 429
    body = err.body()["error"]
    assert body["type"] == "budget_exceeded" and body["code"] == "budget_exceeded"
    assert body["budget"] == "org:acme:minute"
    assert (body["limit"], body["remaining"], body["requested"]) == (500, 50, 100)
    assert body["reset_at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset_at))
    assert "org 'acme' minute budget" in body["message"] and "50 remaining" in body["message"]
    assert err.headers["retry-after"] == str(int(reset_at - NOW))
    assert err.headers["x-sieve-budget-remaining-tokens"] == "50"


async def test_window_rollover(stores):
    minute, day = org_limit(100, Window.MINUTE), org_limit(1000, Window.DAY)
    first = await reserve(stores, [minute, day], 100, now=NOW + 45)
    with pytest.raises(BudgetExceeded):
        await reserve(stores, [minute, day], 1, now=NOW + 58)
    later = NOW + 60  # the next UTC minute, same UTC day; `first` is still held
    second = await reserve(stores, [minute, day], 100, now=later)
    assert [s.remaining for s in second.statuses] == [0, 800]
    assert second.buckets[0].id != first.buckets[0].id
    # A request that began in the old minute settles into the old minute, not the new one.
    assert await stores.budgets.settle(first, 40) is Settlement.APPLIED
    assert await used(stores, minute, later) == (100, 0)
    assert await used(stores, minute, NOW) == (0, 40)
    assert await used(stores, day, later) == (100, 40)


async def test_expired_reservation_returns_its_tokens(stores):
    day = org_limit(1000)
    crashed = await reserve(stores, [day], 600)
    with pytest.raises(BudgetExceeded):
        await reserve(stores, [day], 600, now=NOW + 1)
    after = NOW + RESERVATION_TTL_S + 1
    [status] = await stores.budgets.remaining([day], after)
    assert (status.reserved, status.settled) == (0, 0)
    fresh = await reserve(stores, [day], 600, now=after)
    assert await stores.budgets.release(crashed) is Settlement.ALREADY_FINAL  # its tokens went back already
    assert await used(stores, day, after) == (600, 0)
    assert await stores.budgets.release(fresh) is Settlement.APPLIED


async def test_late_settle_of_expired_reservation_charges_actual(stores):
    day = org_limit(1000)
    slow = await reserve(stores, [day], 500)
    after = NOW + RESERVATION_TTL_S + 1
    await stores.budgets.remaining([day], after)  # the sweep returns the 500
    assert await stores.budgets.settle(slow, 321) is Settlement.APPLIED
    assert await used(stores, day, after) == (0, 321)
    assert await stores.budgets.settle(slow, 321) is Settlement.ALREADY_FINAL


async def test_charge_records_unmetered_usage_without_a_check(stores):
    day = org_limit(100)
    await stores.budgets.charge([day], 250, NOW)
    [status] = await stores.budgets.remaining([day], NOW)
    assert (status.settled, status.remaining) == (250, 0)
    with pytest.raises(BudgetExceeded):
        await reserve(stores, [day], 1)


async def test_no_limits_is_a_free_reservation(stores):
    reservation = await reserve(stores, [], 10_000)
    assert reservation.remaining_tokens is None and reservation.org is None
    assert await stores.budgets.settle(reservation, 5) is Settlement.UNKNOWN
    assert await stores.budgets.release(reservation) is Settlement.UNKNOWN


async def test_orgs_are_separate_and_usage_reports_counters(stores):
    acme, globex = org_limit(1000), org_limit(1000, org="globex")
    team = team_limit(500, Window.HOUR)
    await reserve(stores, [acme, team], 100)
    r = await reserve(stores, [globex], 700)
    await stores.budgets.settle(r, 650)
    rows = await stores.budgets.usage("acme", NOW)
    assert [(s.limit.name, s.limit.limit, s.reserved, s.settled) for s in rows] == [
        ("org:acme:day", 1000, 100, 0),
        ("team:acme/search:hour", 500, 100, 0),
    ]
    assert rows[1].reset_at == bucket_for(Window.HOUR, NOW).reset_at
    [g] = await stores.budgets.usage("globex", NOW)
    assert (g.settled, g.remaining) == (650, 350)
    assert await stores.budgets.usage("initech", NOW) == []


async def test_limits_of_two_orgs_cannot_share_a_reservation(stores):
    with pytest.raises(ValueError):
        await reserve(stores, [org_limit(10), org_limit(10, org="globex")], 1)


async def test_ping(stores):
    await stores.budgets.ping()
