"""Shared fixtures: a fake OpenAI upstream and the real gateway, both real servers on loopback."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from gateway.settings import Settings, prepare_offline_environment

prepare_offline_environment()  # before anything imports tiktoken or litellm

from tests.fake_upstream import FakeUpstream, Reply  # noqa: E402
from tests.gateway_server import GatewayServer  # noqa: E402


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: FakeUpstream) -> FakeUpstream:
    upstream_server.clear()
    upstream_server.default = Reply()
    return upstream_server


@pytest.fixture
def start_gateway(upstream: FakeUpstream) -> Iterator[Callable[..., GatewayServer]]:
    """Start a gateway with Settings overrides; stopped at the end of the test."""
    started: list[GatewayServer] = []

    def start(**overrides) -> GatewayServer:
        overrides.setdefault("upstream_base_url", upstream.base_url)
        server = GatewayServer(Settings(**overrides)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def gateway(start_gateway) -> GatewayServer:
    return start_gateway()
