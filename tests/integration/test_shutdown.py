"""SIGTERM on a real ``sieve serve`` process, mid-stream.

Real servers throughout: ``python -m gateway.cli serve`` as its own process
(signals only reach a process's main thread, so an in-process gateway cannot
show this), the fake upstream streaming slowly from a thread of the test, and
a ``redis-server`` holding the budget, so reservations can be read back.

* grace longer than the stream: the stream ends whole with ``[DONE]``, new
  connections are refused at once, the process exits 0 within the grace
  period, and only after the audit line is written and the budget settled;
* grace shorter than the stream: the stream is cut, the process exits
  promptly, and the reservation does not outlive it;
* grace ending while a non-streamed request waits for the provider: the same,
  and the client gets an OpenAI-shaped 503 ``shutting_down``, not uvicorn's
  plain-text 500.
"""

from __future__ import annotations

import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, Reply
from tests.integration.budget_helpers import GatewayProcess, chat_body, redis_day_counter, write_yaml
from tests.integration.fault_helpers import budget
from tests.support.redis_server import RedisServer
from tests.support import NO_PRUNING, bearer, read_jsonl, wait_until

pytestmark = pytest.mark.redis

KEY = "sk-shutdown"
AUTH = {**bearer(KEY), **NO_PRUNING}
USAGE = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
MAX_TOKENS = 5000  # reserved on top of the prompt: a leaked reservation is easy to see


def start_gateway(tmp_path: Path, upstream: FakeUpstream, redis: RedisServer, org: str,
                  grace_s: float) -> tuple[GatewayProcess, Path]:
    config = write_yaml(tmp_path / "sieve.yaml", {
        "keys": [{"key": KEY, "org": org}],
        "budgets": {"orgs": {org: {"day": 1_000_000}}},
    })
    audit = tmp_path / "audit.jsonl"
    gateway = GatewayProcess(config, {"SIEVE_UPSTREAM_BASE_URL": upstream.base_url, "SIEVE_REDIS_URL": redis.url,
                                      "SIEVE_AUDIT_LOG": str(audit), "SIEVE_SHUTDOWN_GRACE_S": str(grace_s)})
    return gateway.start(), audit


