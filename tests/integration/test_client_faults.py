"""The caller goes away: while the provider thinks, or halfway through sending its body.

Same setting as ``test_upstream_faults``: a real uvicorn gateway metered in a
real redis-server, the fake upstream. A client that leaves mid-stream is
covered in ``test_faults``. Whatever the moment, the request is counted and
nothing stays reserved.
"""

from __future__ import annotations

import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import orjson
import pytest

from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import chat_body
from tests.integration.fault_helpers import AUTH, USAGE, budget, metered_settings, outcomes, settle_down
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import metric_value, wait_until

pytestmark = [pytest.mark.redis, needs_redis, pytest.mark.upstream_default(Reply(content="ok", usage=USAGE))]


@pytest.fixture(scope="module")
def gw(module_upstream_server: FakeUpstream, redis: RedisServer) -> Iterator[GatewayServer]:
    with GatewayServer(metered_settings(module_upstream_server, redis, upstream_timeout_s=5.0)) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True])
def test_client_leaves_while_the_provider_thinks(gw, module_upstream, redis, stream) -> None:
    """Gone before the first byte: the provider's answer is still accounted, the reservation ends."""
    reserved, settled = settle_down(gw, redis)
    assert reserved == 0
    seen = sum(outcomes(gw).values())
    module_upstream.enqueue(Reply(delay_s=0.6, chunks=["a", "b"], usage=USAGE))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gw.base_url + "/v1/chat/completions", headers=AUTH, timeout=httpx.Timeout(5, read=0.2),
                   json=chat_body(max_tokens=5000, stream=stream))
    time.sleep(0.8)  # the provider answers after the client left
    reserved_after, settled_after = settle_down(gw, redis)
    assert reserved_after == 0  # not held until the reservation's TTL
    assert sum(outcomes(gw).values()) == seen + 1
    assert settled_after > settled  # the provider did the work: charged (usage, or the prompt estimate)


def test_client_leaves_halfway_through_its_body(gw, module_upstream, redis, caplog) -> None:
    body = orjson.dumps(chat_body(content="x" * 4000))
    before = metric_value(gw.metrics, "sieve_requests_total", org="acme", model="other", outcome="client_error")
    forwarded = len(module_upstream.requests)
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                     b"authorization: Bearer sk-acme\r\ncontent-length: %d\r\n\r\n" % len(body))
        for piece in (body[:1000], body[1000:2000]):  # slowly, then gone
            sock.sendall(piece)
            time.sleep(0.1)
    gw.wait_idle()
    assert wait_until(lambda: metric_value(gw.metrics, "sieve_requests_total", org="acme", model="other",
                                outcome="client_error") == before + 1)
    assert len(module_upstream.requests) == forwarded  # nothing reached the provider
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # an everyday event, not a crash
    assert settle_down(gw, redis)[0] == 0
    assert httpx.post(gw.base_url + "/v1/chat/completions", headers=AUTH, json=chat_body()).status_code == 200



def test_shutdown_cancelling_a_request_that_waits_for_the_provider(module_upstream, redis) -> None:
    """A rolling deploy: past the graceful timeout uvicorn cancels what is still running."""
    gw = GatewayServer(metered_settings(module_upstream, redis, upstream_timeout_s=10.0)).start()
    gw.server.config.timeout_graceful_shutdown = 0.3
    _, settled = budget(redis)
    module_upstream.enqueue(Reply(delay_s=2.0, usage=USAGE))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(httpx.post, gw.base_url + "/v1/chat/completions", headers=AUTH, timeout=10,
                              json=chat_body(max_tokens=5000))
        assert wait_until(lambda: budget(redis)[0] > 0)  # reserved, now waiting for the provider
        gw.stop()
        answer = waiting.result()
        # An OpenAI-shaped 503 (uvicorn alone would answer a plain-text 500).
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, "shutting_down")
    assert budget(redis) == (0, settled)  # released by the drained accounting, not left to its TTL
    assert outcomes(gw) == {"upstream_error": 1}
