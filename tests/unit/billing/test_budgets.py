"""Budgets as pure logic: windows, which limits apply (reservation size: test_reservation_estimate)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.billing.budgets import (
    BudgetConfig,
    BudgetLimit,
    BudgetStatus,
    Scope,
    Window,
    bucket_for,
    budget_exceeded,
    reservation_org,
)
from gateway.errors import ConfigError
from gateway.wire.call import ANONYMOUS, Identity


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    "window, now, bucket, start, reset",
    [
        (Window.MINUTE, ts(2025, 1, 15, 12, 3, 59), "2025-01-15T12:03", ts(2025, 1, 15, 12, 3), ts(2025, 1, 15, 12, 4)),
        (Window.HOUR, ts(2025, 1, 15, 23, 59, 59), "2025-01-15T23", ts(2025, 1, 15, 23), ts(2025, 1, 16)),
        (Window.DAY, ts(2025, 1, 15, 0, 0, 0), "2025-01-15", ts(2025, 1, 15), ts(2025, 1, 16)),
        (Window.MONTH, ts(2024, 2, 29, 18), "2024-02", ts(2024, 2, 1), ts(2024, 3, 1)),
        (Window.MONTH, ts(2024, 12, 31, 23, 59, 59), "2024-12", ts(2024, 12, 1), ts(2025, 1, 1)),
    ],
)
def test_calendar_windows_are_utc_aligned(window, now, bucket, start, reset):
    b = bucket_for(window, now)
    assert (b.id, b.start, b.reset_at) == (bucket, start, reset)


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(list(Window)))
def test_now_is_inside_its_window(now, window):
    b = bucket_for(window, now)
    assert b.start <= now < b.reset_at
    assert bucket_for(window, b.reset_at).start == b.reset_at  # windows tile time
    assert bucket_for(window, b.reset_at).id != b.id


CONFIG = BudgetConfig.from_mapping({
    "orgs": {"acme": {"day": 1_000_000, "minute": 50_000}},
    "teams": {"search": {"hour": 200_000}, "acme/infra": {"day": 10_000}, "infra": {"day": 99}},
    "keys": {"ci-bot": {"month": 5_000_000}},
})


def test_limits_for_an_identity_in_scope_then_window_order():
    limits = CONFIG.limits_for(Identity("acme", "search", "ci-bot"))
    assert [(l.name, l.limit) for l in limits] == [
        ("org:acme:minute", 50_000),
        ("org:acme:day", 1_000_000),
        ("team:acme/search:hour", 200_000),
        ("key:acme/ci-bot:month", 5_000_000),
    ]
    assert reservation_org(limits) == "acme"


def test_org_qualified_entries_win_and_bare_names_apply_in_every_org():
    assert [l.limit for l in CONFIG.limits_for(Identity("acme", "infra"))] == [50_000, 1_000_000, 10_000]
    assert [l.name for l in CONFIG.limits_for(Identity("globex", "infra"))] == ["team:globex/infra:day"]
    assert CONFIG.limits_for(Identity("globex")) == ()
    assert CONFIG.limits_for(ANONYMOUS) == ()
    assert BudgetConfig.empty().limits_for(Identity("acme", "search", "k")) == ()


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"org": {}}, "unknown key(s) org"),
        ({"orgs": {"acme": {"week": 5}}}, "unknown window 'week'"),
        ({"orgs": {"acme": {"day": -1}}}, "budgets.orgs.acme.day"),
        ({"orgs": {"acme": {"day": "lots"}}}, "non-negative integer"),
        ({"orgs": {"acme": {"day": True}}}, "non-negative integer"),
        ({"orgs": {"acme": None}}, "must map windows"),
        ({"teams": ["search"]}, "budgets.teams: must be a mapping"),
        (["orgs"], "budgets: must be a mapping"),
    ],
)
def test_config_is_strict(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BudgetConfig.from_mapping(raw)


def test_budget_exceeded_names_scope_window_limit_remaining_reset():
    limit = BudgetLimit("acme", Scope.TEAM, "search", Window.HOUR, 1000)
    reset = ts(2025, 1, 15, 13)
    err = budget_exceeded(BudgetStatus(limit, "2025-01-15T12", 900, 50, reset), 120, reset - 90)
    body = err.body()["error"]
    assert body["budget"] == "team:acme/search:hour"
    assert (body["limit"], body["remaining"], body["reset_at"]) == (1000, 50, "2025-01-15T13:00:00Z")
    assert "team 'search' (org 'acme') hour budget" in body["message"]
    assert err.headers["retry-after"] == "90"
    # Overshoot (settled above the limit) is reported as 0 remaining, never negative.
    assert BudgetStatus(limit, "b", 0, 1200, reset).remaining == 0
    assert "more than the whole limit" in budget_exceeded(BudgetStatus(limit, "b", 0, 0, reset), 5000, 0).message
