"""The messages a conversation sent last (``gateway.exchange.recent_messages.RecentMessages``):
whatever the next request holds (more messages, the same, fewer, an earlier one edited, removed,
reordered or rewritten with its keys in another order), its fingerprints are those computed one
message at a time; the previous request's are reused only where it goes on from it; the lists
kept stay within the bound."""

from __future__ import annotations

import copy

from hypothesis import given, settings, strategies as st

from gateway.exchange.recent_messages import RecentMessages
from gateway.pruning import fingerprint
from tests.support.conversations import agent_history


def _direct(messages: list[dict]) -> list[str]:
    return [fingerprint(m) for m in messages]


def test_a_conversation_going_on_reuses_what_it_sent_before() -> None:
    history = agent_history(12)
    recent = RecentMessages()
    reused = []
    for n in (8, 8, 14, 20, len(history)):
        before = recent.reused
        assert recent.fingerprints("org:a", history[:n]) == _direct(history[:n])
        reused.append(recent.reused - before)
    assert reused == [0, 8, 8, 14, 20]  # first sight, the same again, then each step goes on


def test_a_change_to_an_earlier_message_is_seen() -> None:
    history = agent_history(12)
    edited = copy.deepcopy(history)
    edited[3]["content"] += " (edited)"
    reordered_keys = copy.deepcopy(history)
    reordered_keys[2] = dict(reversed(list(history[2].items())))
    same_value_other_type = copy.deepcopy(history)
    same_value_other_type[2]["tool_calls"][0]["index"] = 1  # then 1.0, then True: one value in Python, three in JSON
    variants = {
        "edited": edited, "removed": history[:5] + history[6:], "swapped": [history[0], history[2], history[1]] + history[3:],
        "keys reordered": reordered_keys, "fewer": history[:10], "one more at the end": history + [history[2]],
    }
    for name, messages in variants.items():
        recent = RecentMessages()
        recent.fingerprints("org:a", history)
        assert recent.fingerprints("org:a", messages) == _direct(messages), name
    recent = RecentMessages()
    for value in (1, 1.0, True, 1):
        same_value_other_type[2]["tool_calls"][0]["index"] = value
        assert recent.fingerprints("org:a", same_value_other_type) == _direct(same_value_other_type), value


def test_a_longer_last_value_is_not_taken_for_the_same_message() -> None:
    """An item whose last value goes on (a longer string, number or list) is another item: a
    message's closing brace is among the old list's bytes, a bare number's end is not."""
    recent = RecentMessages()
    for first, then in (([{"role": "user", "content": "ab"}], [{"role": "user", "content": "abc"}]),
                        ([{"role": "user", "n": 1}], [{"role": "user", "n": 12}]),
                        ([{"role": "user", "n": [1]}], [{"role": "user", "n": [1, 2]}]),
                        ([1], [12]), ([1, 2], [1, 23])):
        recent.fingerprints("org:a", first)
        assert recent.fingerprints("org:a", then) == _direct(then)
    assert recent.reused == 0


def test_conversations_are_apart() -> None:
    history = agent_history(6)
    other = copy.deepcopy(history)
    other[1]["content"] = "another task"
    recent = RecentMessages()
    recent.fingerprints("org:a", history)
    assert recent.fingerprints("org:b", other) == _direct(other) and recent.reused == 0
    assert recent.fingerprints("org:a", history) == _direct(history) and recent.reused == len(history)


def test_the_lists_kept_stay_within_the_bound() -> None:
    history = agent_history(10)
    recent = RecentMessages(max_bytes=200_000)
    for k in range(40):
        recent.fingerprints(f"org:{k}", history[:20 + k % 10])
        assert recent.bytes <= recent.max_bytes
    assert 0 < len(recent) < 40
    giant = RecentMessages(max_bytes=4 * 1024)  # a list over a quarter of the bound is not kept
    giant.fingerprints("org:a", history)
    assert len(giant) == 0 and giant.bytes == 0
    recent.forget("org:39")
    assert recent.bytes == sum(len(entry[0]) for entry in recent._kept.values())


_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.5, 1.0]) | st.text(max_size=4),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                       max_leaves=8)
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": _values})


@settings(max_examples=300, deadline=None)
@given(st.lists(_message, min_size=1, max_size=6), st.lists(_message, max_size=6), st.integers(0, 6))
def test_any_next_request_gets_the_fingerprints_of_its_messages(first: list[dict], then: list[dict], keep: int) -> None:
    """The next request keeps the first ``keep`` messages of the last and goes on with ``then``."""
    recent = RecentMessages()
    recent.fingerprints("org:a", first)
    following = first[:keep] + then
    assert recent.fingerprints("org:a", following) == _direct(following)
