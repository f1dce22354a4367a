"""record_request moves the metrics by exactly the request's figures, with bounded labels; the
recorder's per-org totals (``/admin/savings``) follow the same rules."""

from __future__ import annotations

import pytest

from gateway.telemetry.metrics import Metrics
from gateway.telemetry.recording import LabelBounds, RequestFigures, RequestRecorder, record_request
from gateway.telemetry.savings import OriginalPrompt, savings_for_request
from gateway.telemetry.usage import usage_from_provider

EXACT = dict(rel=1e-12, abs=0)
TOKENS = [2000, 3000, 3000, 1000, 500, 500]
FPS = ["a", "b", "c", "d", "e", "f"]
PREVIOUS = ["a", "b", "c", "d"]


@pytest.fixture
def metrics():
    return Metrics()


BOUNDS = LabelBounds(orgs=["acme"], models=["gpt-4o-mini", "claude-haiku-4-5", "mystery-1"])


def value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0.0


def cost(metrics, model, kind, org="acme"):
    return value(metrics, "sieve_cost_usd_total", org=org, model=model, kind=kind)


def record(metrics, savings, model, *, outcome="pruned", **kw):
    args = dict(org="acme", model=model, outcome=outcome, original_tokens=savings.original_tokens,
                forwarded_tokens=savings.forwarded_tokens, completion_tokens=savings.completion_tokens,
                savings=savings, unit_actions={"kept": 5, "dropped": 1}, prune_s=0.002, scorer_s=0.01,
                upstream_s=0.5, overhead_s=0.003)
    args.update(kw)
    record_request(metrics, BOUNDS, RequestFigures(**args))


def test_openai_usage_without_cache_moves_costs_exactly(metrics, book, model_cost):
    e = model_cost["gpt-4o-mini"]
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100})
    s = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=usage, scorer_usd=2e-5)
    record(metrics, s, "gpt-4o-mini")
    i, o = e["input_cost_per_token"], e["output_cost_per_token"]
    assert cost(metrics, "gpt-4o-mini", "actual") == pytest.approx(7200 * i + 100 * o, **EXACT)
    assert cost(metrics, "gpt-4o-mini", "counterfactual") == pytest.approx(10_200 * i + 100 * o, **EXACT)
    assert cost(metrics, "gpt-4o-mini", "scorer") == pytest.approx(2e-5, **EXACT)
    labels = dict(org="acme", model="gpt-4o-mini")
    assert value(metrics, "sieve_prompt_tokens_original_total", **labels) == 10_000
    assert value(metrics, "sieve_prompt_tokens_forwarded_total", **labels) == 7000
    assert value(metrics, "sieve_completion_tokens_total", **labels) == 100
    assert value(metrics, "sieve_requests_total", outcome="pruned", **labels) == 1
    assert value(metrics, "sieve_units_total", org="acme", action="kept") == 5
    assert value(metrics, "sieve_units_total", org="acme", action="dropped") == 1
    for name in ("prune", "scorer", "upstream", "overhead"):
        assert value(metrics, f"sieve_{name}_seconds_count") == 1
    assert value(metrics, "sieve_overhead_seconds_sum") == pytest.approx(0.003)


def test_openai_usage_with_cache_moves_costs_exactly(metrics, book, model_cost):
    e = model_cost["gpt-4o-mini"]
    i, rd, o = e["input_cost_per_token"], e["cache_read_input_token_cost"], e["output_cost_per_token"]
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100,
                                 "prompt_tokens_details": {"cached_tokens": 5200}})
    s = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000, usage=usage)
    record(metrics, s, "gpt-4o-mini")
    record(metrics, s, "gpt-4o-mini")  # counters accumulate
    assert cost(metrics, "gpt-4o-mini", "actual") == pytest.approx(2 * (2000 * i + 5200 * rd + 100 * o), **EXACT)
    assert cost(metrics, "gpt-4o-mini", "counterfactual") == pytest.approx(
        2 * (1000 * i + 9200 * rd + 100 * o), **EXACT)


def test_anthropic_usage_with_cache_read_and_creation(metrics, book, model_cost):
    e = model_cost["claude-haiku-4-5"]
    i, rd, wr, o = (e["input_cost_per_token"], e["cache_read_input_token_cost"],
                    e["cache_creation_input_token_cost"], e["output_cost_per_token"])
    usage = usage_from_provider({"input_tokens": 200, "output_tokens": 100,
                                 "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 2000})
    s = savings_for_request(book, model="claude-haiku-4-5", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000,
                            usage=usage, scorer_usd=1e-4)
    record(metrics, s, "claude-haiku-4-5")
    assert cost(metrics, "claude-haiku-4-5", "actual") == pytest.approx(
        200 * i + 5000 * rd + 2000 * wr + 100 * o, **EXACT)
    # counterfactual: 9,200 read, writes capped at its 1,000 uncached tokens
    assert cost(metrics, "claude-haiku-4-5", "counterfactual") == pytest.approx(
        9200 * rd + 1000 * wr + 100 * o, **EXACT)
    assert cost(metrics, "claude-haiku-4-5", "scorer") == pytest.approx(1e-4, **EXACT)


def test_broken_prefix_shows_a_negative_net_on_the_counters(metrics, book):
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100})
    s = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000, usage=usage, scorer_usd=5e-5)
    record(metrics, s, "gpt-4o-mini")
    net = (cost(metrics, "gpt-4o-mini", "counterfactual") - cost(metrics, "gpt-4o-mini", "actual")
           - cost(metrics, "gpt-4o-mini", "scorer"))
    assert net == pytest.approx(s.net_usd, **EXACT)
    assert net < 0


