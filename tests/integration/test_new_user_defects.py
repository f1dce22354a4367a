"""The rough edges a new user met (issue 28), each shown on a real gateway: under uvicorn in a
thread, or ``python -m gateway.cli serve`` as its own process where start-up is what is tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.exchange.prune_step import conversation_key
from gateway.pruning.cohort import control_point
from gateway.config.settings import ModelRoute, Settings
from tests.support.conversations import agent_history
from tests.support.fake_upstream import Reply
from tests.support.gateway_server import GatewayServer
from tests.support.redis_server import RedisServer, needs_redis
from tests.support import bearer, free_port, metric_value, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
ACME, ACME_OTHER = "sk-sieve-acme-0123456789abcdef", "sk-sieve-acme-second-0123456789"
KEYS = ({"key": ACME, "org": "acme"}, {"key": ACME_OTHER, "org": "acme"})


def serve(env: dict[str, str], timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    """``sieve serve`` in a process of its own; one that is still running after ``timeout_s``
    (it started, when it should not have) is stopped and reported as such."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(free_port())], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=15)
        return subprocess.CompletedProcess(proc.args, -1, out, err + "\n(still serving: it started)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- start-up ------------------------------------------------------------------------------------

def test_an_upstream_url_with_credentials_beside_a_bearer_key_is_one_line_at_start_up(upstream) -> None:
    """Before: it started, and every request answered 500 (aiohttp refuses both)."""
    url = upstream.base_url.replace("http://", "http://bob:hunter2-planted@")
    done = serve({"SIEVE_UPSTREAM_BASE_URL": url, "SIEVE_UPSTREAM_API_KEY": "sk-upstream-0123456789abcdef"})
    assert done.returncode == 2, done.stderr[-500:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["sieve: configuration error: SIEVE_UPSTREAM_BASE_URL: the URL carries credentials (user:pass@), "
                     "and its configured API key would go with it as 'Authorization: Bearer': a request cannot carry "
                     "both. Drop the credentials from the URL, or the key"], done.stderr[-800:]
    assert "hunter2-planted" not in done.stderr


def test_credentials_in_the_url_alone_still_work(start_gateway, upstream) -> None:
    """Virtual keys, no upstream key: the URL's credentials are the only authentication, and go."""
    gw = start_gateway(upstream_base_url=upstream.base_url.replace("http://", "http://bob:pw@"), virtual_keys=KEYS)
    answer = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [{"role": "user",
                                                                                          "content": "hi"}]},
                     headers=bearer(ACME))
    assert answer.status_code == 200, answer.text
    assert upstream.requests[-1].headers["authorization"].startswith("Basic ")


def test_a_bad_policy_file_is_one_clear_line_at_start_up(tmp_path: Path) -> None:
    """Before: a 26-line traceback from the failed lifespan."""
    (tmp_path / "default.yaml").write_text("strategy: relevance\nprotect_last_unit: 3\n")
    done = serve({"SIEVE_POLICIES_DIR": str(tmp_path), "SIEVE_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert done.returncode == 2, done.stderr[-500:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sieve: configuration error: ") and \
        "default.yaml:2: unknown key 'protect_last_unit'" in lines[0], done.stderr[-800:]


# -- requests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [{"nested": "text"}, ["input_text"]], ids=["object", "array"])
def test_a_content_part_type_that_is_not_a_string_is_a_400_not_a_500(gateway, upstream, kind) -> None:
    """Before: 500 on /v1/responses and /v1/prune (an unhashable value reached `in TEXT_TYPES`);
    Messages answered 400 already."""
    parts = [{"type": kind, "text": "hi"}]
    asked = [("/v1/responses", {"model": "gpt-5", "input": [{"role": "user", "content": parts}]}, {}),
             ("/v1/prune", {"model": "gpt-5", "input": [{"role": "user", "content": parts}]},
              {"x-sieve-format": "responses"}),
             ("/v1/responses", {"model": "gpt-5", "input": [{"type": "function_call_output", "call_id": "c",
                                                             "output": parts}]}, {}),
             ("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": parts}]},
              {})]
    for path, body, headers in asked:
        answer = gateway.post(path, json=body, headers=headers)
        assert answer.status_code == 400, (path, answer.text[:300])
        assert "type" in answer.text and "internal" not in answer.text


