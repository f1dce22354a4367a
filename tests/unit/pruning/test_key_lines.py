"""Key lines in masks: the few lines of a masked output that bear on the current step."""

from __future__ import annotations

import json

from gateway.pruning.conversation import build_conversation
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.key_lines import MAX_KEY_LINES, current_step, focus_words, key_lines, output_rarity
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.protection import protect
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters

COUNTER = TokenCounters().for_model("gpt-4o-mini")
SCORER = LocalScorer()
MASK = "[sieve: masked"


def lines_for(text: str, step: str, others: tuple[str, ...] = ()) -> list[str]:
    focus = focus_words(step)
    outputs = [text.lower(), *(o.lower() for o in others)]
    return key_lines(text, text.lower(), output_rarity(focus, outputs))


def numbered(start: int, rows: list[str]) -> str:
    return "\n".join(f"{n:6d}\t{row}" for n, row in enumerate(rows, start))


def source(module: str, first: int, symbol: str) -> str:
    """A read of a code file: filler lines, one definition of ``symbol``, one call of it."""
    rows = [f"    total = compute(total, {module}, step)" for _ in range(60)]
    rows[20] = f"def {symbol}(self, limit: int) -> str:"
    rows[41] = f"        return self.{symbol}(limit - 1)"
    return numbered(first, rows)


def test_the_lines_holding_the_steps_rare_words_are_kept_verbatim_in_order():
    text = source("alpha", 700, "_describe_range")
    step = "Explain what `_describe_range` does. grep: click/types.py:720: def _describe_range(self, limit: int) -> str:"
    kept = lines_for(text, step, others=("unrelated output", "another one"))
    assert kept[0] == "   720\tdef _describe_range(self, limit: int) -> str:"
    assert all(line in text.splitlines() for line in kept) and len(kept) <= MAX_KEY_LINES
    assert [text.splitlines().index(line) for line in kept] == sorted(text.splitlines().index(line) for line in kept)


def test_no_focus_word_no_lines_and_a_word_everywhere_locates_nothing():
    text = source("alpha", 1, "parse_header")
    assert lines_for(text, "Run the whole test suite please.") == []
    # "compute" is on every line of the output: it names a kind of line, not one line.
    assert lines_for(text, "What does compute do?") == []
    # A word in most of the conversation's outputs is no locator either.
    assert lines_for(text, "look at parse_header", others=("parse_header here",) * 6) == []


def test_a_json_document_on_one_line_is_cut_into_its_records():
    order = {"order_id": "#A-17", "address": {"line1": "12 Harbour Road", "city": "Porto", "zip": "4000-123"},
             "items": [{"name": f"Widget {k}", "sku": f"SKU{k:04d}", "price": 10.5 + k} for k in range(12)]}
    text = json.dumps(order)
    kept = lines_for(text, "Please ship it to my Porto address instead.", others=("nothing", "here", "at", "all"))
    assert kept and all(len(line) < 200 for line in kept)
    assert any("12 Harbour Road" in line and "4000-123" in line for line in kept)


def test_a_short_reply_means_what_it_answers():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix the bug"},
            {"role": "assistant", "content": "The line `if limit is not None:` in range_check is wrong. Change it?"},
            {"role": "user", "content": "Go ahead."}]
    conv = build_conversation(msgs, COUNTER.count_message)
    assert "range_check" in focus_words(current_step(conv))


def coding_history() -> list[dict]:
    """A task, five reads of different modules, then a grep naming the symbol one of them defines."""
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                        {"role": "user", "content": "tests/test_ranges.py fails. Find the cause and fix it."}]
    for k, (module, symbol) in enumerate([("core", "make_context"), ("parser", "split_opt"),
                                          ("types", "_describe_range"), ("utils", "echo_via"),
                                          ("termui", "style_text")]):
        call = {"id": f"call_{k}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"pkg/{module}.py"})}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"call_{k}", "content": source(module, 100 * (k + 1), symbol)}]
    msgs.append({"role": "user", "content": "Before we go on: where is `_describe_range` defined?"})
    call = {"id": "call_g", "type": "function",
            "function": {"name": "grep", "arguments": json.dumps({"pattern": "def _describe_range"})}}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "call_g", "content": "pkg/types.py:320:def _describe_range(self, limit: int) -> str:"}]
    return msgs


def run(messages, target: int, state=None, continued=False):
    return prune({"model": "gpt-4o-mini", "messages": messages}, Policy(), scorer=SCORER, counter=COUNTER,
                 state=state, steering=Steering(target_tokens=target), continued=continued)


def test_room_left_under_the_target_goes_to_the_key_lines_of_masks():
    history = coding_history()
    result = run(history, target=1000)
    masks = {i: m["content"] for i, m in enumerate(result.request["messages"]) if str(m.get("content")).startswith(MASK)}
    assert masks, "the old reads are masked"
    assert result.target_rule_tokens <= 1000
    assert any("   320\tdef _describe_range(self, limit: int) -> str:" in text for text in masks.values())
    # Outputs that hold nothing of the current step keep the plain mask.
    assert any("; lines:" not in text for text in masks.values())
    # A named conversation's first decision goes to the low-water mark: its room is
    # for the steps that follow, not for key lines.
    named = run(history, target=1000, continued=True)
    assert not any("; lines:" in str(m.get("content")) for m in named.request["messages"])


def test_a_mask_with_key_lines_stays_byte_identical_in_the_next_epoch():
    history = coding_history()
    first = run(history, target=1000)
    with_lines = {j: t for j, t in first.state.masked.items() if "; lines:" in t}
    assert with_lines
    # The next steps ask about something else and cross the target: the epoch keeps
    # the old prefix, and the masks in it keep the lines they were forwarded with (the
    # provider cached them), whatever the new step's focus.
    call = {"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    more = history + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_x", "content": "listing " * 900},
                      {"role": "assistant", "content": "Done."},
                      {"role": "user", "content": "Now look at style_text in termui."}]
    second = run(more, target=1000, state=FrozenPlan.from_bytes(first.state.to_bytes()))
    assert second.mode == "epoch"
    assert all(second.state.masked.get(j) == text for j, text in with_lines.items())
    n = len(first.request["messages"])
    assert second.request["messages"][:n] == first.request["messages"]
    conv = build_conversation(more, COUNTER.count_message)
    p = protect(conv, Policy(), COUNTER, 1000, prior_masks=with_lines)
    assert all(p.masked_forms[j]["content"] == text for j, text in with_lines.items())
