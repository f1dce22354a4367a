"""Credentials a URL carries never reach a client, a log record or the audit log.

An ``api_base`` may hold a password (``https://user:pass@proxy/v1``), a Redis URL
too (``redis://:pass@host``), and an error about either names the URL or the
address. The gateway runs under uvicorn; the upstreams are real ports (a fake
upstream, or a port where nothing listens).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config.settings import ModelRoute, Settings
from gateway.telemetry.redaction import redact_url
from tests.support.gateway_server import GatewayServer
from tests.support import bearer, free_port

PASSWORD = "hunter2-PLANTED-url-password"
ACME = "sk-sieve-acme-0123456789abcdef"
KEYS = ({"key": ACME, "org": "acme"},)


def chat_body(model: str = "gpt-4o-mini") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]}


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()}\n{r.exc_text or ''}" for r in caplog.records)


@pytest.mark.parametrize("url, shown", [
    ("https://bob:hunter2@proxy.local:8443/v1", "https://[redacted]@proxy.local:8443/v1"),
    ("https://bob:p@ss@proxy.local/v1", "https://[redacted]@proxy.local/v1"),  # an unescaped @ in the password
    ("redis://:secret@redis.cache:6379/0", "redis://[redacted]@redis.cache:6379/0"),
    ("https://x.example/v1?key=AIza123&alt=sse", "https://x.example/v1?key=[redacted]&alt=sse"),
    ("http://127.0.0.1:9100/v1", "http://127.0.0.1:9100/v1"),
])
def test_redact_url_keeps_where_and_drops_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_password_in_an_api_base_is_not_in_the_502(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG)
    dead = free_port()  # nothing listens there: the connection is refused, a 502
    audit = tmp_path / "audit.jsonl"
    models = {"private": ModelRoute(name="private", api_base=f"http://bob:{PASSWORD}@127.0.0.1:{dead}/v1")}
    settings = Settings(upstream_base_url=f"http://alice:{PASSWORD}@127.0.0.1:{dead}/v1", models=models,
                        virtual_keys=KEYS, audit_log=str(audit))
    with GatewayServer(settings) as gw:
        default = gw.post("/v1/chat/completions", json=chat_body(), headers=bearer(ACME))
        configured = gw.post("/v1/chat/completions", json={**chat_body("private"), "stream": True},
                             headers=bearer(ACME))
        gw.wait_idle()
        metrics = gw.get("/metrics").text
    for resp in (default, configured):
        assert resp.status_code == 502, resp.text
        assert resp.json()["error"]["code"] == "upstream_unavailable"
        assert f"127.0.0.1:{dead}" in resp.json()["error"]["message"]  # where it went is still said
        assert PASSWORD not in resp.text and PASSWORD not in str(resp.headers)
    assert "[redacted]@127.0.0.1" in default.json()["error"]["message"]
    assert PASSWORD not in metrics
    assert PASSWORD not in audit.read_text()
    assert PASSWORD not in logged_text(caplog)


def test_a_url_with_credentials_logged_by_anyone_is_scrubbed(start_gateway,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    start_gateway(virtual_keys=KEYS)  # installs the process-wide log scrubbing
    logging.getLogger("aiohttp.client").warning("connecting to https://svc:%s@proxy.local/v1", PASSWORD)
    assert PASSWORD not in logged_text(caplog)
    assert "https://[redacted]@proxy.local/v1" in logged_text(caplog)


def test_a_store_outage_503_does_not_name_redis(caplog: pytest.LogCaptureFixture) -> None:
    """An unknown key while Redis is down is a 503 (it might be a key added at runtime):
    the client learns the store is down, not where it lives or its password."""
    dead = free_port()
    settings = Settings(redis_url=f"redis://:{PASSWORD}@127.0.0.1:{dead}/0", virtual_keys=KEYS)
    with GatewayServer(settings) as gw:
        resp = gw.post("/v1/chat/completions", json=chat_body(), headers=bearer("sk-sieve-unknown-0123456789abcdef"))
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "store_unavailable"
    assert str(dead) not in resp.text and "127.0.0.1" not in resp.text
    assert PASSWORD not in resp.text
