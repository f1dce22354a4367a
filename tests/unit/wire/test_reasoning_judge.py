"""Which reasoning Sieve's rewrite of a body leaves invalid, and what it does about it (pure parts).

``gateway.wire.formats.reasoning.judge`` compares the body Sieve is about to send with the
body the client sent and with the prefixes the conversation's reasoning is bound to;
``gateway.exchange.reasoning_guard`` builds the safe form of a Messages request and merges the beta header.
"""

from __future__ import annotations

from gateway.exchange.reasoning_guard import BINDING_BETA, ReasoningRecord, is_prefix_error, needs_beta, with_beta, \
    with_drop_block
from gateway.telemetry.recording import transformation_reasons
from gateway.wire.formats import WireFormat
from gateway.wire.formats.reasoning import Scope, carriers, chain, input_transformations, judge, loop_start

M = WireFormat.MESSAGES
R = WireFormat.RESPONSES


def thinking(sig: str) -> dict:
    return {"type": "thinking", "thinking": "hmm", "signature": sig}


def call(n: int, sig: str) -> list[dict]:
    return [{"role": "assistant", "content": [thinking(sig), {"type": "tool_use", "id": f"t{n}", "name": "Bash",
                                                               "input": {"command": f"ls {n}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * 50}]}]


def body(*turns: dict) -> dict:
    return {"model": "claude-sonnet-5-5", "system": "sys", "tools": [{"name": "Bash"}], "messages": list(turns)}


def session() -> tuple[dict, list[str]]:
    """Task one with two calls and an answer, then task two's loop with one call; and the prefixes
    every answer was made under (the client sent everything as it is)."""
    turns = [{"role": "user", "content": "task one"}]
    prefixes = []
    for n, sig in ((1, "a"), (2, "b")):
        prefixes.append(chain(body(*turns), M)[-1])
        turns += call(n, sig)
    prefixes.append(chain(body(*turns), M)[-1])
    turns.append({"role": "assistant", "content": [thinking("c"), {"type": "text", "text": "done"}]})
    turns.append({"role": "user", "content": "task two"})
    prefixes.append(chain(body(*turns), M)[-1])
    turns += call(3, "d")
    return body(*turns), prefixes


def record_of(sent: dict, prefixes: list[str]) -> tuple[dict[str, str], set[str]]:
    """What the conversation's record holds at the last request: the earlier carriers bound, the
    last answer's prefix pending."""
    digests = [c.digest for c in carriers(sent, M)]
    return dict(zip(digests[:-1], prefixes[:-1])), {prefixes[-1]}


def test_a_forward_as_the_client_sent_it_invalidates_nothing():
    sent, prefixes = session()
    verdict = judge(sent, sent, M, *record_of(sent, prefixes), set())
    assert verdict.invalid == [] and verdict.lost == {}
    assert len(carriers(sent, M)) == 4 and loop_start(sent, M) == 6


def test_a_change_invalidates_what_follows_it_only_and_names_its_scope():
    sent, prefixes = session()
    masked = dict(sent, messages=list(sent["messages"]))
    masked["messages"][4] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                                          "content": "[sieve: masked]"}]}
    verdict = judge(masked, sent, M, *record_of(sent, prefixes), set())
    assert [c.position for c in verdict.invalid] == [5, 7]  # "c" after the change, and "d" in the loop
    assert verdict.lost == {Scope.EARLIER: 1, Scope.CURRENT_LOOP: 1}
    again = judge(masked, sent, M, *record_of(sent, prefixes), set(verdict.lost_digests))
    assert again.lost == {}  # counted once, on the request whose rewrite did it


def test_stripped_blocks_leave_the_blocks_after_them_hashed_as_forwarded():
    sent, prefixes = session()
    dropped = dict(sent, messages=sent["messages"][:1] + sent["messages"][3:])  # call one dropped
    first = judge(dropped, sent, M, *record_of(sent, prefixes), set(), strip=lambda c, in_loop: not in_loop)
    # "b" stands where "a" was made, and is not "a": invalid; so is "c"; "d" is in the loop.
    assert [c.position for c in first.stripped] == [1, 3]
    assert first.lost == {Scope.EARLIER: 3, Scope.CURRENT_LOOP: 1}  # "a" went with its turn
    assert all(b["type"] != "thinking" for t in first.body["messages"][:4] for b in t["content"]
               if isinstance(t["content"], list))
    # The answer to the stripped forward, then the same rewrite again: that answer stays valid.
    answer = {"role": "assistant", "content": [thinking("e"), {"type": "text", "text": "ok"}]}
    later = dict(dropped, messages=dropped["messages"] + [answer, {"role": "user", "content": "more"}])
    sent_later = dict(sent, messages=sent["messages"] + [answer, {"role": "user", "content": "more"}])
    bound = {d: p for d, p in first.prefixes.items() if d not in {c.digest for c in first.invalid}}
    taken_out = {c.digest for c in first.stripped}
    second = judge(later, sent_later, M, bound, {first.whole}, set(first.lost_digests),
                   strip=lambda c, in_loop: c.digest in taken_out)  # as before: "d" stays in
    assert [c.position for c in second.invalid] == [1, 3, 5]  # the old ones again, not "e"
    assert second.lost == {}


def test_responses_items_are_judged_by_the_items_before_them():
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
    sent = {"model": "gpt-5", "instructions": "sys", "input": items}
    made_under = chain(sent, R)[-1]
    items = items + [{"type": "reasoning", "id": "rs_1", "encrypted_content": "e1"},
                     {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
                     {"type": "function_call_output", "call_id": "c1", "output": "out"}]
    sent = dict(sent, input=items)
    assert judge(sent, sent, R, {}, {made_under}, set()).invalid == []
    rewritten = dict(sent, input=[{"type": "message", "role": "user", "content": "[sieve: omitted]"}] + items)
    assert judge(rewritten, sent, R, {}, {made_under}, set()).lost == {Scope.CURRENT_LOOP: 1}


def test_breakpoints_are_no_change():
    sent, prefixes = session()
    moved = dict(sent, messages=[*sent["messages"][:-1], {**sent["messages"][-1], "content": [
        {**sent["messages"][-1]["content"][0], "cache_control": {"type": "ephemeral"}}]}])
    assert chain(moved, M) == chain(sent, M)


def test_the_safe_form_asks_to_drop_invalid_blocks_and_the_beta_joins_the_clients_own():
    safe = with_drop_block({"model": "m", "thinking": {"type": "adaptive", "display": "omitted"}})
    assert safe["thinking"] == {"type": "adaptive", "display": "omitted",
                                "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert with_drop_block({"model": "m"})["thinking"]["type"] == "adaptive"
    assert needs_beta(safe) and not needs_beta({"thinking": {"type": "adaptive"}})
    merged = with_beta({"anthropic-beta": "a-1, b-2", "x": "y"})
    assert merged == {"anthropic-beta": f"a-1,b-2,{BINDING_BETA}", "x": "y"}
    assert with_beta(merged) == merged
    assert is_prefix_error(400, b'{"error": {"message": "The block is bound to a different conversation."}}')
    assert not is_prefix_error(429, b"bound to a different conversation")


def test_the_record_reads_back_and_survives_junk():
    record = ReasoningRecord("k", {"d0": "p0"}, {"p1", "p2"}, ["d1"], binding=True)
    again = ReasoningRecord.from_bytes("k", record.to_bytes())
    assert (again.bound, again.pending, again.lost, again.binding) == ({"d0": "p0"}, {"p1", "p2"}, ["d1"], True)
    assert ReasoningRecord.from_bytes("k", b"not json").bound == {}


def test_input_transformations_are_read_from_either_provider_and_counted_by_reason():
    anthropic = {"type": "message", "input_transformations": [
        {"type": "thinking_dropped", "path": "messages.2.content.0", "reason": "prefix_binding_mismatch"}]}
    openai = {"type": "response.completed", "response": {"input_transformations": [
        {"type": "reasoning", "id": "rs_1", "action": "removed", "reason": "prefix_mismatch"},
        {"type": "reasoning", "id": "rs_2", "action": "removed", "reason": "something_new"}]}}
    entries = input_transformations(anthropic) + input_transformations(openai)
    assert transformation_reasons(entries) == {"prefix_binding_mismatch": 1, "prefix_mismatch": 1, "other": 1}
