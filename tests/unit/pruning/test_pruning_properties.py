"""Property tests of the pure pipeline: chains atomic, pinned kept, fits when feasible,
deterministic bytes, idempotent."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.expand import expandable
from gateway.pruning.normalize import structural_problems
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters

COUNTER = TokenCounters().for_model("gpt-4o-mini")
SCORER = LocalScorer()
WORDS = ["order", "#W100200", "refund", "lamp", "blue", "never", "user_42", "ok", "error", "report.csv",
         "shipping", "address", "the", "zip", "98187", "please", "exchange", "item", "不要", "退款"]

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=60).map(" ".join)


@st.composite
def conversations(draw):
    messages = [{"role": "system", "content": draw(text)}, {"role": "user", "content": draw(text)}]
    call_no = 0
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "chain", "chain"]))
        if kind == "chain":
            n = draw(st.integers(1, 3))
            ids = [f"c{call_no + k}" for k in range(n)]
            call_no += n
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "lookup", "arguments": orjson.dumps({"q": draw(text)}).decode()}}
                for i in ids]})
            for i in ids:
                messages.append({"role": "tool", "tool_call_id": i, "content": draw(text) * draw(st.integers(1, 8))})
        else:
            messages.append({"role": kind, "content": draw(text)})
    if messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
        messages.append({"role": "user", "content": draw(text)})
    return messages


def _prune(messages, target, strategy="relevance"):
    return prune({"model": "gpt-4o-mini", "messages": messages}, Policy(), scorer=SCORER, counter=COUNTER,
                 steering=Steering(target_tokens=target, strategy=strategy))


def _last_unit_start(messages):
    i = len(messages) - 1
    while i > 0 and messages[i]["role"] == "tool":
        i -= 1
    return i


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(conversations(), st.integers(20, 3000), st.sampled_from(["relevance", "window"]))
def test_structure_pins_and_target(messages, target, strategy):
    result = _prune(messages, target, strategy)
    sent = result.request["messages"]
    assert structural_problems(sent) == []                      # chains atomic, nothing orphaned
    assert sent[0] == messages[0]                                # system pinned
    assert messages[1] in sent                                   # goal pinned
    tail = messages[_last_unit_start(messages):]
    sent_tail = sent[-len(tail):]
    assert [m.get("tool_call_id") for m in sent_tail] == [m.get("tool_call_id") for m in tail]  # current step pinned
    assert sent_tail[0] == tail[0] and sent_tail[-1] == tail[-1]  # its calls and its newest result whole
    # Hard pins: the system message, the goal, the active task (the newest user message: the
    # task the running tool loop works on) and the current step.
    start = _last_unit_start(messages)
    task = max(i for i, m in enumerate(messages[:start + 1]) if m["role"] == "user")
    hard = [messages[i] for i in sorted({0, 1, task} | set(range(start, len(messages))))]
    if COUNTER.count_messages(hard) <= target:
        assert sent_tail == tail                                 # all of it, when the hard pins fit the target
    else:                                                        # else earlier results are masked at most
        assert all(a == b or str(a["content"]).startswith("[sieve: masked") for a, b in zip(sent_tail, tail))
    if COUNTER.count_messages(hard) + 40 <= target:
        assert result.target_rule_tokens <= target                       # fits when feasible
    # The counts are of the messages as forwarded: with the default policy's sieve_expand tool,
    # each omission marker names its ref (the expander's decoration of ``sent``).
    wire = expandable(result, messages).messages
    assert result.target_rule_tokens == COUNTER.count_messages(wire)
    assert result.forwarded_tokens == sum(map(COUNTER.model_tokens, wire)) <= result.target_rule_tokens


@PROPERTY
@given(conversations(), st.integers(20, 3000))
def test_deterministic_and_idempotent(messages, target):
    first = _prune(messages, target)
    again = _prune([dict(m) for m in messages], target)
    assert orjson.dumps(first.request) == orjson.dumps(again.request)
    if first.target_rule_tokens <= target:
        twice = _prune(first.request["messages"], target)
        assert twice.request["messages"] == first.request["messages"]
