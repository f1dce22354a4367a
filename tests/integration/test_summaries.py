"""Optional summaries (policy `summaries: true`): the scorer model summarises an omitted span,
the summary stands in the marker's place and stays frozen with the other decisions."""

from __future__ import annotations

import orjson
import pytest

from gateway.pruning.compression import SUMMARY_PREFIX, is_omission_marker
from tests.support.conversations import agent_history, reading_loop
from tests.support.fake_upstream import FakeUpstream, Reply

SUMMARY = ("Goal:\n- exchange the lamp in order #W1000001\nConfirmed decisions:\n- none\n"
           "Constraints:\n- never refund to a gift card\nKey tool results:\n- order #W1000002: sku 700201\n"
           "Open questions:\n- none")
HEADERS = {"x-sieve-conversation-id": "sum-1", "x-sieve-target-tokens": "4000"}


@pytest.fixture
def scorer_model(module_upstream: FakeUpstream) -> FakeUpstream:
    """The model that writes summaries: this module's own fake, beside the shared one the gateway forwards to."""
    return module_upstream


@pytest.fixture
def gw(start_gateway, scorer_model, tmp_path):
    (tmp_path / "default.yaml").write_text(
        f"summaries: true\nscorer_api_base: {scorer_model.base_url}\nscorer_model: gpt-4o-mini\n")
    return start_gateway(policies_dir=tmp_path)


def _sent(upstream) -> list[dict]:
    return orjson.loads(upstream.requests[-1].body)["messages"]


def test_omitted_span_is_summarised_and_frozen(gw, upstream, scorer_model):
    scorer_model.enqueue(Reply(content=SUMMARY, usage={"prompt_tokens": 900, "completion_tokens": 60,
                                                        "total_tokens": 960}))
    history = agent_history(25)
    r = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history}, headers=HEADERS)
    assert r.status_code == 200
    sent = _sent(upstream)
    summaries = [m for m in sent if str(m.get("content")).startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1 and "#W1000001" in summaries[0]["content"]
    assert not any(is_omission_marker(m) for m in sent)
    # The ids the marker held lead the summary, whatever the model wrote.
    first_line = summaries[0]["content"].splitlines()[1]
    assert first_line.startswith("Ids: #W") and len(first_line.split()) > 3
    assert int(r.headers["x-sieve-forwarded-tokens"]) <= 4000
    asked = scorer_model.requests[-1].json
    assert "REMOVED MESSAGES" in asked["messages"][1]["content"]
    # The next turn replays the summary byte for byte and asks the model nothing.
    turn = [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "ok"}]
    before = len(scorer_model.requests)
    gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history + turn}, headers=HEADERS)
    again = _sent(upstream)
    assert summaries[0] in again and again[: again.index(summaries[0]) + 1] == sent[: sent.index(summaries[0]) + 1]
    assert len(scorer_model.requests) == before
    gw.wait_idle()
    text = gw.get("/metrics").text
    cost = [line for line in text.splitlines() if line.startswith("sieve_cost_usd_total") and 'kind="scorer"' in line]
    assert cost and float(cost[0].rsplit(" ", 1)[1]) > 0


def test_the_calls_a_marker_listed_lead_the_summary(gw, upstream, scorer_model):
    # An agent's dropped reads of line ranges: the marker listed its calls, and the summary
    # that replaces it keeps them, whatever the model wrote.
    scorer_model.enqueue(Reply(content="Goal:\n- fix the parser", usage={"prompt_tokens": 900, "completion_tokens": 9,
                                                                        "total_tokens": 909}))
    history = reading_loop(30)
    r = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history},
                headers={"x-sieve-conversation-id": "sum-calls", "x-sieve-target-tokens": "4000"})
    assert r.status_code == 200
    summaries = [m["content"] for m in _sent(upstream) if str(m.get("content")).startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1
    lines = summaries[0].splitlines()
    assert lines[1] == "Calls:" and lines[2].startswith('read_file {"path": "src/parser/mod')
    assert '"start_line": ' in lines[2] and int(r.headers["x-sieve-forwarded-tokens"]) <= 4000


def test_scorer_failure_keeps_the_plain_marker(gw, upstream, scorer_model):
    scorer_model.enqueue(Reply(status=500))
    r = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": agent_history(25)},
                headers={**HEADERS, "x-sieve-conversation-id": "sum-2"})
    assert r.status_code == 200
    assert any(is_omission_marker(m) for m in _sent(upstream))  # the marker, with its ids
    assert 'sieve_scorer_failures_total{reason="http_error"} 1.0' in gw.get("/metrics").text
