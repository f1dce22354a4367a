"""At a turn boundary of an agent that works alone, the answer the new user message replies to
goes with it (``protection._answered``): the next step redoes that answer, copying its names."""

from __future__ import annotations

from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.turns import works_alone

COUNTER = TokenCounters().for_model("gpt-4o-mini")
POLICY = Policy(expand_tool=False)
ANSWER = ("I will rewrite parse_header in src/wire/header_codec.py so that it keeps the folded lines, "
          "then run tests/test_header_codec.py::test_folded_lines. ") * 12


def loop(steps: int, users_between: bool = False) -> list[dict]:
    messages = [{"role": "system", "content": "You fix bugs with a shell."},
                {"role": "user", "content": "Task: headers with folded lines lose their tail."}]
    for n in range(steps):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "bash", "arguments": f'{{"command": "cat f{n}.py"}}'}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": f"line {n}: " + "value = other " * 40}]
        if users_between:
            messages += [{"role": "assistant", "content": f"Read f{n}.py."}, {"role": "user", "content": "Go on."}]
    return messages + [{"role": "assistant", "content": ANSWER},
                       {"role": "user", "content": "Send exactly one command per answer."}]


def forwarded_at_the_boundary(messages: list[dict]) -> str:
    pins = sum(COUNTER.count_message(m) for m in messages[:2] + messages[-2:])
    target = pins + 150  # the pins and the answer fit; the low-water mark (half) holds less
    result = prune({"model": "gpt-4o-mini", "messages": messages}, POLICY, scorer=LocalScorer(), counter=COUNTER,
                   steering=Steering(target_tokens=target), continued=True)
    assert result.target_rule_tokens <= target
    return "\n".join(str(m.get("content")) for m in result.request["messages"])


def test_an_agent_working_alone_keeps_the_answer_its_correction_replies_to():
    messages = loop(12)
    assert works_alone(messages)
    assert ANSWER in forwarded_at_the_boundary(messages)


def test_in_a_dialogue_the_answer_before_a_reply_is_shed_as_before():
    messages = loop(12, users_between=True)
    assert not works_alone(messages)
    assert ANSWER not in forwarded_at_the_boundary(messages)


def test_an_answer_the_target_cannot_hold_with_the_pins_is_not_pinned():
    messages = loop(12)
    pins = sum(COUNTER.count_message(m) for m in messages[:2] + messages[-1:])
    result = prune({"model": "gpt-4o-mini", "messages": messages}, POLICY, scorer=LocalScorer(), counter=COUNTER,
                   steering=Steering(target_tokens=pins + 60), continued=True)
    assert result.target_rule_tokens <= pins + 60
