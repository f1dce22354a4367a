"""The pure part of reversible pruning: refs in markers, the refs a call asks for, what they restore."""

from __future__ import annotations

from gateway.pruning.compression import dropped_marker, is_omission_marker, marker_ids
from gateway.expand import MAX_REFS_PER_CALL, NOT_AVAILABLE, expandable, refs_of_call, restore
from gateway.pruning import span_ref, with_ref
from gateway.pruning.messages import fingerprint
from gateway.pruning.pins import PinnedRoom, pin_budget, placed
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.vocabulary import DROPPED, KEPT, MASKED
from tests.support.conversations import agent_history


def test_a_marker_with_its_ref_keeps_its_ids_and_stays_a_marker():
    marker = dropped_marker(["#W1000001", "700001"])
    decorated = with_ref(marker, "1a2b3c4d")
    assert is_omission_marker(decorated) and marker_ids(decorated) == ["#W1000001", "700001"]
    assert "ref 1a2b3c4d" in decorated["content"] and "sieve_expand" in decorated["content"]
    assert is_omission_marker(with_ref(dropped_marker(), "1a2b3c4d"))


def test_refs_of_a_call_are_bounded_and_junk_asks_for_nothing():
    assert refs_of_call('{"refs": ["a", "b", "a"]}') == ["a", "b"]
    assert refs_of_call({"refs": "a, b c"}) == ["a", "b", "c"]
    assert len(refs_of_call({"refs": [str(i) for i in range(10)]})) == MAX_REFS_PER_CALL
    assert refs_of_call("not json") == refs_of_call({"refs": 3}) == refs_of_call(None) == []


def test_every_ref_forwarded_restores_what_it_stands_for():
    history = agent_history(12)
    counter = TokenCounters().for_model("gpt-4o-mini")
    policy = Policy(min_prompt_tokens=0, min_messages=0, target_tokens=1500)
    result = prune({"model": "gpt-4o-mini", "messages": history}, policy, scorer=LocalScorer(), counter=counter,
                   steering=Steering())
    found = expandable(result, history)
    assert found.removed
    forwarded_text = " ".join(str(m.get("content")) for m in found.messages)
    named = [ref for ref in found.refs if f"ref {ref}" in forwarded_text]
    assert named
    lists = "".join(restore([ref], found.refs, history)[0] for ref in named)
    for ref, indices in found.refs.items():
        # Named in the forward, or in the list of a span too long to show whole.
        assert ref in named or f"ref {ref}:" in lists
        assert all(result.message_actions[j] in (MASKED, DROPPED) for j in indices)
        first = fingerprint(history[indices[0]])
        assert first.startswith(ref) or span_ref(first, indices[0]) == ref
        text, n = restore([ref], found.refs, history)
        assert n == 1 and NOT_AVAILABLE not in text
    text, n = restore(["deadbeef"], found.refs, history)
    assert n == 0 and NOT_AVAILABLE in text
    # An id a marker lists restores the omitted units that hold it.
    marker = next(m["content"] for m in found.messages if is_omission_marker(m))
    some_id = marker_ids({"role": "user", "content": marker})[0]
    text, n = restore([some_id], found.refs, history)
    assert n == 1 and some_id in text and text.count("[tool]") >= 1
    # The plan stores the markers as they were: the decoration is never frozen.
    assert all("ref " not in m["content"] for _, m in result.state.inserts if is_omission_marker(m))


def test_pins_go_back_in_order_while_they_fit_and_only_beside_kept_turns():
    kept, dropped = [KEPT] * 6, [KEPT, DROPPED, KEPT, KEPT, KEPT, KEPT]
    pins = [PinnedRoom(2, (4, 5), 300, 310), PinnedRoom(0, (1, 2), 200, 210), PinnedRoom(1, (2, 3), 500, 520)]
    assert [p.pin for p in placed(pins, kept, 10_000)] == [0, 1, 2]  # by place
    assert [p.pin for p in placed(pins, kept, 600)] == [0, 2]  # one that does not fit is passed over
    assert [p.pin for p in placed(pins, dropped, 10_000)] == [1, 2]  # its client turn was left out
    assert placed(pins, kept, 0) == [] and pin_budget(4_000, 0.5) == 2_000


