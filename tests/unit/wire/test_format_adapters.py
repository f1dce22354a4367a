"""The Messages and Responses adapters on hand-made bodies: the view they read, the native
shapes they write (masks, markers, breakpoints), and the 400s their checks give."""

from __future__ import annotations

import copy
import dataclasses

import orjson
import pytest

from gateway.errors import InvalidRequest
from gateway.pruning.compression import MASKED_PREFIX, OMITTED_PREFIX, marker_ids
from gateway.pruning import REF_HINT, with_ref
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.vocabulary import Action, Mode
from gateway.wire.formats import WireFormat, adapter_for, parse_format
from gateway.wire.formats.cache_control import cap_breakpoints
from gateway.wire.formats.merged_markers import merged_marker_texts
from tests.support.conversations import agent_history
from tests.support.formats import chat_to_messages, chat_to_responses, messages_problems, responses_problems

COUNTER = TokenCounters().for_model("claude-sonnet-4-5")
MESSAGES, RESPONSES = adapter_for(WireFormat.MESSAGES), adapter_for(WireFormat.RESPONSES)
CACHE = {"type": "ephemeral"}


def run(adapter, body, target, state=None):
    view = adapter.read(body)
    result = prune(view.body, Policy(), scorer=LocalScorer(), counter=COUNTER, state=state,
                   steering=Steering(target_tokens=target))
    return adapter.write(body, view, result), result, view


def claude_code_body(steps: int = 12) -> dict:
    """An agent history as Claude Code sends it: system blocks with a breakpoint, thinking before
    each tool use, and a breakpoint on the newest block."""
    body = chat_to_messages({"model": "claude-sonnet-4-5", "messages": agent_history(steps)})
    body["system"] = [{"type": "text", "text": body["system"], "cache_control": CACHE}]
    for k, turn in enumerate(body["messages"]):
        if turn["role"] == "assistant" and isinstance(turn["content"], list):
            turn["content"].insert(0, {"type": "thinking", "thinking": f"step {k}: look it up",
                                       "signature": f"EqQBCkgIARABGAIiQ{k}=="})
    body["messages"][-1] = {"role": "user", "content": [{"type": "text", "text": body["messages"][-1]["content"],
                                                         "cache_control": CACHE}]}
    return body


def test_messages_view_splits_turns_by_unit_and_ignores_breakpoints():
    body = {"model": "claude-sonnet-4-5", "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHE}],
            "messages": [
                {"role": "user", "content": "Check both orders."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "two lookups", "signature": "sig=="},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"id": "#W1"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_order", "input": {"id": "#W2"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                        {"type": "text", "text": "pending"}, {"type": "image", "source": {"type": "base64"}}]},
                    {"type": "text", "text": "And the refund?", "cache_control": CACHE}]}]}
    view = MESSAGES.read(body)
    assert view.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Check both orders."},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_order", "arguments": '{"id":"#W1"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "get_order", "arguments": '{"id":"#W2"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "shipped"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "pending\n[image]"},
        {"role": "user", "content": "And the refund?"}]
    moved = copy.deepcopy(body)
    del moved["messages"][2]["content"][2]["cache_control"]
    moved["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "Check both orders.",
                                                         "cache_control": CACHE}]}
    assert MESSAGES.read(moved).body == view.body  # a moved breakpoint changes no fingerprint


def test_messages_unchanged_below_the_target_is_the_body_itself():
    body = claude_code_body(3)
    out, result, _ = run(MESSAGES, body, 100_000)
    assert result.mode == Mode.UNDER
    assert all(a is b for a, b in zip(out["messages"], body["messages"])) and out == body