def test_unpriced_model_counts_unpriced_and_only_the_scorer_cost(metrics, book):
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100})
    s = savings_for_request(book, model="mystery-1", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=usage, scorer_usd=3e-5)
    record(metrics, s, "mystery-1")
    assert value(metrics, "sieve_unpriced_requests_total", model="mystery-1") == 1
    assert metrics.registry.get_sample_value(
        "sieve_cost_usd_total", dict(org="acme", model="mystery-1", kind="actual")) is None
    assert cost(metrics, "mystery-1", "scorer") == pytest.approx(3e-5, **EXACT)
    assert value(metrics, "sieve_prompt_tokens_original_total", org="acme", model="mystery-1") == 10_000


def test_requests_that_never_went_upstream_move_no_tokens(metrics):
    record_request(metrics, BOUNDS, RequestFigures(
        org="acme", model="gpt-4o-mini", outcome="budget_rejected", original_tokens=10_000, forwarded_tokens=0,
        completion_tokens=0, savings=None, unit_actions={}, prune_s=None, scorer_s=None, upstream_s=None,
        overhead_s=0.001))
    labels = dict(org="acme", model="gpt-4o-mini")
    assert value(metrics, "sieve_requests_total", outcome="budget_rejected", **labels) == 1
    assert metrics.registry.get_sample_value("sieve_prompt_tokens_original_total", labels) is None
    assert value(metrics, "sieve_upstream_seconds_count") == 0
    assert value(metrics, "sieve_overhead_seconds_count") == 1


def test_unknown_labels_become_other(metrics):
    record_request(metrics, BOUNDS, RequestFigures(org="evil-org-123", model="user-typed-model",
                                                   outcome="passthrough", original_tokens=10, forwarded_tokens=10))
    assert value(metrics, "sieve_requests_total", org="other", model="other", outcome="passthrough") == 1


def test_dynamic_label_room_is_bounded():
    bounds = LabelBounds(orgs=["acme"], models=[], dynamic_limit=2)
    assert [bounds.model(m) for m in ("a", "b", "c", "a", "b", None)] == ["a", "b", "other", "a", "b", "other"]
    assert bounds.org("acme") == "acme" and bounds.org("zed") == "zed" and bounds.org("") == "other"


@pytest.mark.parametrize("kw", [{"outcome": "exploded"}, {"unit_actions": {"shredded": 1}}])
def test_unknown_outcome_or_action_is_a_bug(metrics, kw):
    args = dict(org="acme", model="gpt-4o-mini", outcome="ok")
    args.update(kw)
    with pytest.raises(ValueError):
        record_request(metrics, BOUNDS, RequestFigures(**args))


def test_org_totals_follow_the_counters(metrics, book):
    recorder = RequestRecorder(metrics, BOUNDS)
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100})
    s = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=usage, scorer_usd=2e-5)
    recorder.record(RequestFigures(org="acme", model="gpt-4o-mini", outcome="pruned", original_tokens=10_000,
                                   forwarded_tokens=7000, completion_tokens=100, savings=s))
    recorder.record(RequestFigures(org="acme", model="gpt-4o-mini", outcome="budget_rejected",
                                   original_tokens=10_000))
    recorder.record(RequestFigures(org="unlisted-org", model="gpt-4o-mini", outcome="passthrough",
                                   original_tokens=5, forwarded_tokens=5))
    totals = recorder.totals.of("acme")
    assert totals["requests"] == value(metrics, "sieve_requests_total", org="acme", model="gpt-4o-mini",
                                       outcome="pruned") + 1 == 2
    assert totals["tokens"] == {"prompt_original": 10_000, "prompt_forwarded": 7000, "prompt_saved": 3000,
                                "completion": 100}
    assert totals["usd"]["actual"] == cost(metrics, "gpt-4o-mini", "actual")
    assert totals["usd"]["counterfactual"] == cost(metrics, "gpt-4o-mini", "counterfactual")
    assert totals["usd"]["net_saving"] == pytest.approx(s.net_usd, **EXACT)
    assert recorder.totals.of("other")["requests"] == 1  # the same bounded label as the metrics
    assert recorder.totals.of("nobody")["requests"] == 0
