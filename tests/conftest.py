"""Shared fixtures: a fake OpenAI upstream and the real gateway, both real servers on loopback.

The fake upstreams (``tests.support.fake_upstream.FakeUpstream``):

* ``upstream_server``: one for the whole session; ``upstream``: that one, cleared for each test
  (no recorded requests, no scripted replies, the default ``Reply()``). What most tests use.
* ``module_upstream_server``: a fresh one for the module alone, for a module-scoped gateway or
  tests that hold or break their upstream; ``module_upstream``: that one, cleared for each test.
  Its default reply is ``Reply()``, or the one the module names with
  ``pytestmark = pytest.mark.upstream_default(Reply(...))``.
"""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from gateway.config.settings import Settings, prepare_offline_environment

prepare_offline_environment()  # before anything imports tiktoken or litellm

from tests.support.fake_upstream import FakeUpstream, Reply  # noqa: E402
from tests.support.gateway_server import GatewayServer  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "upstream_default(reply): the default Reply of the module's own fake "
                                       "upstream (fixtures module_upstream_server, module_upstream)")


def module_default_reply(request: pytest.FixtureRequest) -> Reply:
    marker = request.node.get_closest_marker("upstream_default")
    return marker.args[0] if marker else Reply()


def cleared(server: FakeUpstream, default: Reply) -> FakeUpstream:
    server.clear()
    server.default = default
    return server


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: FakeUpstream) -> FakeUpstream:
    return cleared(upstream_server, Reply())


@pytest.fixture(scope="module")
def module_upstream_server(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    with FakeUpstream(default=module_default_reply(request)) as server:
        yield server


@pytest.fixture
def module_upstream(request: pytest.FixtureRequest, module_upstream_server: FakeUpstream) -> FakeUpstream:
    return cleared(module_upstream_server, module_default_reply(request))


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
