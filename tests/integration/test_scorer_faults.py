"""The LLM scorer model fails: it hangs, stalls mid-answer, drops the connection, or answers
garbage. The request is still served, pruned with the local scores, within the scorer's
deadline; the failure is counted in ``sieve_scorer_failures_total{reason}``; the budget in
Redis is settled as for any other request.

Real servers: the gateway under uvicorn, redis-server, the fake main upstream and a second
fake OpenAI server as the scorer model (``tests/support/fake_scorer.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.conversations import agent_history
from tests.support.fake_scorer import ScorerModel, answer
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import MODEL
from tests.integration.fault_helpers import USAGE, metered_settings, outcomes, settle_down
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import scorer_failures

pytestmark = [pytest.mark.redis, needs_redis, pytest.mark.upstream_default(Reply(content="ok", usage=USAGE))]

DEADLINE_S = 0.5


@pytest.fixture(scope="module")
def model() -> Iterator[ScorerModel]:
    with ScorerModel() as server:
        yield server


@pytest.fixture(scope="module")
def gw(tmp_path_factory, model: ScorerModel, module_upstream_server: FakeUpstream,
       redis: RedisServer) -> Iterator[GatewayServer]:
    policies: Path = tmp_path_factory.mktemp("policies")
    policy = {"scorer": "llm", "scorer_api_base": model.base_url, "scorer_min_history_tokens": 0,
              "scorer_cost_check": False, "scorer_batch_size": 100, "scorer_batch_timeout_s": 0.3,
              "scorer_deadline_s": DEADLINE_S, "scorer_cache_ttl_s": 0}
    (policies / "default.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in policy.items()))
    with GatewayServer(metered_settings(module_upstream_server, redis, policies_dir=policies)) as server:
        yield server


SCORES = answer({i: 3 for i in range(100)}).encode()
FAULTS = {
    "hangs": (Reply(delay_s=3.0), "timeout"),
    "stalls mid-answer": (Reply(raw_body=SCORES, content_type="application/json", stall_mid_body_s=3.0), "timeout"),
    "drops the connection": (Reply(drop_connection=True), "connection"),
    "answers garbage": (Reply(raw_body=b"\x00\xffnot json{{", content_type="application/json"), "bad_response"),
    "answers an HTML error": (Reply(status=502, raw_body=b"<html><h1>502 Bad Gateway</h1></html>"), "http_error"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_scorer_fault_serves_with_local_scores(gw: GatewayServer, model: ScorerModel, redis: RedisServer,
                                              fault: str) -> None:
    reply, reason = FAULTS[fault]
    model.clear()
    model.responder = lambda ids, attempt, req: reply
    _, settled = settle_down(gw, redis)
    seen, counted = scorer_failures(gw.metrics), outcomes(gw)
    started = time.monotonic()
    response = gw.post("/v1/chat/completions", json={"model": MODEL, "messages": agent_history(6)},
                       headers={"authorization": "Bearer sk-acme", "x-sieve-target-tokens": "3000",
                                "x-sieve-conversation-id": fault})  # first sight: a fresh decision
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "ok"
    assert elapsed < DEADLINE_S + 0.6  # bounded by the scorer's deadline, not by the model
    assert int(response.headers["x-sieve-saved-tokens"]) > 0  # pruned all the same, on local scores
    assert len(model.requests) == 1  # the model was asked (once: failures other than parse are not retried)
    gw.wait_idle()
    moved = {r: v - seen.get(r, 0) for r, v in scorer_failures(gw.metrics).items() if v != seen.get(r, 0)}
    assert moved == {reason: 1}
    assert outcomes(gw).get("pruned", 0) == counted.get("pruned", 0) + 1
    assert settle_down(gw, redis) == (0, settled + USAGE["total_tokens"])
