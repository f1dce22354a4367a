"""Key guessing is counted and throttled, per client address, on admin and client routes.

The gateway runs under uvicorn; the callers are real HTTP clients on loopback.
"""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from gateway.auth.throttle import AuthThrottle
from gateway.config.settings import Settings
from tests.support import bearer, metric_value

ADMIN_KEY = "admin-PLANTED-key-0123456789"
ACME = "sk-sieve-acme-0123456789abcdef"
KEYS = ({"key": ACME, "org": "acme"},)
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def failures(gw, route: str) -> float:
    return metric_value(gw.metrics, "sieve_auth_failures_total", route=route)


def test_wrong_admin_keys_are_counted_then_refused_with_retry_after(start_gateway, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="sieve.auth")
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, auth_failure_limit=10, auth_failure_window_s=30)
    statuses = []
    with httpx.Client(base_url=gw.base_url, timeout=10) as client:
        started = time.monotonic()
        for i in range(200):
            statuses.append(client.get("/admin/keys", headers=bearer(f"guess-{i:04d}-0123456789")).status_code)
        took = time.monotonic() - started
        right_key = client.get("/admin/keys", headers=bearer(ADMIN_KEY))
    assert statuses[:10] == [403] * 10
    assert set(statuses[10:]) == {429}, "the 11th guess and every one after it is refused unchecked"
    assert right_key.status_code == 429  # even the right key: a throttled guesser learns nothing
    assert 1 <= int(right_key.headers["retry-after"]) <= 30
    assert right_key.json()["error"]["code"] == "too_many_auth_failures"
    assert right_key.json()["error"]["type"] == "rate_limit_error"
    assert failures(gw, "/admin/keys") == 10
    assert metric_value(gw.metrics, "sieve_auth_throttled_total", route="/admin/keys") == 191
    assert any("failed 10 key checks" in r.getMessage() for r in caplog.records)
    assert ADMIN_KEY not in "\n".join(r.getMessage() for r in caplog.records)
    print(f"200 guesses in {took:.2f} s")


def test_wrong_client_keys_are_throttled_and_counted_by_route_template(start_gateway, upstream) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, auth_failure_limit=3, auth_failure_window_s=1)
    assert gw.post("/v1/chat/completions", json=CHAT).status_code == 401  # no key at all
    assert gw.post("/v1/chat/completions", json=CHAT, headers=bearer("sk-wrong-0123456789")).status_code == 401
    assert gw.get("/admin/usage/acme", headers=bearer("wrong-admin-0123456789")).status_code == 403
    throttled = gw.post("/v1/chat/completions", json=CHAT, headers=bearer(ACME))
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == "1"
    assert failures(gw, "/v1/chat/completions") == 2
    assert failures(gw, "/admin/usage/{org}") == 1  # the template, never the org or the path asked for
    refused = [s.value for m in gw.metrics.registry.collect() for s in m.samples
               if s.name == "sieve_requests_total" and s.labels["outcome"] == "unauthorized"]
    assert sum(refused) == 3  # two 401s and the 429, as sieve_requests_total counts a refused chat
    assert gw.get("/healthz").status_code == 200  # open routes check no key, so they are never throttled
    time.sleep(1.1)  # the window slides: the failures age out
    assert gw.post("/v1/chat/completions", json=CHAT, headers=bearer(ACME)).status_code == 200


def test_a_right_key_is_never_counted(start_gateway, upstream) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, auth_failure_limit=2)
    for _ in range(5):
        assert gw.post("/v1/chat/completions", json=CHAT, headers=bearer(ACME)).status_code == 200
        assert gw.get("/admin/keys", headers=bearer(ADMIN_KEY)).status_code == 200
    assert failures(gw, "/v1/chat/completions") == failures(gw, "/admin/keys") == 0


def test_throttling_can_be_turned_off(start_gateway) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, auth_failure_limit=0)
    codes = {gw.get("/admin/keys", headers=bearer(f"guess-{i}-0123456789")).status_code for i in range(30)}
    assert codes == {403}
    assert failures(gw, "/admin/keys") == 30


async def test_the_window_slides_and_the_tracked_addresses_are_bounded() -> None:
    now = [1000.0]
    throttle = AuthThrottle(limit=3, window_s=10, max_clients=2, clock=lambda: now[0])
    assert [await throttle.failed("a") for _ in range(3)] == [False, False, True]
    assert throttle.retry_after("a") == pytest.approx(10)
    now[0] = 1009.5
    assert throttle.retry_after("a") == pytest.approx(0.5)
    now[0] = 1010.0
    assert throttle.retry_after("a") is None
    for client in ("a", "b", "c"):  # three addresses refused: the least recently refused ("a") is forgotten
        for _ in range(3):
            await throttle.failed(client)
    assert throttle.retry_after("a") is None and throttle.retry_after("c") == pytest.approx(10)
    assert len(throttle._refused) == 2


def test_the_limits_are_settings() -> None:
    settings = Settings.from_env({"SIEVE_AUTH_FAILURE_LIMIT": "5", "SIEVE_AUTH_FAILURE_WINDOW_S": "2.5"})
    assert (settings.auth_failure_limit, settings.auth_failure_window_s) == (5, 2.5)
