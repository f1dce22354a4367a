"""The last resort: a bug in a route still answers a 500 in OpenAI's error shape, counted.

The gateway runs under uvicorn with one extra route whose handler raises, as a
bug would; everything else (the access guard, the exception handlers, the
metrics) is the gateway's own.
"""

from __future__ import annotations

import pytest
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.access import ClientRoute
from gateway.config.settings import Settings
from gateway.telemetry.metrics import Outcome
from tests.support.gateway_server import GatewayServer
from tests.support import bearer, metric_value, openai_client

ACME = "sk-sieve-acme-0123456789abcdef"
SECRET_DETAIL = "PLANTED-detail-of-the-bug"


async def buggy(request: Request) -> Response:
    request.state.org = request.state.identity.org
    request.state.model = "gpt-4o-mini"
    raise RuntimeError(SECRET_DETAIL)


@pytest.fixture
def buggy_gateway(upstream):
    gw = GatewayServer(Settings(upstream_base_url=upstream.base_url, virtual_keys=({"key": ACME, "org": "acme"},)))
    # Ahead of the real routes; under /bug, so an OpenAI client's base URL can point at it.
    gw.app.router.routes.insert(0, ClientRoute("/bug/chat/completions", buggy, methods=["POST"]))
    with gw:
        yield gw


def test_a_route_that_raises_answers_an_openai_shaped_500(buggy_gateway: GatewayServer) -> None:
    resp = buggy_gateway.post("/bug/chat/completions", json={}, headers=bearer(ACME))
    assert resp.status_code == 500
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["type"] == "internal_error" and error["code"] == "internal_error"
    assert set(error) == {"message", "type", "param", "code"}
    request_id = resp.headers["x-sieve-request-id"]
    assert request_id in error["message"]
    assert SECRET_DETAIL not in resp.text  # the bug's own message stays inside
    assert metric_value(buggy_gateway.metrics, "sieve_requests_total", org="acme", model="gpt-4o-mini",
                        outcome=Outcome.INTERNAL_ERROR) == 1


def test_the_official_client_reads_the_500(buggy_gateway: GatewayServer) -> None:
    import openai

    client = openai_client(buggy_gateway, ACME)
    client.base_url = buggy_gateway.base_url + "/bug"
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 500
    assert raised.value.body["code"] == "internal_error"
