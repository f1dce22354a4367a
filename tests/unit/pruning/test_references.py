"""Units a kept later unit quotes: ranked above what is only on topic, and their values listed first."""

from __future__ import annotations

import json

from gateway.pruning.conversation import build_conversation
from gateway.pruning.ids import omitted_ids
from gateway.pruning.references import copied_by_kept, is_value_entity
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters

COUNTER = TokenCounters().for_model("gpt-4o-mini")


def _chain(call_id: str, name: str, args: dict, result: dict) -> list[dict]:
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}]


def test_a_unit_whose_values_a_kept_later_unit_copies_ranks_above_one_only_on_topic():
    messages = [{"role": "system", "content": "You help with travel bookings."},
                {"role": "user", "content": "I need to change my flight booking."}]
    messages += _chain("c1", "get_booking", {"locator": "ZK4P2M"},
                       {"locator": "ZK4P2M", "flight": "UA 1234", "ticket": "0167712345678"})
    messages += _chain("c2", "search_flights", {"route": "SFO-JFK"},
                       {"flights": "change flight booking options: change fee, flight times, booking rules"})
    messages += [{"role": "assistant", "content": "Booking ZK4P2M: which date would you like instead?"},
                 {"role": "user", "content": "Change the flight booking to the next day please."}]
    conv = build_conversation(messages, lambda m: len(json.dumps(m)) // 4)
    n = len(conv.units)
    window = [n - 2, n - 1]
    candidates = [u.index for u in conv.units if u.kind != "system" and u.index not in window and u.index > 1]
    scores = LocalScorer().score(conv, candidates, window)
    quoted, on_topic = candidates[0], candidates[1]
    assert scores[quoted].score == 5 and "copied by a kept later unit" in scores[quoted].reason
    assert scores[quoted].relevance > scores[on_topic].relevance
    assert on_topic not in copied_by_kept(candidates, window, [LocalScorer().features(u.text) for u in conv.units],
                                          {e: 1 for u in conv.units for e in LocalScorer().features(u.text).entities})


def test_only_values_count_as_copies_not_words_counts_or_years():
    assert [is_value_entity(e) for e in ("zk4p2m", "#w42", "a@b.io", "get_booking", "2024", "12", "chicago")] == \
        [True, True, True, True, False, False, False]


def test_the_values_of_a_quoted_message_come_first_in_the_marker():
    quoted = json.dumps({"order_id": "#W1111111", "payment_method_id": "credit_card_2222222"})
    other = json.dumps({"order_id": "#W3333333", "payment_method_id": "credit_card_4444444"})
    room = COUNTER.count_text(" #W1111111 credit_card_2222222")
    # Newest first: without the quote, the other order's values come first (it is newer).
    assert omitted_ids([(other, False), (quoted, False)], set(), room, COUNTER.count_text) == \
        ["#W3333333", "credit_card_4444444"]
    listed = omitted_ids([(other, False, False), (quoted, False, True)], set(), room, COUNTER.count_text)
    assert listed == ["#W1111111", "credit_card_2222222"]
