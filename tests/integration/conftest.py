"""Fixtures the integration tests share: one real redis-server per test module, a clock clear of
window edges (midnight always; a minute edge where a module asks for it)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from gateway.config.settings import Settings
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.redis_server import RedisServer, skip_without_redis
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


# -- the fake provider of every format (tests.support.fake_providers) -------------------------------------

@pytest.fixture(scope="module")
def providers_server() -> Iterator[FakeProviders]:
    """One fake provider speaking Chat Completions, Responses and Anthropic Messages, for the module."""
    with FakeProviders() as server:
        yield server


@pytest.fixture
def providers(providers_server: FakeProviders) -> FakeProviders:
    """The module's fake provider, cleared for each test (no recorded requests, default ``Reply()``)."""
    providers_server.clear()
    providers_server.default = Reply()
    return providers_server


def format_settings(providers: FakeProviders, **overrides: Any) -> Settings:
    """Settings of a gateway whose OpenAI-compatible and Anthropic upstreams are ``providers``."""
    overrides.setdefault("upstream_base_url", providers.base_url)
    overrides.setdefault("anthropic_base_url", providers.anthropic_base_url)
    return Settings(**overrides)
