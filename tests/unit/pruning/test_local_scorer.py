"""The embedded local scorer: lexical and entity relevance, duplicates, hard constraints."""

from __future__ import annotations

import json
import time

from gateway.pruning import text_features as tf
from gateway.pruning.conversation import build_conversation
from gateway.pruning.rubric import is_imperative
from gateway.pruning.scoring import LocalScorer


def _count(message) -> int:
    text = message.get("content") or ""
    for call in message.get("tool_calls") or ():
        text += call["function"]["name"] + call["function"]["arguments"]
    return len(text) // 4 + 4


def _score(messages, window_size: int = 1):
    conv = build_conversation(messages, _count)
    n = len(conv.units)
    window = list(range(n - window_size, n))
    candidates = [u.index for u in conv.units if u.kind != "system" and u.index not in window]
    return conv, LocalScorer().score(conv, candidates, window)


def _filler(n: int) -> list[dict]:
    topics = ["the weather was nice today", "I watched a movie last night", "lunch was a sandwich",
              "my cat slept all afternoon", "traffic was slow this morning", "we talked about music"]
    out = []
    for k in range(n):
        role = "user" if k % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"Small talk {k}: {topics[k % len(topics)]}."})
    return out


def _tool_chain(call_id: str, name: str, args: dict, result: str) -> list[dict]:
    return [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def _unit_of(conv, message_index: int) -> int:
    return next(u.index for u in conv.units if message_index in u.indices)


def test_entity_reuse_beats_unrelated_text():
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Hello, I need help with an order."}]
    messages += _filler(6)
    order_at = len(messages)
    messages.append({"role": "user", "content": "The order id is #W8855135 and the zip is 78260."})
    messages += _filler(6)
    messages.append({"role": "user", "content": "What is the status of #W8855135?"})
    conv, scores = _score(messages)
    order_unit = _unit_of(conv, order_at)
    others = [s for i, s in scores.items() if i != order_unit]
    assert scores[order_unit].score >= 4
    assert all(scores[order_unit].relevance > s.relevance for s in others)
    assert "w8855135" in scores[order_unit].reason


def test_duplicate_tool_output_scores_1_for_the_older_copy():
    result = '{"user_id": "sofia_li_9219", "payment": "credit_card_8105988"}'
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Look me up, I am sofia_li_9219."}]
    old_at = len(messages)
    messages += _tool_chain("call_1", "get_user_details", {"user_id": "sofia_li_9219"}, result)
    messages += _filler(4)
    new_at = len(messages)
    messages += _tool_chain("call_2", "get_user_details", {"user_id": "sofia_li_9219"}, result)
    messages += _filler(4)
    messages.append({"role": "user", "content": "Which card is on file for sofia_li_9219?"})
    conv, scores = _score(messages)
    old, new = _unit_of(conv, old_at), _unit_of(conv, new_at)
    assert scores[old].score == 1
    assert "duplicate" in scores[old].reason
    assert scores[new].score >= 4


def test_user_constraint_is_hard():
    messages = [{"role": "system", "content": "You are a coding assistant."},
                {"role": "user", "content": "Help me refactor the parser module."}]
    messages += _filler(4)
    rule_at = len(messages)
    messages.append({"role": "user", "content": "Never call external APIs. Always answer in a table."})
    messages += _filler(4)
    messages.append({"role": "user", "content": "Now rename the tokenizer class."})
    conv, scores = _score(messages)
    s = scores[_unit_of(conv, rule_at)]
    assert s.hard and s.score == 5 and s.reason == "user constraint"


def test_chit_chat_with_always_is_not_hard():
    messages = [{"role": "system", "content": "You are a friendly assistant."},
                {"role": "user", "content": "Let's chat about hobbies."}]
    messages += _filler(4)
    chat_at = len(messages)
    messages.append({"role": "user", "content": "I always go hiking on Sundays, it is so relaxing."})
    messages += _filler(4)
    messages.append({"role": "user", "content": "What should I cook tonight?"})
    conv, scores = _score(messages)
    assert not scores[_unit_of(conv, chat_at)].hard
    assert not any(s.hard for s in scores.values())


def test_cjk_text_matches_and_constraints_are_hard():
    messages = [{"role": "system", "content": "你是一个助手。"},
                {"role": "user", "content": "帮我规划旅行。"}]
    messages += _filler(4)
    hotel_at = len(messages)
    messages.append({"role": "user", "content": "我预订了上海的酒店，入住时间是下午三点。"})
    messages += _filler(2)
    rule_at = len(messages)
    messages.append({"role": "user", "content": "不要使用英文回答。"})
    messages += _filler(4)
    messages.append({"role": "user", "content": "上海酒店的入住时间是几点？"})
    conv, scores = _score(messages)
    hotel = scores[_unit_of(conv, hotel_at)]
    assert hotel.score >= 4
    assert all(hotel.relevance > s.relevance for i, s in scores.items()
               if i not in (_unit_of(conv, hotel_at), _unit_of(conv, rule_at)))
    assert scores[_unit_of(conv, rule_at)].hard
    assert "上海" in tf.terms("上海酒店")


def test_answer_follows_question():
    messages = [{"role": "system", "content": "You remember the conversation."},
                {"role": "user", "content": "Hi!"}]
    messages += _filler(6)
    q_at = len(messages)
    messages.append({"role": "user", "content": "Anna: Where did you go camping last summer?"})
    messages.append({"role": "assistant", "content": "Ben: We went up to the lake with the kids."})
    messages += _filler(6)
    messages.append({"role": "user", "content": "Where did Ben go camping?"})
    conv, scores = _score(messages)
    answer = scores[_unit_of(conv, q_at + 1)]
    filler = [s for i, s in scores.items() if i not in (_unit_of(conv, q_at), _unit_of(conv, q_at + 1))]
    assert all(answer.relevance > s.relevance for s in filler)


def test_speaker_prefix():
    assert tf.speaker("Melanie: hey there") == "melanie"
    assert tf.speaker("[1:56 pm on 8 May, 2023] Caroline: Hey Mel!") == "caroline"
    assert tf.speaker("no speaker here: lower case") is None
    # IRC-style chat logs, and a time stamp in parentheses
    assert tf.speaker("<Melanie> hey there") == "melanie"
    assert tf.speaker("(2023-05-08 13:56) <Caroline> Hey Mel!") == "caroline"
    assert tf.speaker("(2023-05-08 13:56) Caroline: Hey Mel!") == "caroline"
    assert tf.speaker("<b> bold text") is None and tf.speaker("x <Melanie> hey") is None


def test_deterministic():
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Hello, I need help with order #W1."}]
    messages += _filler(10)
    messages += _tool_chain("call_1", "get_order_details", {"order_id": "#W1234567"}, '{"status": "pending"}')
    messages += _filler(10)
    messages.append({"role": "user", "content": "Cancel #W1234567 please, it is pending."})
    _, first = _score(messages)
    _, second = _score(messages)
    assert first == second
    # and a scorer reused across calls (warm feature cache) agrees with a cold one
    conv = build_conversation(messages, _count)
    n = len(conv.units)
    cands = [u.index for u in conv.units if u.kind != "system" and u.index != n - 1]
    scorer = LocalScorer()
    scorer.score(conv, cands, [n - 1])
    assert scorer.score(conv, cands, [n - 1]) == first


def test_features_take_linear_time_on_long_runs():
    # Found by fuzzing: the e-mail and file-name patterns rescanned a long run of word
    # characters from each of its positions (60k characters beside an "@" took ~7 s).
    for text in ("x" * 60_000 + " @", "7" * 60_000 + " .py", "a-" * 30_000 + " x.py @"):
        started = time.perf_counter()
        tf.analyse(text)
        assert time.perf_counter() - started < 1.0, text[-10:]
    assert tf.entities("mail john.doe+x@example.com, open my-file_2.py") >= {"john.doe+x@example.com", "my-file_2.py"}


def test_instruction_check_takes_linear_time_on_blank_lines():
    # Found by fuzzing: every newline of a blank run restarted a scan of the whole run
    # (40k newlines after "always" took 70 s).
    started = time.perf_counter()
    assert not is_imperative("it is always" + "\n" * 20_000 + "x")
    assert time.perf_counter() - started < 1.0
    assert is_imperative("Done.\n\n  Never call external APIs.") and is_imperative("ok.\r\nplease always cite")
    assert not is_imperative("I always go hiking.\n\n\nIt is fun.")


class _RecordingScorer(LocalScorer):
    """Records each BM25 pass; ``reuse=False`` recomputes the feedback pass in full."""

    def __init__(self, reuse: bool) -> None:
        super().__init__()
        self.reuse = reuse
        self.passes: list[dict[int, float]] = []

    def _bm25(self, query, corpus, candidates, request, earlier=None):
        out = super()._bm25(query, corpus, candidates, request, earlier if self.reuse else None)
        self.passes.append(out)
        return out


def test_the_feedback_pass_reuses_only_scores_it_would_repeat():
    # Scores are compared to the last bit: a reused score that a full pass would
    # compute otherwise could flip a tie, and replicas must decide the same bytes.
    from tests.support.conversations import agent_history

    messages = agent_history(40)
    messages.append({"role": "user", "content": "Which laptop order was it, and what did the refund come to?"})
    conv = build_conversation(messages, _count)
    window = [len(conv.units) - 1]
    candidates = [u.index for u in conv.units if u.kind != "system" and u.index not in window]
    reusing, full = _RecordingScorer(reuse=True), _RecordingScorer(reuse=False)
    assert reusing.score(conv, candidates, window) == full.score(conv, candidates, window)
    assert len(reusing.passes) == 2 and reusing.passes[1] == full.passes[1]
    assert reusing.passes[1] != reusing.passes[0]  # the feedback pass changed some scores
