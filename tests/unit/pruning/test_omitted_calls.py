"""Omission markers list the short calls of the span they stand for (``gateway.pruning.omitted_calls``)."""

from __future__ import annotations

import json

from gateway.pruning.compression import OMITTED_PREFIX, dropped_marker, marker_calls, marker_ids
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.omitted_calls import MAX_CALL_TOKENS, call_lines, omitted_calls, says_more_than_ids
from gateway.pruning.policy import Policy
from gateway.wire.formats.merged_markers import merged_marker_text
from tests.support.conversations import call, reading_loop
from tests.support.pure_prune import COUNTER, markers, run


def test_a_call_line_is_the_tools_name_and_its_arguments_as_sent():
    message = {"role": "assistant", "content": None, "tool_calls": [
        call("read_file", {"path": "a/b.py", "start_line": 120, "end_line": 160}, "x"),
        {"id": "y", "type": "function", "function": {"name": "shell", "arguments": "ls -la\nrm x"}}]}
    # Any tool, any schema: nothing in the arguments is parsed; a line break would run
    # two calls together, so such a call has no line.
    assert call_lines(message) == ['read_file {"path": "a/b.py", "start_line": 120, "end_line": 160}']
    assert call_lines({"role": "assistant", "content": "no calls"}) == []


def test_a_call_says_more_than_its_ids_when_it_holds_a_number_none_of_them_carries():
    assert says_more_than_ids('read_file {"path": "a/b.py", "start_line": 120, "end_line": 160}')
    assert says_more_than_ids("bash {\"command\": \"sed -n '50,55p' django/forms/models.py\"}")
    # The ids say these at less cost: a path, an order id, a command without numbers.
    assert not says_more_than_ids('get_order_details {"order_id": "#W2378156"}')
    assert not says_more_than_ids('bash {"command": "cat src/parser/mod2.py"}')
    assert not says_more_than_ids('bash {"command": "ls -R"}')


def test_the_newest_calls_are_listed_within_the_room_in_the_order_made():
    made = [{"role": "assistant", "content": None,
             "tool_calls": [call("view", {"path": f"f{i}.py", "lines": [10 * i + 5, 10 * i + 9]}, f"c{i}")]}
            for i in range(6)]
    lines = [call_lines(m)[0] for m in made]
    one = COUNTER.count_text(lines[0]) + 1
    room = COUNTER.count_text("; calls:\n") + 3 * one
    chosen = omitted_calls(reversed(made), set(), room, COUNTER.count_text)
    assert chosen == lines[3:]  # the three newest, oldest first
    # One the forward still makes is not listed again, nor one made twice.
    assert omitted_calls(reversed(made + made[-1:]), {lines[5]}, room, COUNTER.count_text) == lines[2:5]
    # A long call is content the agent wrote, not a locator.
    long = {"role": "assistant", "content": None,
            "tool_calls": [call("write", {"path": "g.py", "text": " ".join(f"x{i} = {i}" for i in range(80))}, "w")]}
    assert COUNTER.count_text(call_lines(long)[0]) > MAX_CALL_TOKENS
    assert omitted_calls([long], set(), 10_000, COUNTER.count_text) == []


def test_a_marker_lists_its_calls_before_its_ids_and_both_read_back():
    calls = ["bash {\"command\": \"sed -n '120,160p' a.py\"}", 'view {"path": "b.py", "range": [1, 9]}']
    marker = dropped_marker(["a.py", "#W1"], calls)
    assert marker["content"].startswith(OMITTED_PREFIX + "; calls:\n")
    assert marker_calls(marker) == calls and marker_ids(marker) == ["a.py", "#W1"]
    assert marker_calls(dropped_marker((), calls)) == calls and marker_ids(dropped_marker((), calls)) == []
    assert marker_calls(dropped_marker(["a.py"])) == []


def test_two_adjacent_markers_merge_their_calls_too():
    one = dropped_marker(["a.py"], ['view {"path": "a.py", "range": [1, 9]}'])["content"]
    two = dropped_marker(["b.py"], ['view {"path": "b.py", "range": [5, 7]}', 'view {"path": "a.py", "range": [1, 9]}'])
    merged = {"role": "user", "content": merged_marker_text(one, two["content"])}
    assert marker_calls(merged) == ['view {"path": "a.py", "range": [1, 9]}', 'view {"path": "b.py", "range": [5, 7]}']
    assert marker_ids(merged) == ["a.py", "b.py"]


def test_the_line_ranges_an_agent_read_survive_its_dropped_views_within_the_target():
    messages = reading_loop(24)
    target = 2500
    result = run(messages, target_tokens=target)
    assert result.target_rule_tokens <= target
    dropped = [messages[j] for j, a in enumerate(result.message_actions) if a == "dropped"]
    assert dropped
    listed = [line for m in markers(result) for line in marker_calls({"role": "user", "content": m})]
    # The newest dropped views' calls stand in the marker, line numbers and all.
    newest = [m for m in dropped if m["role"] == "assistant"][-1]
    read_from = json.loads(newest["tool_calls"][0]["function"]["arguments"])["start_line"]
    assert f'"start_line": {read_from}' in "\n".join(str(m.get("content")) for m in result.request["messages"])
    assert call_lines(newest)[0] in listed
    assert '"start_line": ' in listed[-1] and all(line.startswith("read_file {") for line in listed)


def test_a_marker_with_calls_is_replayed_byte_for_byte_until_the_next_epoch():
    policy = Policy(target_tokens=3000, min_prompt_tokens=0, min_messages=0)
    state, seen, replayed = None, [], 0
    for step in range(2, 40):
        result = run(reading_loop(step + 1), policy, state=state)
        state = FrozenPlan.from_bytes(result.state.to_bytes())
        assert result.target_rule_tokens <= 3000
        now = markers(result)
        if result.mode == "frozen" and seen:
            assert now == seen[-1]  # the marker, its calls included, as forwarded before
            replayed += any("; calls:\n" in m for m in now)
        seen.append(now)
    assert replayed >= 3
