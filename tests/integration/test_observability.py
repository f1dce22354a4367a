"""What an operator reads (issue 28): access lines as pure JSON on stdout, with the method and the
route template, 404s and 405s included; start-up naming the upstreams and policy in use; a route
metric saying which protocol a request came in on; a prune that cannot meet its target saying
so; the audit line carrying the target in force.

``sieve serve`` runs as its own process (stdout and stderr apart), against the fake upstream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.conversations import agent_history
from tests.support import bearer, free_port, metric_value, read_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(upstream, tmp_path: Path):
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")},
           "SIEVE_UPSTREAM_BASE_URL": upstream.base_url, "SIEVE_UPSTREAM_API_KEY": "sk-upstream-planted-0123456789",
           "SIEVE_ANTHROPIC_BASE_URL": upstream.base_url.removesuffix("/v1"), "SIEVE_POLICY": "agent"}
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)], cwd=ROOT,
                                env=env, stdout=stdout, stderr=stderr)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield base, out, err
        proc.terminate()
        proc.wait(timeout=20)


def test_access_lines_are_json_alone_on_stdout_with_method_and_route_template(served, upstream) -> None:
    base, out, err = served
    key = bearer("sk-own-provider-key-0123456789")
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    asked = [("POST", "/v1/chat/completions", chat, 200), ("GET", "/v1/responses/resp_nobody", None, 404),
             ("GET", "/v1/nowhere/at/all", None, 404), ("GET", "/v1/chat/completions", None, 405),
             ("POST", "/v1/prune", chat, 200)]
    for method, path, body, status in asked:
        assert httpx.request(method, base + path, json=body, headers=key, timeout=30).status_code == status
    time.sleep(0.5)  # the forwarded request's line is written by the deferred accounting
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line of stdout is one JSON object
    got = [(r["method"], r["route"], r["status"]) for r in records]
    assert got == [("POST", "/v1/chat/completions", 200), ("GET", "/v1/responses/{response_id}", 404),
                   ("GET", None, 404), ("GET", "/v1/chat/completions", 405), ("POST", "/v1/prune", 200)], got
    assert records[2]["path"] == "/v1/nowhere/at/all"
    assert "sieve.access" not in err.read_text()  # not on stderr too


def test_start_up_says_which_upstreams_and_policy_are_in_use(served) -> None:
    _, _, err = served
    text = err.read_text()
    assert "upstream (Chat Completions, Responses): http://127.0.0.1:" in text and "with configured key" in text
    assert "upstream (Anthropic Messages): http://127.0.0.1:" in text and "with the callers' own keys" in text
    assert "policy: agent (from " in text and "state: in memory" in text
    assert "sk-upstream-planted" not in text


def test_a_route_metric_says_which_protocol_a_request_came_in_on(start_gateway, upstream) -> None:
    gw = start_gateway(anthropic_base_url=upstream.base_url.removesuffix("/v1"))
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    assert gw.post("/v1/chat/completions", json=chat).status_code == 200
    assert gw.post("/chat/completions", json=chat).status_code == 200
    assert gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini"}).status_code == 400
    gw.wait_idle()
    sample = lambda route, outcome: metric_value(gw.metrics, "sieve_route_requests_total", org="anonymous",  # noqa: E731
                                                 route=route, outcome=outcome)
    assert sample("/v1/chat/completions", "passthrough") == 1 and sample("/chat/completions", "passthrough") == 1
    assert sample("/v1/chat/completions", "client_error") == 1
    # The contract family keeps its labels (org, model, outcome).
    assert metric_value(gw.metrics, "sieve_requests_total", org="anonymous", model="gpt-4o-mini",
                        outcome="passthrough") == 2


def test_a_target_that_cannot_be_met_says_so_and_the_audit_line_has_the_target(start_gateway, upstream,
                                                                              tmp_path: Path) -> None:
    """Before: problems: [] at 8,591 forwarded for a target of 1,500; no target in the audit line."""
    audit = tmp_path / "audit.jsonl"
    gw = start_gateway(audit_log=str(audit))
    history = [{"role": "system", "content": "You are a careful agent. " * 600}, *agent_history(12)[1:]]
    headers = {"x-sieve-target-tokens": "1500"}
    report = gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history}, headers=headers).json()["report"]
    assert report["forwarded_tokens"] > 1500
    assert any(p.startswith("target not met") and "1500" in p for p in report["problems"]), report["problems"]
    answer = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history}, headers=headers)
    gw.wait_idle()
    line = next(line for line in read_jsonl(audit) if line["request_id"] == answer.headers["x-sieve-request-id"])
    assert line["target_tokens"] == 1500


def _scraped(gw, name: str, **labels: str) -> float:
    """One sample as ``GET /metrics`` shows it (0.0 where the series is not shown yet)."""
    from prometheus_client.parser import text_string_to_metric_families
    for family in text_string_to_metric_families(gw.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_a_scrape_right_after_a_request_shows_its_counts(start_gateway, upstream) -> None:
    """The request path's metrics are tallied as plain numbers (gateway.telemetry.tally) and
    written into their series when scraped: every request shows on the next scrape, counted once."""
    gw = start_gateway()
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    labels = dict(org="anonymous", model="gpt-4o-mini")
    for n in (1, 2, 3):
        answer = gw.post("/v1/chat/completions", json=chat)
        assert answer.status_code == 200
        completion = answer.json()["usage"]["completion_tokens"]
        assert completion > 0
        gw.wait_idle()
        assert _scraped(gw, "sieve_requests_total", outcome="passthrough", **labels) == n
        assert _scraped(gw, "sieve_route_requests_total", org="anonymous", route="/v1/chat/completions",
                        outcome="passthrough") == n
        assert _scraped(gw, "sieve_upstream_seconds_count") == n
        assert _scraped(gw, "sieve_overhead_seconds_count") == n
        assert _scraped(gw, "sieve_prune_seconds_count") == n
        assert _scraped(gw, "sieve_cohort_requests_total", org="anonymous", cohort="pruned",
                        outcome="passthrough") == n
        assert _scraped(gw, "sieve_completion_tokens_total", **labels) == completion * n
    original = _scraped(gw, "sieve_prompt_tokens_original_total", **labels)
    assert original > 0 and original == _scraped(gw, "sieve_prompt_tokens_forwarded_total", **labels)
    assert _scraped(gw, "sieve_units_total", org="anonymous", action="kept") == 3


def test_a_client_that_leaves_a_stream_is_counted_once_without_a_budget(start_gateway, upstream, caplog) -> None:
    """No reservation to settle: the accounting runs as a callback of the loop (no task), and
    still exactly once for a request whose client went away mid-stream."""
    import logging

    from tests.support.fake_upstream import Reply
    caplog.set_level(logging.INFO, logger="sieve.access")
    gw = start_gateway()
    upstream.enqueue(Reply(chunks=[f"tok{i} " for i in range(40)], chunk_delay_s=0.05))
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=chat, timeout=10) as response:
        assert response.status_code == 200
        request_id = response.headers["x-sieve-request-id"]
        got = b""
        for chunk in response.iter_raw():
            got += chunk
            if got.count(b"data:") >= 3:
                break  # walk away mid-stream
    time.sleep(0.3)  # the gateway sees the connection gone at its next write
    gw.wait_idle()
    assert sum(metric_value(gw.metrics, "sieve_requests_total", org="anonymous", model="gpt-4o-mini", outcome=o)
               for o in ("passthrough", "upstream_error", "pruned", "fail_open")) == 1
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "sieve.access"]
    assert [line["request_id"] for line in lines] == [request_id]