def test_messages_pruned_keeps_thinking_masks_in_native_shape_and_moves_breakpoints():
    body = claude_code_body(14)
    _, first, first_view = run(MESSAGES, body, 3000)
    dropped_mark = next(k for k, t in enumerate(body["messages"]) if k > 4 and t["role"] == "user"
                        and isinstance(t["content"], list) and t["content"][0]["type"] == "tool_result"
                        and not {j for j, o in enumerate(first_view.origins) if o.turn == k} & set(first.sources))
    body["messages"][dropped_mark]["content"][0]["cache_control"] = CACHE  # a client breakpoint mid-history
    out, result, view = run(MESSAGES, body, 3000)
    assert result.mode == Mode.STATELESS and result.changed
    assert messages_problems(out) == []
    assert out["system"] is body["system"]
    thinking = [b for t in body["messages"] if isinstance(t["content"], list) for b in t["content"]
                if b["type"] == "thinking"]
    sent = [b for t in out["messages"] if isinstance(t["content"], list) for b in t["content"]]
    assert all(any(b is t for t in thinking) for b in sent if b["type"] == "thinking")
    masked = [b for b in sent if b["type"] == "tool_result" and str(b["content"]).startswith(MASKED_PREFIX)]
    assert masked and all(isinstance(b["content"], str) for b in masked)
    markers = [b for b in sent if b["type"] == "text" and b["text"].startswith(OMITTED_PREFIX)]
    assert markers and all(t["role"] == "user" for t in out["messages"] if any(b in markers for b in t["content"]))
    # The breakpoint of the dropped turn now sits on the last kept block before it.
    kept_sources = set(result.sources)
    origin_views = [j for j, o in enumerate(view.origins) if o.turn == dropped_mark]
    assert not kept_sources & set(origin_views)
    marks = [b for b in sent if "cache_control" in b]
    assert len(marks) == 2  # the moved one and the newest block's (system's makes 3)
    assert sent[-1]["cache_control"] == CACHE


def test_messages_breakpoints_are_capped_at_four_earliest_first():
    body = {"model": "m", "tools": [{"name": "t", "input_schema": {}, "cache_control": CACHE}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": str(i), "cache_control": CACHE}]}
                         for i in range(5)]}
    original = copy.deepcopy(body)
    cap_breakpoints(body)
    assert [("cache_control" in t["content"][0]) for t in body["messages"]] == [False, False, True, True, True]
    assert original["messages"][0]["content"][0]["cache_control"] == CACHE  # edited on copies


def _continued(body: dict, text: str) -> dict:
    """``body`` one exchange on, the client's newest breakpoint moved along (as Claude Code does)."""
    later = copy.deepcopy(body)
    del later["messages"][-1]["content"][-1]["cache_control"]
    later["messages"] += [{"role": "assistant", "content": "Done."},
                          {"role": "user", "content": [{"type": "text", "text": text, "cache_control": CACHE}]}]
    return later


def test_messages_frozen_replay_is_byte_stable_while_the_client_moves_its_breakpoint():
    body = claude_code_body(14)
    _, first, _ = run(MESSAGES, body, 3000)
    later = _continued(body, "Thanks")
    second_out, second, _ = run(MESSAGES, later, 3000, state=first.state)
    assert second.mode == Mode.EPOCH  # over the target again: cut to the low-water mark
    third_out, third, _ = run(MESSAGES, _continued(later, "And now?"), 3000, state=second.state)
    assert third.mode == Mode.FROZEN
    n = len(second_out["messages"]) - 1
    assert third_out["messages"][:n] == second_out["messages"][:n]  # the very same turns
    # The frozen span ends on a breakpoint of its own: the turn the client marked last time
    # keeps its mark after the client moved it on, so that cache entry keeps hitting.
    assert third_out["messages"][n]["content"][0] == {"type": "text", "text": "Thanks", "cache_control": CACHE}
    assert orjson.dumps(third_out["messages"][:n + 1]) == orjson.dumps(second_out["messages"][:n + 1])
    assert messages_problems(third_out) == []


def test_messages_without_client_breakpoints_get_none():
    body = chat_to_messages({"model": "claude-sonnet-4-5", "messages": agent_history(14)})
    _, first, _ = run(MESSAGES, body, 3000)
    later = copy.deepcopy(body)
    later["messages"] += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks"}]
    out, again, _ = run(MESSAGES, later, 3000, state=first.state)
    assert again.changed and "cache_control" not in orjson.dumps(out).decode()


def test_responses_view_groups_reasoning_calls_and_glues_unknown_items():
    body = {"model": "gpt-5", "instructions": "Be brief.", "input": [
        {"role": "user", "content": "Fix the bug."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA=="},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Patched."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]}]}
    view = RESPONSES.read(body)
    assert view.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}},
            {"id": "c2", "type": "function", "function": {"name": "apply_patch", "arguments": "*** Begin Patch"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "Patched."},
        {"role": "user", "content": "Thanks"}]
    assert [o.items for o in view.origins] == [(), (0,), (1, 2, 3), (4,), (5, 6), (7,), (8,)]
    assert RESPONSES.read({"model": "gpt-5", "input": "hi"}).body["messages"] == [{"role": "user", "content": "hi"}]


