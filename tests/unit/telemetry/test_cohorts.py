"""Cohorts (control share, shadow policy), the history's signals, and a shadow decision's would-be bill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.config.policies import load_policies
from gateway.pruning.cohort import cohort_of, control_point
from gateway.pruning.policy import Policy
from gateway.pruning.vocabulary import Cohort, PolicyMode
from gateway.telemetry.signals import conversation_signals
from gateway.telemetry.pricing import PriceBook
from gateway.telemetry.savings import shadow_savings
from gateway.telemetry.usage import Usage


def test_cohort_is_a_stable_hash_of_the_key() -> None:
    keys = [f"acme:{i:032x}" for i in range(4000)]
    half = Policy(control_share=0.5)
    assert [cohort_of(half, k) for k in keys] == [cohort_of(half, k) for k in keys]
    share = sum(cohort_of(half, k) is Cohort.CONTROL for k in keys) / len(keys)
    assert abs(share - 0.5) < 3 * (0.25 / len(keys)) ** 0.5
    assert all(0 <= control_point(k) < 1 for k in keys)
    assert {cohort_of(Policy(), k) for k in keys} == {Cohort.PRUNED}
    assert {cohort_of(Policy(control_share=1.0), k) for k in keys} == {Cohort.CONTROL}
    shadow = Policy(mode=PolicyMode.SHADOW, control_share=0.5)
    assert {cohort_of(shadow, k) for k in keys} == {Cohort.SHADOW, Cohort.CONTROL}
    # The control group of a shadow policy is the very same conversations.
    assert [cohort_of(shadow, k) is Cohort.CONTROL for k in keys] == [cohort_of(half, k) is Cohort.CONTROL
                                                                       for k in keys]


def test_the_cohort_hash_is_keyed_with_the_gateways_secret() -> None:
    """Issue 28: with a plain hash a client could compute, from the conversation ids it chooses,
    which fall in the control group; keyed with a secret it cannot (another secret, another split)."""
    keys = [f"acme:{i:032x}" for i in range(2000)]
    half = Policy(control_share=0.5)
    plain = [cohort_of(half, k) for k in keys]
    keyed = [cohort_of(half, k, b"gateway secret") for k in keys]
    assert keyed == [cohort_of(half, k, b"gateway secret") for k in keys]  # stable under one secret
    agree = sum(a == b for a, b in zip(plain, keyed)) / len(keys)
    assert abs(agree - 0.5) < 0.05  # independent of the unkeyed split: what a client computes tells nothing
    other = [cohort_of(half, k, b"another secret") for k in keys]
    assert abs(sum(a == b for a, b in zip(keyed, other)) / len(keys) - 0.5) < 0.05


@pytest.mark.parametrize("text, message", [
    ("mode: dry\n", "mode must be one of prune, shadow"),
    ("control_share: 1.5\n", "control_share must be in [0, 1]"),
    ("control_share: -0.1\n", "control_share must be in [0, 1]"),
    ("control_share: half\n", "control_share must be float"),
])
def test_policy_file_checks_the_new_fields(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_policies(tmp_path)


def test_policy_file_reads_the_new_fields(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("mode: shadow\ncontrol_share: 0.05\n")
    policy = load_policies(tmp_path)["p"]
    assert policy.mode is PolicyMode.SHADOW and policy.control_share == 0.05


def _call(name: str, args: dict | str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": args if isinstance(args, str)
                                               else json.dumps(args)}}


def test_signals_count_steps_and_repeated_calls_of_the_newest_turn() -> None:
    messages = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "tool_calls": [_call("get_order", {"id": "#W1", "full": True})]},
        {"role": "tool", "content": "x"},
        {"role": "assistant", "tool_calls": [_call("get_user", {"id": "u1"})]},
        {"role": "tool", "content": "y"},
        # Same name and arguments (other key order and spacing) again, a new call, a new argument.
        {"role": "assistant", "tool_calls": [_call("get_order", '{"full": true,  "id": "#W1"}'),
                                             _call("get_product", {"id": "p"}), _call("get_user", {"id": "u2"})]},
        {"role": "tool", "content": "z"},
    ]
    signals = conversation_signals(messages)
    assert (signals.steps, signals.tool_calls, signals.repeated_tool_calls) == (3, 3, 1)
    assert conversation_signals(messages[:2]).steps == 0
    assert conversation_signals(messages[:4]).repeated_tool_calls == 0  # the first call repeats nothing
    text = [{"role": "assistant", "tool_calls": [_call("sh", "ls -la")]}] * 2
    assert conversation_signals(text).repeated_tool_calls == 1  # arguments that are not JSON compare as text


def test_shadow_savings_lean_against_pruning() -> None:
    prices = PriceBook.from_litellm()
    usage = Usage(prompt_tokens=10_000, completion_tokens=100, cached_read_tokens=6_000)
    kept = shadow_savings(prices, model="gpt-4o-mini", original_tokens=9_000, forwarded_tokens=5_000,
                          usage=usage, prefix_changed=False)
    moved = shadow_savings(prices, model="gpt-4o-mini", original_tokens=9_000, forwarded_tokens=5_000,
                           usage=usage, prefix_changed=True)
    assert kept.priced and kept.saved_tokens == 4_000
    assert kept.would_be_prompt_tokens == 6_000 and kept.would_be_cached_tokens == 2_000  # removed from the cache
    assert moved.would_be_cached_tokens == 0
    assert 0 < moved.net_usd < kept.net_usd < kept.billed_usd
    none = shadow_savings(prices, model="gpt-4o-mini", original_tokens=9_000, forwarded_tokens=9_000,
                          usage=usage, prefix_changed=False)
    assert none.net_usd == pytest.approx(0.0)
    unpriced = shadow_savings(prices, model="no-such-model", original_tokens=9_000, forwarded_tokens=5_000,
                              usage=usage, prefix_changed=False, scorer_usd=0.01)
    assert not unpriced.priced and unpriced.net_usd == pytest.approx(-0.01)


def test_cohort_figures_move_only_for_forwarded_requests() -> None:
    from gateway.telemetry.signals import ConversationSignals
    from gateway.telemetry.metrics import Metrics, Outcome
    from gateway.telemetry.recording import CohortFigures, LabelBounds, RequestFigures, record_request
    from tests.support import metric_value

    metrics, bounds = Metrics(), LabelBounds(orgs=["acme"], models=["gpt-4o-mini"])
    figures = CohortFigures(Cohort.CONTROL, ConversationSignals(steps=3, tool_calls=2, repeated_tool_calls=1),
                            billed_prompt_tokens=900, cached_tokens=512, billed_usd=0.002)
    record_request(metrics, bounds, RequestFigures("acme", "gpt-4o-mini", Outcome.PASSTHROUGH, 800, 800,
                                                   cohort=figures))
    record_request(metrics, bounds, RequestFigures("acme", "gpt-4o-mini", Outcome.BUDGET_REJECTED, cohort=figures))
    labels = {"org": "acme", "cohort": "control"}
    assert metric_value(metrics, "sieve_cohort_requests_total", **labels, outcome="passthrough") == 1
    assert metric_value(metrics, "sieve_cohort_requests_total", **labels, outcome="budget_rejected") == 0
    assert metric_value(metrics, "sieve_cohort_prompt_tokens_total", **labels, kind="cached") == 512
    assert metric_value(metrics, "sieve_cohort_cost_usd_total", **labels) == pytest.approx(0.002)
    assert metric_value(metrics, "sieve_repeat_tool_calls_total", **labels) == 1
    assert metric_value(metrics, "sieve_conversation_steps_sum", **labels) == 3
    with pytest.raises(ValueError):
        record_request(metrics, bounds, RequestFigures("acme", "gpt-4o-mini", Outcome.PASSTHROUGH,
                                                       cohort=CohortFigures("treatment")))  # type: ignore[arg-type]
