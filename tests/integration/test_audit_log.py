"""The audit log through the real gateway: one JSON line per request, no content unless
the org's policy opts in, and never a key or an Authorization header.

Keys are planted (the client's virtual key, the configured upstream key, a
provider key forwarded in passthrough, a key pasted into a message, a
credential-named body field) and the raw file is searched for each of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from gateway.telemetry.pricing import load_litellm_model_cost
from tests.support.conversations import GOAL, agent_history
from tests.support.fake_upstream import Reply
from tests.support import openai_client, read_jsonl

ACME_KEY = "sk-sieve-acme-PLANTED-0123456789abcdef"
BETA_KEY = "sk-sieve-beta-PLANTED-fedcba9876543210"
UPSTREAM_KEY = "sk-upstream-PLANTED-00112233445566778899"
PROVIDER_KEY = "sk-proj-PLANTED-CLIENT-aabbccddeeff00112233"
PASTED_KEY = "sk-live-PLANTED-IN-CONTENT-5566778899aabb"
BODY_SECRET = "PLANTED-body-field-secret-value"
PLANTED = (ACME_KEY, BETA_KEY, UPSTREAM_KEY, PROVIDER_KEY, PASTED_KEY, BODY_SECRET)
ACTIONS = {"kept", "masked", "dropped", "summarised"}
USAGE = {"prompt_tokens": 2000, "completion_tokens": 30, "total_tokens": 2030,
         "prompt_tokens_details": {"cached_tokens": 1024}}


def read_lines(gw, path: Path) -> list[dict]:
    gw.wait_idle()
    assert path.read_bytes().endswith(b"\n")
    return read_jsonl(path)


def assert_no_secrets(path: Path) -> None:
    text = path.read_text()
    for secret in PLANTED:
        assert secret not in text, f"{secret} leaked into the audit log"
    for fragment in ("PLANTED", "Bearer", "authorization", "x-api-key"):
        assert fragment.lower() not in text.lower(), f"{fragment!r} in the audit log"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    """``default`` writes no content; ``verbose`` (acme's) opts in."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text("strategy: relevance\n")
    (folder / "verbose.yaml").write_text("extends: default\naudit_include_content: true\n")
    return folder


@pytest.fixture
def keyed_gateway(start_gateway, policies: Path, tmp_path: Path):
    path = tmp_path / "audit.jsonl"
    gw = start_gateway(
        audit_log=str(path), policies_dir=policies, upstream_api_key=UPSTREAM_KEY,
        virtual_keys=({"key": ACME_KEY, "org": "acme", "team": "search"}, {"key": BETA_KEY, "org": "beta"}),
        org_policies={"acme": "verbose"})
    return gw, path


def test_one_line_per_request_with_ids_tokens_decisions_costs_and_timings(keyed_gateway, upstream):
    gw, path = keyed_gateway
    beta = openai_client(gw, BETA_KEY)
    history = agent_history(24, output_lines=25)
    conv = {"x-sieve-target-tokens": "4000", "x-sieve-conversation-id": "audit-1"}
    dry = gw.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history},
                  headers={**conv, "x-sieve-conversation-id": "audit-dry", "authorization": f"Bearer {BETA_KEY}"})
    expected_decisions = dry.json()["report"]["messages"]

    responses = []
    upstream.enqueue(Reply(usage=USAGE))
    responses.append(beta.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]))
    upstream.enqueue(Reply(chunks=["a", "b"], usage=USAGE))
    with beta.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=history, stream=True, extra_headers=conv) as streamed:
        list(streamed.parse())
    responses.append(streamed)
    upstream.enqueue(Reply(usage=USAGE))
    responses.append(beta.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "unpriced"}]))
    upstream.enqueue(Reply(status=500))
    with pytest.raises(openai.InternalServerError) as failed:
        beta.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "boom"}])

    lines = read_lines(gw, path)
    assert len(lines) == 4
    ids = [r.headers["x-sieve-request-id"] for r in responses] + [failed.value.response.headers["x-sieve-request-id"]]
    assert [line["request_id"] for line in lines] == ids  # one line each, in order
    for line in lines:
        assert set(line) == {"request_id", "route", "timestamp", "org", "team", "model", "strategy", "outcome", "tokens",
                             "decisions", "cost", "timings", "target_tokens", "budget", "cohort",
                             "shadow"}  # no "request": no content
        assert (line["cohort"], line["shadow"]) == ("pruned", None)
        assert (line["org"], line["team"], line["strategy"]) == ("beta", None, "relevance")
        assert line["timestamp"].endswith("Z")
        t = line["timings"]
        assert t["upstream_ms"] > 0 and t["overhead_ms"] >= 0 and t["prune_ms"] >= 0
        assert t["scorer_ms"] is None  # the local scorer makes no scorer call
        assert all(d["action"] in ACTIONS for d in line["decisions"])
    small, pruned, unpriced, error = lines

    # Tokens as the response headers said; decisions per message index.
    for line, resp in zip(lines, responses):
        assert line["tokens"] == {"original": int(resp.headers["x-sieve-original-tokens"]),
                                  "forwarded": int(resp.headers["x-sieve-forwarded-tokens"]),
                                  "saved": int(resp.headers["x-sieve-saved-tokens"])}
    assert (small["model"], small["outcome"]) == ("gpt-4o-mini", "passthrough")
    (decision,) = small["decisions"]
    assert (decision["index"], decision["action"], decision["score"]) == (0, "kept", None)
    assert decision["reason"]  # why it was kept (below the pruning trigger)
    assert pruned["outcome"] == "pruned" and pruned["tokens"]["saved"] > 0
    assert [d["index"] for d in pruned["decisions"]] == list(range(len(history)))
    assert pruned["decisions"] == expected_decisions  # the same decisions /v1/prune reports
    assert {d["action"] for d in pruned["decisions"]} > {"kept"}

    # Cost figures: the usage priced at gpt-4o-mini's map entry, cached part at the cached price.
    price = load_litellm_model_cost()["gpt-4o-mini"]
    actual = (976 * price["input_cost_per_token"] + 1024 * price["cache_read_input_token_cost"]
              + 30 * price["output_cost_per_token"])
    for line in (small, pruned):
        cost = line["cost"]
        assert cost["priced"] is True
        assert cost["actual_usd"] == pytest.approx(actual, rel=1e-12)
        assert (cost["prompt_tokens"], cost["cached_tokens"], cost["completion_tokens"]) == (2000, 1024, 30)
        assert cost["net_usd"] == pytest.approx(cost["counterfactual_usd"] - cost["actual_usd"] - cost["scorer_usd"])
    assert small["cost"]["counterfactual_usd"] == small["cost"]["actual_usd"]
    # The default policy's sieve_expand tool rides along the pruned request: billed, and the
    # unpruned request would not carry it, so the saving is what was removed less the definition.
    tool_tokens = pruned["cost"]["sieve_tool_tokens"]
    assert 80 < tool_tokens < 160 and small["cost"].get("sieve_tool_tokens", 0) == 0
    assert pruned["cost"]["net_usd"] == pytest.approx((pruned["tokens"]["saved"] - tool_tokens)
                                                      * price["input_cost_per_token"])
    assert unpriced["model"] == "fake-model"
    assert unpriced["cost"]["priced"] is False
    assert unpriced["cost"]["counterfactual_usd"] == unpriced["cost"]["actual_usd"] == 0.0
    assert (error["outcome"], error["cost"]) == ("upstream_error", None)

    text = path.read_text()
    assert GOAL not in text and "hello there" not in text and "order #W1000001" not in text
    assert_no_secrets(path)


