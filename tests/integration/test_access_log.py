"""One JSON access line per request on ``sieve.access``: forwarded or refused, never content or keys.

The gateway runs under uvicorn; the provider is the recording fake upstream, or
a port where nothing listens (a 502); the callers are real HTTP clients.
"""

from __future__ import annotations

import json
import logging

import pytest

from gateway.config.settings import ModelRoute
from tests.support.fake_upstream import Reply
from tests.support import bearer, free_port

UPSTREAM_KEY = "sk-upstream-PLANTED-0123456789abcdef"
ACME = "sk-sieve-acme-0123456789abcdef"
SENTINEL = "PLANTED-CONTENT-the-user-private-note"
FIELDS = {"request_id", "method", "route", "status", "org", "model", "outcome", "original_tokens", "forwarded_tokens",
          "prune_ms", "upstream_ms", "duration_ms"}


def chat_body(model: str = "gpt-4o-mini", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": f"hello {SENTINEL}"}], **extra}


@pytest.fixture
def access(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="sieve.access")
    return caplog


def lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "sieve.access"]


def the_line(caplog: pytest.LogCaptureFixture, request_id: str) -> dict:
    found = [line for line in lines(caplog) if line.get("request_id") == request_id]
    assert len(found) == 1, (request_id, lines(caplog))
    return found[0]


@pytest.fixture
def gw(start_gateway):
    dead = free_port()
    return start_gateway(virtual_keys=({"key": ACME, "org": "acme"},), upstream_api_key=UPSTREAM_KEY,
                         models={"gpt-4o-mini": ModelRoute(name="gpt-4o-mini"),
                                 "down": ModelRoute(name="down", api_base=f"http://127.0.0.1:{dead}/v1",
                                                    api_key=UPSTREAM_KEY)},
                         budgets={"orgs": {"acme": {"day": 100_000}}})


def test_a_200_and_a_502_each_log_one_line_with_the_figures(gw, upstream, access) -> None:
    ok = gw.post("/v1/chat/completions", json=chat_body(), headers=bearer(ACME))
    failed = gw.post("/v1/chat/completions", json=chat_body("down"), headers=bearer(ACME))
    gw.wait_idle()
    assert (ok.status_code, failed.status_code) == (200, 502)
    line = the_line(access, ok.headers["x-sieve-request-id"])
    assert set(line) == FIELDS
    assert line["status"] == 200 and line["route"] == "/v1/chat/completions"
    assert (line["org"], line["model"]) == ("acme", "gpt-4o-mini")
    assert line["original_tokens"] == int(ok.headers["x-sieve-original-tokens"])
    assert line["forwarded_tokens"] == int(ok.headers["x-sieve-forwarded-tokens"])
    assert line["outcome"] in ("passthrough", "pruned")
    assert line["prune_ms"] >= 0 and line["upstream_ms"] > 0 and line["duration_ms"] >= line["upstream_ms"]
    bad = the_line(access, failed.headers["x-sieve-request-id"])
    assert set(bad) == FIELDS
    assert (bad["status"], bad["outcome"], bad["model"]) == (502, "upstream_error", "down")
    assert len(lines(access)) == 2
    text = "\n".join(r.getMessage() for r in access.records)
    for secret in (SENTINEL, UPSTREAM_KEY, ACME):
        assert secret not in text


def test_a_stream_logs_one_line_when_it_ends(gw, upstream, access) -> None:
    upstream.default = Reply(chunks=["a", "b", "c"])
    resp = gw.post("/v1/chat/completions", json=chat_body(stream=True), headers=bearer(ACME))
    assert resp.status_code == 200 and resp.text.endswith("data: [DONE]\n\n")
    gw.wait_idle()
    line = the_line(access, resp.headers["x-sieve-request-id"])
    assert line["status"] == 200 and line["upstream_ms"] > 0
    assert len(lines(access)) == 1


def test_refused_requests_log_one_line_each(gw, upstream, access) -> None:
    refused = {
        401: gw.post("/v1/chat/completions", json=chat_body(), headers=bearer("sk-wrong-0123456789abcdef")),
        400: gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": "x"}, headers=bearer(ACME)),
        429: gw.post("/v1/chat/completions", json=chat_body(max_tokens=200_000), headers=bearer(ACME)),
    }
    prune = gw.post("/v1/prune", json=chat_body(), headers=bearer(ACME))
    assert gw.get("/healthz").status_code == 200  # a probe: no line
    gw.wait_idle()
    for status, resp in refused.items():
        assert resp.status_code == status, resp.text
        line = the_line(access, resp.headers["x-sieve-request-id"])
        assert line["status"] == status and line["route"] == "/v1/chat/completions"
    assert the_line(access, refused[429].headers["x-sieve-request-id"])["org"] == "acme"
    assert the_line(access, prune.headers["x-sieve-request-id"])["route"] == "/v1/prune"
    assert len(lines(access)) == 4
    assert upstream.requests == []
    text = "\n".join(r.getMessage() for r in access.records)
    assert SENTINEL not in text and "sk-wrong" not in text
