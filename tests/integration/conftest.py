"""Fixtures the integration tests share: one real redis-server per test module, a clock clear of
window edges (midnight always; a minute edge where a module asks for it)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.redis_server import RedisServer, skip_without_redis
from tests.support import wait_clear_of_window_edge

DAY_S = 86_400
LONGEST_TEST_S = 120
MINUTE_S = 60
MINUTE_MARGIN_S = 5


@pytest.fixture(autouse=True)
def clear_of_utc_midnight() -> None:
    """Day and month budgets roll over at UTC midnight; no test starts in the two minutes before it."""
    wait_clear_of_window_edge(DAY_S, LONGEST_TEST_S)


@pytest.fixture
def clear_of_a_minute_edge() -> None:
    """For tests that charge calendar-window budgets, then read them back: never across a minute edge.

    A module asks for it with ``pytestmark = pytest.mark.usefixtures("clear_of_a_minute_edge")``.
    """
    wait_clear_of_window_edge(MINUTE_S, MINUTE_MARGIN_S)


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """A real redis-server on loopback for the module's tests (skipped where none is installed)."""
    skip_without_redis()
    with RedisServer() as server:
        yield server