def test_responses_pruned_masks_outputs_in_place_and_keeps_reasoning_with_its_call():
    chat = {"model": "gpt-5", "messages": agent_history(14)}
    body = chat_to_responses(chat)
    items = []
    for item in body["input"]:
        if item["type"] == "function_call" and (not items or items[-1]["type"] != "function_call"):
            items.append({"type": "reasoning", "id": f"rs_{item['call_id']}", "summary": [],
                          "encrypted_content": f"enc-{item['call_id']}"})
        items.append(item)
    body["input"] = items
    out, result, _ = run(RESPONSES, body, 3000)
    assert result.changed and responses_problems(out) == []
    assert out["instructions"] == body["instructions"]
    masked = [i for i in out["input"] if i.get("type") == "function_call_output"
              and i["output"].startswith(MASKED_PREFIX)]
    assert masked and all(set(i) == {"type", "call_id", "output"} for i in masked)
    markers = [i for i in out["input"] if i.get("role") == "user" and i["content"][0]["text"].startswith("[sieve:")]
    assert markers and markers[0] == {"type": "message", "role": "user",
                                      "content": [{"type": "input_text", "text": markers[0]["content"][0]["text"]}]}
    sent = {id(i) for i in out["input"]}
    for k, item in enumerate(body["input"]):
        if item["type"] == "reasoning":  # the very object, exactly when its call goes
            assert (id(item) in sent) == (id(body["input"][k + 1]) in sent)