def test_the_pipeline_holds_pinned_exchanges_under_the_target():
    """The pins that go back are counted in the forward, which stays within the target; a pin
    larger than the room an epoch frees stays out rather than shrinking the conversation."""
    history = agent_history(12)
    counter = TokenCounters().for_model("gpt-4o-mini")
    policy = Policy(min_prompt_tokens=0, min_messages=0, target_tokens=4000, expand_tool=True)
    body = {"model": "gpt-4o-mini", "messages": history}
    last = len(history) - 1
    plain = prune(body, policy, scorer=LocalScorer(), counter=counter, steering=Steering())
    for size, goes in ((1_500, True), (2_100, False)):
        pin = PinnedRoom(0, (last - 1, last), size, size)
        result = prune(body, policy, scorer=LocalScorer(), counter=counter, steering=Steering(pinned=(pin,)))
        assert result.target_rule_tokens <= 4000 and result.pinned == ((0,) if goes else ())
        assert result.message_actions[last - 1:] == [KEPT, KEPT]
        if goes:
            assert result.forwarded_tokens <= plain.forwarded_tokens + size
        else:
            assert result.forwarded_tokens == plain.forwarded_tokens


def test_two_plain_markers_each_name_their_own_span():
    """With no ids listed, two markers have the same text: each names the ref of its own span."""
    from gateway.pruning import marker_spans, with_refs
    from gateway.pruning.vocabulary import KEPT

    plain = dropped_marker()
    actions = [KEPT, KEPT, DROPPED, DROPPED, KEPT, KEPT, DROPPED, DROPPED, KEPT]
    fingerprints = [f"{i:02d}" * 12 for i in range(len(actions))]
    inserts = [(2, plain), (6, plain)]
    sources = [0, 1, -1, 4, 5, -1, 8]
    forwarded = [{"role": "user", "content": f"m{s}"} if s >= 0 else dict(plain) for s in sources]
    spans = marker_spans(inserts, actions, fingerprints)
    named = with_refs(forwarded, sources, spans)
    first, second = named[2]["content"], named[5]["content"]
    assert f"ref {span_ref(fingerprints[2], 2)}" in first and f"ref {span_ref(fingerprints[6], 6)}" in second
    assert [s for _, _, _, s in spans] == [[2, 3], [6, 7]]


def test_two_spans_that_open_alike_have_refs_of_their_own():
    """An agent opens every task with the same line: two omitted spans starting at equal
    messages still name different refs, and each restores its own messages."""
    from gateway.pruning import marker_spans

    greeting = {"role": "assistant", "content": "Hi! How can I help you today?"}
    history = [{"role": "system", "content": "You help customers."}, {"role": "user", "content": "task one"},
               dict(greeting), {"role": "user", "content": "order #W1 please"}, {"role": "user", "content": "kept"},
               dict(greeting), {"role": "user", "content": "order #W2 please"}, {"role": "user", "content": "now"}]
    fingerprints = [fingerprint(m) for m in history]
    assert fingerprints[2] == fingerprints[5]
    actions = [KEPT, KEPT, DROPPED, DROPPED, KEPT, DROPPED, DROPPED, KEPT]
    spans = marker_spans([(2, dropped_marker()), (5, dropped_marker())], actions, fingerprints)
    (_, _, first, first_span), (_, _, second, second_span) = spans
    assert first != second
    index = {first: first_span, second: second_span}
    assert "#W1" in restore([first], index, history)[0] and "#W2" not in restore([first], index, history)[0]
    assert "#W2" in restore([second], index, history)[0]