def test_content_only_when_the_policy_opts_in_and_still_scrubbed(keyed_gateway, upstream):
    gw, path = keyed_gateway
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": f"Order #W77 is late. My OpenAI key is {PASTED_KEY}, use it."}]
    extra = {"metadata": {"api_key": BODY_SECRET, "ticket": "T-9"}}
    for key in (ACME_KEY, BETA_KEY):
        openai_client(gw, key).chat.completions.create(model="gpt-4o-mini", messages=messages, extra_body=extra,
                                                       extra_headers={"x-api-key": PROVIDER_KEY})
    acme, beta = read_lines(gw, path)
    assert (acme["org"], acme["team"], beta["org"]) == ("acme", "search", "beta")
    assert "request" not in beta
    body = acme["request"]  # acme's policy (verbose) opts in: the original body
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"][0] == messages[0]
    assert body["messages"][1]["content"] == "Order #W77 is late. My OpenAI key is [redacted], use it."
    assert body["metadata"] == {"api_key": "[redacted]", "ticket": "T-9"}
    assert "Order #W77" not in json.dumps(beta)
    assert_no_secrets(path)


def test_open_gateway_never_writes_the_forwarded_provider_key(start_gateway, upstream, tmp_path):
    """Passthrough: the client's own provider key goes upstream, and nowhere else."""
    path = tmp_path / "audit.jsonl"
    gw = start_gateway(audit_log=str(path))
    upstream.enqueue(Reply(usage=USAGE), Reply(usage=USAGE))
    openai_client(gw, PROVIDER_KEY).chat.completions.create(model="gpt-4o-mini",
                                                            messages=[{"role": "user", "content": "hi"}])
    r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=30,
                   headers={"x-api-key": PROVIDER_KEY, "authorization": f"Bearer {PROVIDER_KEY}"},
                   json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert r.status_code == 200
    assert upstream.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    lines = read_lines(gw, path)
    assert [line["org"] for line in lines] == ["anonymous", "anonymous"]
    assert all(line["cost"]["priced"] for line in lines)
    assert_no_secrets(path)


def test_audit_file_is_appended_across_restarts(start_gateway, upstream, tmp_path):
    path = tmp_path / "audit.jsonl"
    for _ in range(2):
        gw = start_gateway(audit_log=str(path))
        openai_client(gw, PROVIDER_KEY).chat.completions.create(model="gpt-4o-mini",
                                                                messages=[{"role": "user", "content": "hi"}])
        gw.wait_idle()
        gw.stop()
    lines = read_jsonl(path)
    assert len(lines) == 2 and lines[0]["request_id"] != lines[1]["request_id"]