def test_strict_models_covers_the_messages_route(start_gateway, upstream) -> None:
    """Before: an unknown model on /v1/messages was forwarded, while Chat and Responses answered 404."""
    gw = start_gateway(strict_models=True, models={"gpt-4o-mini": ModelRoute(name="gpt-4o-mini")},
                       anthropic_base_url=upstream.base_url.removesuffix("/v1"))
    asked = len(upstream.requests)
    answer = gw.post("/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 10,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 404, answer.text
    assert answer.json()["type"] == "error" and answer.json()["error"]["type"] == "not_found_error"
    assert "strict_models" in answer.json()["error"]["message"]
    counted = gw.post("/v1/messages/count_tokens", json={"model": "claude-sonnet-4-5",
                                                         "messages": [{"role": "user", "content": "hi"}]})
    assert counted.status_code == 404
    assert len(upstream.requests) == asked


def test_a_dry_run_leaves_the_live_conversations_plan_alone(start_gateway, upstream, tmp_path: Path) -> None:
    """Before: /v1/prune overwrote the live conversation's frozen plan (any key of the org could,
    with another target), and the next live step broke the cached prefix."""
    (tmp_path / "default.yaml").write_text("strategy: window\ntarget_tokens: 1500\nmin_prompt_tokens: 0\n"
                                           "min_messages: 0\nexpand_tool: false\n")
    gw = start_gateway(virtual_keys=KEYS, policies_dir=tmp_path)
    history = agent_history(14)
    live = {**bearer(ACME), "x-sieve-conversation-id": "live-1"}
    assert gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history},
                   headers=live).status_code == 200
    first = upstream.requests[-1].json["messages"]
    step = [*history, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    # Another key of the org dry-runs other histories under the same id (and another target).
    for other, target in ((agent_history(13), "1500"), (agent_history(9), "900")):
        probe = gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": other},
                        headers={**bearer(ACME_OTHER), "x-sieve-conversation-id": "live-1",
                                 "x-sieve-target-tokens": target})
        assert probe.status_code == 200 and probe.json()["report"]["mode"] in ("stateless", "under")
    # The live conversation's next step still finds the plan its last forward left.
    assert gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": step},
                   headers=live).json()["report"]["mode"] == "frozen"
    assert gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": step},
                   headers=live).status_code == 200
    second = upstream.requests[-1].json["messages"]
    assert second[:len(first)] == first  # the cached prefix holds: the plan was the live one's