@pytest.mark.parametrize("fmt, body, param", [
    ("messages", {"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ("messages", {"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ("messages", {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "content": "x"}]}]}, "messages[0].content[0].tool_use_id"),
    ("messages", {"model": "m", "system": 5, "messages": [{"role": "user", "content": "x"}]}, "system"),
    ("messages", {"messages": [{"role": "user", "content": "x"}]}, "model"),
    ("responses", {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
     "input[0].call_id"),
    ("responses", {"model": "m", "instructions": ["x"], "input": "hi"}, "instructions"),
    ("responses", {"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ("responses", {"model": "m", "input": 7}, "input"),
])
def test_bodies_sieve_cannot_read_are_400s_naming_the_field(fmt, body, param):
    with pytest.raises(InvalidRequest) as caught:
        adapter_for(WireFormat(fmt)).read(body)
    assert caught.value.param == param and caught.value.status == 400


def test_unknown_format_is_a_400_naming_the_header():
    assert parse_format(None) == WireFormat.CHAT and parse_format("messages") == WireFormat.MESSAGES
    for value in ("anthropic", "", "Messages"):  # exactly the documented values
        with pytest.raises(InvalidRequest, match="x-sieve-format must be one of chat, messages, responses") as caught:
            parse_format(value)
        assert caught.value.param == "x-sieve-format"


# -- omission markers side by side ----------------------------------------------------------------

def _two_markers_side_by_side(adapter, body, kept_before: int, kept_after: list[int]):
    """``body`` pruned, then the decision as the pipeline makes it across epochs: the first
    ``kept_before`` view messages, two omission markers (one per dropped span: the older one
    plain, the newer one with ids), then the view messages ``kept_after``."""
    view = adapter.read(body)
    result = prune(view.body, Policy(), scorer=LocalScorer(), counter=COUNTER,
                   steering=Steering(target_tokens=100_000))
    viewed = view.body["messages"]
    forwarded = viewed[:kept_before] + [{"role": "user", "content": OMITTED_PREFIX + "; ids: ORD-1001]"},
                                        {"role": "user", "content": OMITTED_PREFIX + "; ids: ORD-1001 SKU-77]"}]
    forwarded += [viewed[i] for i in kept_after]
    sources = list(range(kept_before)) + [-1, -1] + kept_after
    actions = [Action.KEPT if i < kept_before or i in kept_after else Action.DROPPED for i in range(len(viewed))]
    decided = dataclasses.replace(result, request={**result.request, "messages": forwarded}, sources=sources,
                                  message_actions=actions)
    return adapter.write(body, view, decided)


def _markers_in(texts: list[str]) -> list[str]:
    return [t for t in texts if t.startswith(OMITTED_PREFIX)]


def _history(steps: int) -> dict:
    return {"model": "claude-sonnet-4-5", "messages": agent_history(steps)}


def test_messages_two_markers_in_one_user_turn_become_one_listing_every_id():
    """The real Claude Code run: two spans dropped with only user pieces between their markers,
    so both markers land in one user turn (pieces of one role merge). One marker is written,
    with each id either listed, once. (An assistant turn follows them: they go into the user
    turn after it, and the task's turn before them keeps its bytes.)"""
    body = chat_to_messages(_history(6))
    assert body["messages"][0]["role"] == "user"
    last = len(MESSAGES.read(body).body["messages"]) - 1
    out = _two_markers_side_by_side(MESSAGES, body, 2 if "system" in body else 1, [last - 1, last])
    assert messages_problems(out) == []
    assert out["messages"][0] == body["messages"][0]
    carrier = out["messages"][-1]
    texts = [b["text"] for b in carrier["content"] if b["type"] == "text"]
    assert _markers_in(texts) == [OMITTED_PREFIX + "; ids: ORD-1001 SKU-77]"]
    every = [b.get("text", "") for t in out["messages"] if isinstance(t["content"], list) for b in t["content"]]
    assert len(_markers_in(every)) == 1


def test_responses_two_markers_side_by_side_become_one_item():
    body = chat_to_responses(_history(6))
    last = len(RESPONSES.read(body).body["messages"]) - 1
    out = _two_markers_side_by_side(RESPONSES, body, 2 if body.get("instructions") else 1, [last - 1, last])
    assert responses_problems(out) == []
    texts = [i["content"][0]["text"] for i in out["input"] if i.get("role") == "user"
             and isinstance(i.get("content"), list)]
    assert _markers_in(texts) == [OMITTED_PREFIX + "; ids: ORD-1001 SKU-77]"]


def test_merged_markers_keep_plain_ones_plain_and_other_text_apart():
    plain = OMITTED_PREFIX + "]"
    assert merged_marker_texts([plain, plain]) == [plain]
    assert merged_marker_texts([plain, OMITTED_PREFIX + "; ids: a b]", "hi", plain]) == [
        OMITTED_PREFIX + "; ids: a b]", "hi", plain]
    assert merged_marker_texts(["[sieve: summary of omitted messages]\nx", plain]) == [
        "[sieve: summary of omitted messages]\nx", plain]


def test_merged_markers_name_every_ref_the_model_can_ask_sieve_expand_for():
    # Found by Claude Code through Sieve with sieve_expand on: two spans' markers side by side
    # in one Anthropic turn merged into one that named neither ref.
    first = with_ref({"role": "user", "content": OMITTED_PREFIX + "; ids: a b]"}, "1a2b3c4d")["content"]
    second = with_ref({"role": "user", "content": OMITTED_PREFIX + "; ids: b c]"}, "5e6f7a8b")["content"]
    (merged,) = merged_marker_texts([first, second])
    assert merged == OMITTED_PREFIX + ", ref 1a2b3c4d, ref 5e6f7a8b, " + REF_HINT + "; ids: a b c]"
    assert marker_ids({"role": "user", "content": merged}) == ["a", "b", "c"]
    (one,) = merged_marker_texts([first, OMITTED_PREFIX + "; ids: x]"])  # a plain one beside: its ids only
    assert one == OMITTED_PREFIX + ", ref 1a2b3c4d, " + REF_HINT + "; ids: a b x]"
    looks_like_ref = OMITTED_PREFIX + "; ids: , ref 9f9f9f9f]"  # in the ids, not a ref
    assert merged_marker_texts([looks_like_ref, OMITTED_PREFIX + "]"]) == [looks_like_ref]


def test_a_marker_goes_into_the_next_user_turn_and_the_turns_before_keep_their_bytes():
    """An omitted span between the task and a kept tool call: the marker does not join the task's
    turn (message 0 would change, and with it the cached prefix and every piece of reasoning bound
    to what follows); it goes after the kept call's results, in the user turn that carries them."""
    chat = {"model": "claude-sonnet-4-5", "messages": [{"role": "system", "content": "sys"},
                                                       {"role": "user", "content": "Task: read the logs."}]}
    for i in range(30):
        chat["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "cat", "arguments": f'{{"f": {i}}}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"log {i} " + "line of output " * 100}]
    body = {**chat_to_messages(chat), "max_tokens": 100}
    out, result, _ = run(MESSAGES, body, 700)
    assert Action.DROPPED in result.message_actions and messages_problems(out) == []
    assert out["messages"][0] == body["messages"][0]
    carrier = next(t for t in out["messages"] if any(b.get("type") == "text" and b["text"].startswith(OMITTED_PREFIX)
                                                     for b in t["content"] if isinstance(t["content"], list)))
    assert carrier["role"] == "user" and carrier["content"][0]["type"] == "tool_result"