def refuses(port: int) -> bool:
    """Whether a new TCP connection to ``port`` is refused (the listener is closed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False  # accepted: the signal may not have been acted on yet
    except ConnectionRefusedError:
        return True


def test_sigterm_lets_the_stream_finish_then_settles_and_exits(tmp_path: Path, module_upstream: FakeUpstream,
                                                               redis: RedisServer) -> None:
    grace_s = 15.0
    pieces = [f"tok{i} " for i in range(12)]
    module_upstream.enqueue(Reply(chunks=pieces, chunk_delay_s=0.3, usage=USAGE))  # ~3.6 s of stream
    gateway, audit = start_gateway(tmp_path, module_upstream, redis, "drain", grace_s)
    try:
        with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", timeout=30, headers=AUTH,
                          json=chat_body(max_tokens=MAX_TOKENS, stream=True)) as response:
            assert response.status_code == 200
            request_id = response.headers["x-sieve-request-id"]
            chunks = response.iter_raw()
            body = next(chunks)  # the stream is under way
            assert redis_day_counter(redis.url, "drain").reserved > MAX_TOKENS
            signalled = time.monotonic()
            gateway.proc.send_signal(signal.SIGTERM)
            assert wait_until(lambda: refuses(gateway.port), timeout_s=2.0), \
                "a new connection was still accepted after SIGTERM"
            assert gateway.proc.poll() is None  # ...while the in-flight stream is still being served
            for chunk in chunks:
                body += chunk
        text = body.decode()
        assert all(p in text for p in pieces) and text.endswith("data: [DONE]\n\n"), text[-300:]
        gateway.proc.wait(timeout=grace_s)
        took = time.monotonic() - signalled
        assert gateway.proc.returncode == 0, gateway.log()
    finally:
        gateway.stop()
    assert took < grace_s
    lines = [line for line in read_jsonl(audit) if line["request_id"] == request_id]
    assert len(lines) == 1 and lines[0]["org"] == "drain", audit.read_text()
    counter = redis_day_counter(redis.url, "drain")
    assert (counter.reserved, counter.settled) == (0, USAGE["total_tokens"])


def test_grace_ending_while_the_provider_thinks_releases_the_hold(tmp_path: Path, module_upstream: FakeUpstream,
                                                                  redis: RedisServer) -> None:
    """A non-streamed request still waiting for the provider's answer when the grace ends."""
    grace_s = 1.0
    # Long past the grace, yet over before this module's upstream stops (no task left pending).
    module_upstream.enqueue(Reply(delay_s=4.0, usage=USAGE))
    gateway, audit = start_gateway(tmp_path, module_upstream, redis, "thinking", grace_s)
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, gateway.base_url + "/v1/chat/completions", timeout=30, headers=AUTH,
                                  json=chat_body(max_tokens=MAX_TOKENS))
            assert wait_until(lambda: budget(redis, "thinking")[0] > MAX_TOKENS, timeout_s=10)
            signalled = time.monotonic()
            gateway.proc.send_signal(signal.SIGTERM)
            # Cut before its response began: an OpenAI-shaped 503 (uvicorn alone would
            # answer a plain-text 500); the openai clients retry it on a replica that
            # is still serving.
            answer = pending.result()
            assert (answer.status_code, answer.headers["connection"]) == (503, "close")
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("service_unavailable", "shutting_down")
            assert "shutting down" in error["message"] and "retry" in error["message"]
        gateway.proc.wait(timeout=grace_s + 10)
        took = time.monotonic() - signalled
        assert gateway.proc.returncode == 0, gateway.log()
    finally:
        gateway.stop()
    # Prompt: the cut request is accounted by its own task, not found later by the
    # shutdown's sweep for requests left open (which waits seconds before acting).
    assert took < grace_s + 3, f"exit took {took:.1f} s after SIGTERM"
    counter = redis_day_counter(redis.url, "thinking")
    assert (counter.reserved, counter.settled) == (0, 0)  # no answer, nothing charged
    assert [line["outcome"] for line in read_jsonl(audit)] == ["upstream_error"]


def test_grace_shorter_than_the_stream_cuts_it_and_releases_the_hold(tmp_path: Path, module_upstream: FakeUpstream,
                                                                     redis: RedisServer) -> None:
    grace_s = 1.0
    module_upstream.enqueue(Reply(chunks=[f"tok{i} " for i in range(30)], chunk_delay_s=0.5, usage=USAGE))  # ~15 s
    gateway, audit = start_gateway(tmp_path, module_upstream, redis, "cut", grace_s)
    try:
        with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", timeout=30, headers=AUTH,
                          json=chat_body(max_tokens=MAX_TOKENS, stream=True)) as response:
            assert response.status_code == 200
            request_id = response.headers["x-sieve-request-id"]
            # The prompt as reserved (its estimate; the answer's cap is MAX_TOKENS, the day budget 1M).
            prompt = 1_000_000 - int(response.headers["x-sieve-budget-remaining-tokens"]) - MAX_TOKENS
            chunks = response.iter_raw()
            body = next(chunks)
            signalled = time.monotonic()
            gateway.proc.send_signal(signal.SIGTERM)
            with pytest.raises(httpx.HTTPError):  # cut: the body ends before its terminating chunk
                for chunk in chunks:
                    body += chunk
        gateway.proc.wait(timeout=grace_s + 10)
        took = time.monotonic() - signalled
        assert gateway.proc.returncode == 0, gateway.log()
    finally:
        gateway.stop()
    assert b"[DONE]" not in body
    assert took < grace_s + 5, f"exit took {took:.1f} s after SIGTERM"
    # Nothing stays reserved: the cut stream is charged what it used (prompt + the deltas
    # relayed, as for a client that walks away), never the 5,000-token reservation.
    counter = redis_day_counter(redis.url, "cut")
    assert counter.reserved == 0
    relayed = body.count(b'"delta"')
    assert prompt + 1 <= counter.settled <= prompt + 2 * relayed + 2, (counter, prompt, relayed)
    lines = [line for line in read_jsonl(audit) if line["request_id"] == request_id]
    assert len(lines) == 1, audit.read_text()