def test_a_conversation_rehearsed_through_dry_runs_keeps_its_decisions(start_gateway, tmp_path: Path) -> None:
    """/v1/prune writes no live plan, but a conversation sent to it step by step (replay.py, a
    user trying a policy) still plays out as forwards would: each step extends the one before
    until an epoch (the live plan is left alone: the test above)."""
    (tmp_path / "default.yaml").write_text("strategy: window\ntarget_tokens: 1500\nmin_prompt_tokens: 0\n"
                                           "min_messages: 0\nexpand_tool: false\n")
    gw = start_gateway(virtual_keys=KEYS, policies_dir=tmp_path)
    headers = {**bearer(ACME), "x-sieve-conversation-id": "rehearsed"}
    history = agent_history(14)
    first = gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history}, headers=headers).json()
    step = [*history, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    second = gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": step}, headers=headers).json()
    assert first["report"]["saved_tokens"] > 0
    assert second["report"]["mode"] == "frozen"
    forwarded = first["request"]["messages"]
    assert second["request"]["messages"][:len(forwarded)] == forwarded


def test_the_cohort_is_neither_chosen_nor_learned_before_forwarding(start_gateway, upstream, tmp_path: Path) -> None:
    """Before: the control group was a plain hash of the conversation id the client picks, and
    /v1/prune told it: ids that probe as control sent their largest histories unpruned."""
    (tmp_path / "default.yaml").write_text("strategy: window\ntarget_tokens: 1500\nmin_prompt_tokens: 0\n"
                                           "min_messages: 0\ncontrol_share: 0.5\nallow_overrides: false\n")
    gw = start_gateway(virtual_keys=KEYS, policies_dir=tmp_path)
    body = {"model": "gpt-4o-mini", "messages": agent_history(14)}
    # The ids a client computes to be control (the unkeyed hash, as the code is public).
    chosen = [cid for cid in (f"probe-{i}" for i in range(400))
              if control_point(conversation_key("acme", body, cid)) < 0.5][:40]
    unpruned = 0
    for cid in chosen:
        headers = {**bearer(ACME), "x-sieve-conversation-id": cid}
        report = gw.post("/v1/prune", json=body, headers=headers).json()["report"]
        assert report["cohort"] == "pruned" and report["saved_tokens"] > 0  # a dry run tells nothing
        forwarded = gw.post("/v1/chat/completions", json=body, headers=headers)
        unpruned += forwarded.headers["x-sieve-saved-tokens"] == "0"
    # Binomial(40, 0.5) if the choice means nothing (it was 40 of 40): more than 32 has p < 1e-4.
    assert unpruned <= 32, unpruned


def test_swagger_ui_loads_from_the_gateway_itself(gateway) -> None:
    """Before: /docs loaded Swagger UI from a CDN, a blank page offline."""
    page = gateway.get("/docs")
    assert page.status_code == 200
    assert "cdn." not in page.text and "https://" not in page.text
    for asset, kind in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "css")):
        assert f'"/docs/{asset}"' in page.text
        got = gateway.get(f"/docs/{asset}")
        assert got.status_code == 200 and kind in got.headers["content-type"] and len(got.content) > 10_000
    assert gateway.get("/docs/passwd").status_code == 404


@pytest.mark.parametrize("figure", [1e20, 1e300])
def test_a_junk_usage_figure_poisons_neither_the_cost_counter_nor_the_audit(start_gateway, upstream, tmp_path,
                                                                           figure: float) -> None:
    """Before: 1e20 or 1e300 tokens drove sieve_cost_usd_total to 6e293 until restart, and the audit
    write raised TypeError, so those requests lost their audit and access lines."""
    audit = tmp_path / "audit.jsonl"
    gw = start_gateway(virtual_keys=KEYS, audit_log=str(audit), budgets={"orgs": {"acme": {"day": 100_000_000}}})
    upstream.enqueue(Reply(usage={"prompt_tokens": figure, "completion_tokens": 10, "total_tokens": figure}))
    answer = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"}]}, headers={**bearer(ACME), "x-sieve-strategy": "none"})
    assert answer.status_code == 200
    gw.wait_idle()
    actual = metric_value(gw.metrics, "sieve_cost_usd_total", org="acme", model="gpt-4o-mini", kind="actual")
    assert 0 < actual < 100  # the 10M-token ceiling of gpt-4o-mini at most
    line = next(line for line in read_jsonl(audit) if line["request_id"] == answer.headers["x-sieve-request-id"])
    assert line["budget"]["usage_anomaly"] == "ceiling" and line["budget"]["charged_tokens"] == 10_000_000
    assert metric_value(gw.metrics, "sieve_usage_anomalies_total", reason="ceiling") == 1


# -- the key-guessing throttle across replicas -----------------------------------------------------

@needs_redis
@pytest.mark.redis
def test_the_key_guessing_throttle_is_shared_through_redis(upstream) -> None:
    """Before: each replica counted its own failures: N replicas let N x the limit through."""
    limit = 6
    with RedisServer() as redis:
        settings = Settings(upstream_base_url=upstream.base_url, virtual_keys=KEYS, admin_key="admin-0123456789",
                            redis_url=redis.url, auth_failure_limit=limit, auth_failure_window_s=60)
        with GatewayServer(settings) as one, GatewayServer(settings) as two:
            statuses = [(one if i % 2 else two).get("/admin/keys", headers=bearer(f"guess-{i:04d}-0123456789"))
                        .status_code for i in range(30)]
    checked = statuses.count(403)  # keys actually checked (and wrong), across both replicas
    assert limit <= checked <= limit + 1, statuses  # each replica learns the refusal at its next failure
    assert statuses[-10:] == [429] * 10
