"""The scorer model's answer, read leniently; the prompt, rendered deterministically."""

from __future__ import annotations

import json

import pytest

from gateway.pruning.conversation import build_conversation
from gateway.pruning.tokens import TokenCounters
from gateway.scorers.parsing import ScoreParseError, parse_scores
from gateway.scorers.prompt import SYSTEM_PROMPT, UnitView, batch_messages, context_key, head_tail

IDS = [3, 4, 7]
GOOD = {3: (5, "order id"), 4: (1, "thanks"), 7: (2, "superseded")}
ITEMS = [{"id": i, "score": s, "reason": r} for i, (s, r) in GOOD.items()]


@pytest.mark.parametrize("text", [
    json.dumps(ITEMS),
    json.dumps({"scores": ITEMS}),
    json.dumps({"results": ITEMS}),
    json.dumps({"whatever": ITEMS}),
    "```json\n" + json.dumps({"scores": ITEMS}) + "\n```",
    "```\n" + json.dumps(ITEMS, indent=2) + "\n```",
    "Sure! Here are the scores:\n" + json.dumps(ITEMS) + "\nHope this helps.",
    "\n".join(json.dumps(i) for i in ITEMS),
    "```jsonl\n" + "\n".join(json.dumps(i) + "," for i in ITEMS) + "\n```",
    json.dumps([{"id": str(i), "score": str(s), "reason": r} for i, (s, r) in GOOD.items()]),
    json.dumps([{"id": f"[{i}]", "score": f"{s}/5", "reason": r} for i, (s, r) in GOOD.items()]),
    json.dumps([{"message_id": f"u{i}", "rating": float(s), "reason": r} for i, (s, r) in GOOD.items()]),
    json.dumps([[i, s, r] for i, (s, r) in GOOD.items()]),
])
def test_accepted_shapes(text):
    parsed = parse_scores(text, IDS)
    assert parsed.ok and parsed.scores == GOOD


def test_id_mapping_shape():
    parsed = parse_scores(json.dumps({"3": 5, "4": {"score": 1, "reason": "thanks"}, "7": "2"}), IDS)
    assert parsed.ok and parsed.scores == {3: (5, ""), 4: (1, "thanks"), 7: (2, "")}


def test_missing_extra_and_duplicate_ids_are_reported():
    parsed = parse_scores(json.dumps(ITEMS[:2] + [{"id": 99, "score": 3}, {"id": 3, "score": 1}]), IDS)
    assert not parsed.ok
    assert parsed.missing == [7] and parsed.extra == [99] and parsed.duplicates == [3]
    assert parsed.scores[3] == (5, "order id")  # the first answer for an id stands


@pytest.mark.parametrize("bad_score", [0, 6, 10, "high", None, True])
def test_a_score_off_the_scale_counts_as_missing(bad_score):
    items = ITEMS[:2] + [{"id": 7, "score": bad_score}]
    parsed = parse_scores(json.dumps(items), IDS)
    assert parsed.missing == [7] and not parsed.ok


@pytest.mark.parametrize("text", ["", "I cannot rate these messages.", "```\nnope\n```", '{"scores": [{"id": 3,',
                                  json.dumps({"note": "all important"}), json.dumps([{"score": 4}])])
def test_garbage_raises(text):
    with pytest.raises(ScoreParseError):
        parse_scores(text, IDS)


def test_reasons_are_flattened_and_cut():
    parsed = parse_scores(json.dumps([{"id": 3, "score": 4, "reason": "a\n  b " + "x" * 200}]), [3])
    assert parsed.scores[3][1].startswith("a b x") and len(parsed.scores[3][1]) == 80


# -- the prompt -----------------------------------------------------------------

COUNTER = TokenCounters().for_model("gpt-4o-mini")
MESSAGES = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Exchange the lamp in order #W1. Never refund to a gift card."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "#W1"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "order #W1:\n  lamp, red,   $30 " + "filler " * 400},
    {"role": "user", "content": "Is the blue one in stock?"},
]


def conv():
    return build_conversation(MESSAGES, COUNTER.count_message)


def test_unit_lines_show_id_role_type_tool_and_a_head_and_tail():
    view = UnitView.of(conv(), 2, max_chars=300)
    line = view.line()
    assert line.startswith('[2] (assistant/tool call + result, tool: get_order) call get_order({"order_id": "#W1"})')
    assert "| result: order #W1: lamp, red, $30 filler" in line     # whitespace flattened
    assert "chars cut]" in line and line.endswith("filler")
    assert len(view.text) < 360


def test_head_tail():
    assert head_tail("short", 10) == "short"
    cut = head_tail("a" * 60 + "b" * 40, 30)
    assert cut.startswith("a" * 20) and cut.endswith("b" * 10) and "[70 chars cut]" in cut


def test_batch_prompt_is_deterministic_and_separates_goal_and_step():
    c = conv()
    views = [UnitView.of(c, 2, 1000)]
    first = batch_messages(c, views, [3], context_chars=500)
    assert first == batch_messages(conv(), [UnitView.of(conv(), 2, 1000)], [3], context_chars=500)
    assert first[0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = first[1]["content"]
    assert "FINAL GOAL (with every hard requirement):\nYou are a support agent. Exchange the lamp" in user
    assert "CURRENT STEP (the newest user request):\nIs the blue one in stock?" in user
    assert "RECENT CONTEXT" in user and "(user/message) Is the blue one in stock?" in user
    assert user.endswith("MESSAGES TO SCORE:\n" + views[0].line())
    assert "JSON" in SYSTEM_PROMPT  # json_object mode requires the word in the prompt


def test_cache_context_changes_with_goal_step_and_model():
    base = context_key("m", conv())
    assert base == context_key("m", conv())
    assert base != context_key("other", conv())
    edited = [dict(m) for m in MESSAGES]
    edited[-1]["content"] = "And the green one?"
    assert base != context_key("m", build_conversation(edited, COUNTER.count_message))
    # the unit's own hash ignores its position
    a = UnitView.of(conv(), 2, 1000)
    assert a.content_hash == UnitView(9, a.label, a.text).content_hash


# -- policy fields ----------------------------------------------------------------

@pytest.mark.parametrize("line,message", [("scorer: gpt\n", "scorer must be one of local, embedding, llm, hybrid"),
                                          ("embedding_weight: 1.5\n", "embedding_weight must be in"),
                                          ("scorer_fallback: drop\n", "scorer_fallback must be one of local, keep"),
                                          ("scorer_batch_size: 0\n", "scorer_batch_size must be positive"),
                                          ("scorer_deadline_s: fast\n", "scorer_deadline_s must be float")])
def test_scorer_policy_fields_are_checked(tmp_path, line, message):
    from gateway.errors import ConfigError
    from gateway.config.policies import load_policies

    (tmp_path / "default.yaml").write_text("scorer: llm\n" + line)
    with pytest.raises(ConfigError, match=message):
        load_policies(tmp_path)


def test_scorer_policy_defaults_are_local_and_safe(tmp_path):
    from gateway.config.policies import load_policies

    (tmp_path / "default.yaml").write_text("scorer: hybrid\nscorer_api_base: http://127.0.0.1:8000/v1\n")
    policy = load_policies(tmp_path)["default"]
    assert policy.scorer == "hybrid" and policy.scorer_batch_size == 12 and policy.scorer_deadline_s == 1.5
    assert policy.scorer_fallback == "local" and policy.scorer_cost_check
    from gateway.pruning.policy import Policy

    assert Policy().scorer == "local"
