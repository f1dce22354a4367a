"""Proving the savings on live traffic: the control group and shadow mode, through the real gateway.

A control share splits conversations by a hash of their key (the split is checked
against the binomial expectation) and every control conversation reaches the fake
provider exactly as the client sent it; a shadow policy forwards every body as it
came while its metrics and audit lines show what its decisions would have saved.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.cli import main
from gateway.exchange.prune_step import conversation_key
from gateway.pruning.cohort import control_point
from gateway.config.settings import Settings
from tests.support.conversations import agent_history
from tests.support.fake_scorer import ScorerModel, answer
from tests.support.fake_upstream import Reply
from tests.support.formats import chat_to_messages, chat_to_responses
from tests.integration.conftest import format_settings
from tests.support.gateway_server import GatewayServer
from tests.support import openai_client, read_jsonl

ORG = "anonymous"  # an open gateway's callers
MODEL = "gpt-4o-mini"
PRUNING = "min_prompt_tokens: 0\nmin_messages: 0\n"


def policies(tmp_path: Path, text: str, target_tokens: int = 1500, strategy: str = "window") -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text(f"{PRUNING}strategy: {strategy}\ntarget_tokens: {target_tokens}\n{text}")
    return folder


def metrics(gw: GatewayServer) -> dict[tuple[str, tuple], float]:
    gw.wait_idle()
    text = httpx.get(gw.base_url + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def post(gw: GatewayServer, body: dict, conversation_id: str | None = None) -> httpx.Response:
    headers = {"x-sieve-conversation-id": conversation_id} if conversation_id else {}
    response = gw.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response


def test_control_share_splits_conversations_and_forwards_control_whole(tmp_path, upstream) -> None:
    body = {"model": MODEL, "messages": agent_history(12)}
    n = 200
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, cohort_secret="cohort-test-secret",
                                policies_dir=policies(tmp_path, "control_share: 0.5\n"))) as gw:
        cohorts = {}
        for i in range(n):
            cid = f"conversation-{i}"
            got = post(gw, body, cid)
            cohorts[cid] = "control" if int(got.headers["x-sieve-saved-tokens"]) == 0 else "pruned"
        samples = metrics(gw)
    sent = [r.json for r in upstream.requests if r.path.endswith("/chat/completions")]
    assert len(sent) == n
    control = [cid for cid, cohort in cohorts.items() if cohort == "control"]
    # Binomial(200, 0.5): within 3 sigma of 100.
    assert abs(len(control) - n * 0.5) <= 3 * math.sqrt(n * 0.25), len(control)
    for i, (cid, cohort) in enumerate(cohorts.items()):
        # The split is the hash of the conversation key (keyed with the gateway's secret), nothing else.
        point = control_point(conversation_key(ORG, body, cid), b"cohort-test-secret")
        assert (cohort == "control") == (point < 0.5), cid
        if cohort == "control":
            assert sent[i] == body, f"control conversation {cid} was not forwarded whole"
        else:
            assert len(sent[i]["messages"]) < len(body["messages"]) or sent[i]["messages"] != body["messages"]
    assert sample(samples, "sieve_cohort_requests_total", org=ORG, cohort="control", outcome="passthrough") \
        == len(control)
    assert sample(samples, "sieve_cohort_requests_total", org=ORG, cohort="pruned", outcome="pruned") \
        == n - len(control)
    original = sample(samples, "sieve_cohort_prompt_tokens_total", org=ORG, cohort="control", kind="original")
    assert original > 0
    assert sample(samples, "sieve_cohort_prompt_tokens_total", org=ORG, cohort="control", kind="forwarded") == original
    assert sample(samples, "sieve_cohort_prompt_tokens_total", org=ORG, cohort="pruned", kind="forwarded") < \
        sample(samples, "sieve_cohort_prompt_tokens_total", org=ORG, cohort="pruned", kind="original")


def test_control_conversation_reason_is_in_the_audit_not_the_prune_report(tmp_path, upstream) -> None:
    """The cohort shows once a conversation is forwarded (its audit line), never before: a dry run
    decides every conversation as a pruned one (issue 28: probes found control ids, then sent their
    largest requests under them, unpruned)."""
    audit = tmp_path / "audit.jsonl"
    body = {"model": MODEL, "messages": agent_history(12)}
    # Everything in control: every message's reason names the control group.
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, audit_log=str(audit),
                                policies_dir=policies(tmp_path, "control_share: 1.0\n"))) as gw:
        report = gw.post("/v1/prune", json=body).json()["report"]
        post(gw, body)
        gw.wait_idle()
    assert report["cohort"] == "pruned" and report["saved_tokens"] > 0
    assert not any("control group" in m["reason"] for m in report["messages"])
    line = read_jsonl(audit)[-1]
    assert line["cohort"] == "control" and line["tokens"]["saved"] == 0
    assert all("control group" in d["reason"] for d in line["decisions"])


def test_shadow_policy_forwards_bodies_as_sent_and_measures_would_be_savings(tmp_path, upstream, capsys) -> None:
    audit = tmp_path / "audit.jsonl"
    # The window is the last units alone (no tool exchange joins it), so the steps below
    # land where the comment on the modes says.
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, audit_log=str(audit),
                                policies_dir=policies(tmp_path, "mode: shadow\nprotect_last_tool_units: 0\n", 8000))) as gw:
        before = metrics(gw)
        bodies = [{"model": MODEL, "messages": agent_history(steps)} for steps in (10, 11, 12, 16)]
        for body in bodies:
            raw = json.dumps(body, separators=(",", ":")).encode()
            got = gw.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
            assert got.status_code == 200, got.text
            assert got.headers["x-sieve-saved-tokens"] == "0"
        after = metrics(gw)
    sent = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    assert [r.json for r in sent] == bodies  # forwarded whole, every one
    assert [r.body for r in sent] == [json.dumps(b, separators=(",", ":")).encode() for b in bodies]

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("sieve_requests_total", org=ORG, model=MODEL, outcome="passthrough") == 4
    assert delta("sieve_cohort_requests_total", org=ORG, cohort="shadow", outcome="passthrough") == 4
    original = delta("sieve_prompt_tokens_original_total", org=ORG, model=MODEL)
    assert delta("sieve_prompt_tokens_forwarded_total", org=ORG, model=MODEL) == original  # nothing really saved
    would_forward = delta("sieve_shadow_prompt_tokens_total", org=ORG, model=MODEL)
    assert 0 < would_forward < original
    billed = delta("sieve_cohort_cost_usd_total", org=ORG, cohort="shadow")
    assert 0 < delta("sieve_shadow_cost_usd_total", org=ORG, model=MODEL) < billed
    lines = [line for line in read_jsonl(audit) if line["cohort"] == "shadow"]
    assert len(lines) == 4
    for line in lines:
        shadow = line["shadow"]
        assert line["tokens"]["saved"] == 0
        assert shadow["saved_tokens"] == line["tokens"]["original"] - shadow["forwarded_tokens"] > 0
        assert shadow["net_usd"] > 0 and shadow["would_be_usd"] < shadow["billed_usd"]
        assert any(d["action"] != "kept" for d in line["decisions"])  # what would have been forwarded
    # The shadow's own frozen plan (each step adds ~1.3k tokens, the epoch cut to ~4k of an
    # 8k target): the first request decides anew, the next replays it, the third opens its turn
    # too close to the target for a step like the last ones (the epoch its loop would need comes
    # at that boundary: gateway.pruning.turns), and the last (four steps more) passes the target:
    # two new epochs, each of which would have moved the cached prefix.
    assert [line["shadow"]["mode"] for line in lines][1:] == ["frozen", "epoch", "epoch"]
    assert [line["shadow"]["prefix_changed"] for line in lines] == [False, False, True, True]
    assert delta("sieve_shadow_prefix_changes_total", org=ORG) == 2
    # sieve replay on that audit log (no content in it) prints the same sums.
    assert main(["replay", str(audit)]) == 0
    row = next(r.split() for r in capsys.readouterr().out.splitlines() if r.startswith(ORG))
    original, forwarded = sum(line["tokens"]["original"] for line in lines), \
        sum(line["shadow"]["forwarded_tokens"] for line in lines)
    assert row[:5] == [ORG, MODEL, "4", str(original), str(forwarded)]
    net = sum(line["shadow"]["net_usd"] for line in lines)
    assert float(row[9]) == pytest.approx(net, abs=1e-4) and row[10] == "50.0%"  # two prefix changes in four


@pytest.mark.parametrize("fmt", ["messages", "responses"])
def test_shadow_policy_forwards_messages_and_responses_bodies_as_sent(tmp_path, providers, fmt) -> None:
    """The other ingresses go through the same proxy sequence: the same shadow path."""
    audit = tmp_path / "audit.jsonl"
    chat = {"model": "claude-sonnet-4-5" if fmt == "messages" else MODEL, "messages": agent_history(12)}
    body = chat_to_messages(chat) if fmt == "messages" else chat_to_responses(chat)
    if fmt == "messages":
        body["max_tokens"] = 256
    settings = format_settings(providers, audit_log=str(audit),
                               policies_dir=policies(tmp_path, "mode: shadow\n"))
    with GatewayServer(settings) as gw:
        raw = json.dumps(body, separators=(",", ":")).encode()
        got = gw.post(f"/v1/{fmt}", content=raw, headers={"content-type": "application/json",
                                                         "authorization": "Bearer sk-client"})
        assert got.status_code == 200, got.text
        gw.wait_idle()
    sent = [r for r in providers.requests if r.path.endswith(f"/{fmt}")]
    assert [r.body for r in sent] == [raw]
    line = read_jsonl(audit)[-1]
    assert line["cohort"] == "shadow" and line["tokens"]["saved"] == 0
    assert 0 < line["shadow"]["forwarded_tokens"] < line["tokens"]["original"]


def test_shadow_decision_is_not_on_the_forwarded_requests_path(tmp_path, upstream) -> None:
    """A shadow decision whose scorer model takes 1.5 s: the client has its answer long before,
    and the decision still lands in the audit line once it is made."""
    audit = tmp_path / "audit.jsonl"
    slow = lambda ids, attempt, req: Reply(content=answer({i: 1 for i in ids}), delay_s=1.5)  # noqa: E731
    with ScorerModel(slow) as scorer:
        folder = policies(tmp_path, f"mode: shadow\nscorer: llm\nscorer_api_base: {json.dumps(scorer.base_url)}\n"
                                    "scorer_min_history_tokens: 0\nscorer_cost_check: false\n"
                                    "scorer_deadline_s: 5\nscorer_batch_timeout_s: 4\n", strategy="relevance")
        with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=folder,
                                    audit_log=str(audit))) as gw:
            body = {"model": MODEL, "messages": agent_history(12)}
            started = time.perf_counter()
            post(gw, body)
            answered_s = time.perf_counter() - started
            gw.wait_idle(timeout_s=10)
    assert answered_s < 1.0, f"the client waited {answered_s:.2f} s: the decision was on its path"
    assert [r.json for r in upstream.requests if r.path.endswith("/chat/completions")] == [body]
    assert scorer.batches(), "the shadow decision asked the scorer model"
    line = read_jsonl(audit)[-1]
    assert line["cohort"] == "shadow" and line["shadow"]["saved_tokens"] > 0
    assert line["timings"]["overhead_ms"] < 1000  # waiting for the decision is no gateway overhead
    # The scorer's dollars were spent for real: in the cost record as in the would-be saving.
    assert line["cost"]["scorer_usd"] == line["shadow"]["scorer_usd"] > 0
    assert line["timings"]["scorer_ms"] >= 1500


def test_shadow_stream_is_relayed_and_its_usage_prices_the_decision(tmp_path, upstream) -> None:
    audit = tmp_path / "audit.jsonl"
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, audit_log=str(audit),
                                policies_dir=policies(tmp_path, "mode: shadow\n"))) as gw:
        messages = agent_history(12)
        with openai_client(gw).chat.completions.with_streaming_response.create(
                model=MODEL, messages=messages, stream=True) as raw:
            chunks = list(raw.parse())
        gw.wait_idle()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok"
    assert all(c.usage is None for c in chunks)  # the usage Sieve asked for is hidden again
    sent = [r.json for r in upstream.requests if r.path.endswith("/chat/completions")]
    # As it came, plus the usage every forwarded chat stream asks for.
    assert sent == [{"model": MODEL, "messages": messages, "stream": True,
                     "stream_options": {"include_usage": True}}]
    line = read_jsonl(audit)[-1]
    assert line["cohort"] == "shadow" and line["shadow"]["priced"]
    assert 0 < line["shadow"]["would_be_usd"] < line["shadow"]["billed_usd"]
