"""Fuzzing the pure pipeline with arbitrary, often broken, message lists.

Where test_pruning_properties.py checks what pruning is FOR on well-formed agent
traffic, this module throws what clients really send at it: broken tool chains
(orphan results, unanswered calls, unknown and duplicated ids), empty and null
contents, content-part arrays with images, unknown part types and bare strings,
legacy function calls, unicode of every kind, huge strings and 10,000-message
histories; and arbitrary JSON at the wire checks in front of it.

Properties, for every input the wire checks accept:

* ``prune`` never raises, first sight or replaying a stored plan;
* what it forwards passes the wire checks too, and breaks no OpenAI structural
  rule the input did not already break (none at all for a valid input);
* it is never larger than the input, in counted tokens or in messages (but
  for the policy's one goal reminder, a message by design);
* it is deterministic: the same input gives the same bytes and the same report;
* every field other than ``messages`` passes through untouched.

The wire checks (``parse_body``, ``check_chat_body``, ``parse_sieve_headers``)
may refuse anything, but only with ``InvalidRequest`` (a 400 naming the field).
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.normalize import structural_problems
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.wire.body import parse_body
from gateway.wire.chat import check_chat_body
from gateway.wire.headers import parse_sieve_headers

COUNTER = TokenCounters().for_model("gpt-4o-mini")
SCORER = LocalScorer()
POLICIES = (Policy(), Policy(name="agent", protect_last_units=6, goal_reminder=True),
            Policy(name="tight", protect_last_units=0, protect_active_chain=False, mask_min_tokens=1,
                   min_prompt_tokens=0, min_messages=0))
REMINDER_PREFIX = "[sieve: task reminder]"
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WIRE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- text ------------------------------------------------------------------------------------------

# The wire (orjson) never carries a lone surrogate, so neither does anything generated here.
CHARS = st.characters(exclude_categories=("Cs",))
WORDS = ["order", "#W100200", "refund", "lamp", "user_42", "error", "report.csv", "zip", "98187",
         "不要", "退款", "注文", "😀", "👩‍👩‍👧", "مرحبا", "שלום", "e\u0301", "\u200b", "<|endoftext|>", "\x00", "\\u0000"]
ODD = ["", " ", "\n\t ", "\u3000", "\ufeff", "[sieve: masked 3 tokens, ref 0]", "[sieve: some earlier messages omitted]",
       "[sieve: summary of omitted messages]\nx", "null", "{}", "\r\n" * 40]
HUGE_UNITS = ["lorem ipsum ", "😀", "数据", "x", "0123456789", "\U0001f3f3\ufe0f\u200d\U0001f308 "]

words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
huge = st.tuples(st.sampled_from(HUGE_UNITS), st.integers(2_000, 12_000)).map(lambda t: t[0] * t[1])
text = st.one_of(words, words, words, st.text(CHARS, max_size=60), st.sampled_from(ODD), huge)
short = st.one_of(st.text(CHARS, max_size=12), st.sampled_from(["lookup", "get_order", "", " ", "名前"]))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(CHARS, max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=8), inner, max_size=3),
    max_leaves=8,
)

# -- content ---------------------------------------------------------------------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==", "detail": "low"}}
part = st.one_of(
    text.map(lambda t: {"type": "text", "text": t}),
    st.just(IMAGE),
    st.just({"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}),
    st.just({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
    st.builds(lambda t, v: {"type": t, "payload": v}, short, json_values),  # unknown part types
    text,                                                                    # bare string parts
    st.sampled_from([{}, {"type": "text"}, {"type": "text", "text": None}, {"type": "text", "text": 5},
                     {"type": None, "text": "typeless"}, {"text": ["not", "a", "string"]}]),
)
content = st.one_of(text, st.lists(part, max_size=5))
nullable_content = st.one_of(st.none(), content)

# Extra fields clients send; none of them may be lost or crash anything.
extras = st.dictionaries(st.sampled_from(["name", "refusal", "audio", "cache_control", "x-meta", "weight"]),
                         json_values, max_size=2)

# -- messages --------------------------------------------------------------------------------------

IDS = ["call_1", "call_2", "call_3", "", "call_1 ", "呼び出し"]  # a small pool: duplicates and unknown ids are common


def _arguments() -> st.SearchStrategy[str]:
    return st.one_of(json_values.map(lambda v: orjson.dumps(v).decode()), text)


tool_call = st.builds(
    lambda cid, name, args, extra: {"id": cid, "type": "function", "function": {"name": name, "arguments": args},
                                    **extra},
    st.sampled_from(IDS), short, _arguments(), st.dictionaries(st.sampled_from(["index", "type"]), json_values,
                                                                max_size=1))
legacy_call = st.one_of(
    st.builds(lambda n, a: {"name": n, "arguments": a}, short, _arguments()),
    st.builds(lambda n, a: {"name": n, "arguments": a}, short, json_values),  # arguments as an object
    json_values,                                                              # not even a dict
)


def _with(extra: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    return {**extra, **message}


message = st.one_of(
    st.builds(lambda r, c, e: _with(e, {"role": r, "content": c}), st.sampled_from(["system", "developer"]), content,
              extras),
    st.builds(lambda c, e: _with(e, {"role": "user", "content": c}), content, extras),
    st.builds(lambda c, e: _with(e, {"role": "assistant", "content": c}), nullable_content, extras),
    st.builds(lambda c, calls, e: _with(e, {"role": "assistant", "content": c, "tool_calls": calls}),
              nullable_content, st.lists(tool_call, max_size=4), extras),
    st.builds(lambda cid, c, e: _with(e, {"role": "tool", "tool_call_id": cid, "content": c}),
              st.sampled_from(IDS), nullable_content, extras),
    st.builds(lambda c, fc: {"role": "assistant", "content": c, "function_call": fc}, nullable_content, legacy_call),
    st.builds(lambda n, c: {"role": "function", "name": n, "content": c}, short, nullable_content),
)


@st.composite
def well_formed(draw) -> list[dict[str, Any]]:
    """Valid by OpenAI's structural rules, with the odd contents of ``message``."""
    out = [{"role": draw(st.sampled_from(["system", "developer"])), "content": draw(content)}] \
        if draw(st.booleans()) else []
    out.append({"role": "user", "content": draw(words)})
    n = 0
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "chain", "chain", "legacy"]))
        if kind == "chain":
            ids = [f"c{n + k}" for k in range(draw(st.integers(1, 3)))]
            n += len(ids)
            out.append({"role": "assistant", "content": draw(nullable_content), "tool_calls": [
                {"id": i, "type": "function", "function": {"name": draw(short), "arguments": draw(_arguments())}}
                for i in ids]})
            out.extend({"role": "tool", "tool_call_id": i, "content": draw(nullable_content)} for i in ids)
        elif kind == "legacy":
            out.append({"role": "assistant", "content": None, "function_call": draw(legacy_call)})
            out.append({"role": "function", "name": draw(short), "content": draw(nullable_content)})
        elif kind == "user":
            out.append({"role": "user", "content": draw(st.one_of(words, st.lists(part, min_size=1, max_size=3)))})
        else:
            out.append({"role": "assistant", "content": draw(content)})
    return out


conversations = st.one_of(well_formed(), st.lists(message, min_size=1, max_size=24))
targets = st.one_of(st.none(), st.integers(1, 60), st.integers(60, 3_000), st.integers(3_000, 200_000))
strategies = st.sampled_from([None, "relevance", "window", "none"])
goals = st.one_of(st.none(), st.just(""), text)


def _body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": messages, "temperature": 0.2, "tools": [{"type": "function"}], **extra}


def _run(body, policy, target, strategy, goal, state=None):
    return prune(body, policy, scorer=SCORER, counter=COUNTER, state=state,
                 steering=Steering(target_tokens=target, strategy=strategy, goal=goal))


def _check(body: dict[str, Any], result) -> None:
    """What must hold of any prune of a wire-valid ``body``."""
    sent = result.request["messages"]
    original = body["messages"]
    check_chat_body(result.request)                                  # still a valid request on the wire
    assert {k: v for k, v in result.request.items() if k != "messages"} == \
        {k: v for k, v in body.items() if k != "messages"}          # the rest passes through untouched
    before, after = structural_problems(original), structural_problems(sent)
    event(f"mode {result.mode}")                                     # --hypothesis-show-statistics
    event("broken input" if before else "valid input")
    if not before:
        assert after == [], after                                    # valid in, valid out
    else:                                                            # broken in: no worse out
        assert not _kinds(after) - _kinds(before), (before, after)
    # Never more messages, but for the policy's goal reminder: by design one short message
    # restating the task when anything was removed (docs/pruning.md: the goal is never dropped).
    reminders = sum(1 for m in sent if str(m.get("content")).startswith(REMINDER_PREFIX) and m not in original)
    assert len(sent) <= len(original) + min(reminders, 1)
    assert COUNTER.count_messages(sent) <= COUNTER.count_messages(original)  # never more tokens
    assert result.forwarded_tokens <= result.original_tokens
    assert result.original_tokens == sum(map(COUNTER.model_tokens, original))


def _kinds(problems: list[str]) -> Counter:
    return Counter(p.split(":", 1)[0] for p in problems)  # "orphan tool result: 3 'x'" -> "orphan tool result"


# -- the pipeline ----------------------------------------------------------------------------------

@FUZZ
@given(conversations, targets, strategies, goals, st.sampled_from(POLICIES))
def test_prune_never_raises_never_grows_and_keeps_valid_input_valid(messages, target, strategy, goal, policy):
    body = _body(messages)
    check_chat_body(body)  # the generators make only what the gateway lets through
    _check(body, _run(body, policy, target, strategy, goal))


@FUZZ
@given(conversations, targets, strategies, goals, st.sampled_from(POLICIES))
def test_prune_is_deterministic(messages, target, strategy, goal, policy):
    first = _run(_body(messages), policy, target, strategy, goal)
    again = _run(_body(copy.deepcopy(messages)), policy, target, strategy, goal)
    assert orjson.dumps(first.request) == orjson.dumps(again.request)
    assert orjson.dumps(first.report()) == orjson.dumps(again.report())
    assert first.state.to_bytes() == again.state.to_bytes()


@FUZZ
@given(conversations, st.lists(message, max_size=8), st.sampled_from([0, 0, 0, 1, 3]), st.floats(0.05, 0.95),
       st.integers(1, 3_000), st.sampled_from(POLICIES))
def test_a_stored_plan_replays_safely_on_any_next_turn(messages, appended, cut, share, other_target, policy):
    """Turn 2 extends (or, with ``cut``, edits) turn 1 and carries turn 1's stored plan, under
    the same target (a frozen replay or an epoch) or another one (decided afresh)."""
    target = max(1, int(COUNTER.count_messages(messages) * share))  # a target that makes turn 1 prune
    first = _run(_body(messages), policy, target, None, None)
    assert FrozenPlan.from_bytes(first.state.to_bytes()) is not None
    following = messages[:len(messages) - cut] + appended
    assume(following)
    body = _body(following)
    check_chat_body(body)
    for second_target in (target, other_target):
        _check(body, _run(body, policy, second_target, None, None, FrozenPlan.from_bytes(first.state.to_bytes())))


@st.composite
def small_chain(draw) -> list[dict[str, Any]]:
    """A well-formed call and its results, parallel or legacy, with short contents."""
    if draw(st.integers(0, 4)) == 0:
        return [{"role": "assistant", "content": None, "function_call": {"name": draw(short), "arguments": draw(words)}},
                {"role": "function", "name": draw(short), "content": draw(st.one_of(st.none(), words))}]
    ids = [f"c{k}" for k in range(draw(st.integers(1, 3)))]
    return [{"role": "assistant", "content": draw(st.one_of(st.none(), words)), "tool_calls": [
        {"id": i, "type": "function", "function": {"name": draw(short), "arguments": draw(words)}} for i in ids]}] + \
        [{"role": "tool", "tool_call_id": i, "content": draw(st.one_of(st.none(), words, st.just([IMAGE])))} for i in ids]


@st.composite
def long_histories(draw) -> list[dict[str, Any]]:
    """10,000 messages expanded from a few drawn templates (Hypothesis' own buffer could not
    hold 10,000 drawn messages); the expansion is seeded, so a failure replays exactly.
    Many messages, not huge ones: each template recurs hundreds of times, and a body stays
    within the gateway's 32 MiB limit (huge strings have the tests above)."""
    clean = draw(st.booleans())  # half of them valid throughout, half with broken chains mixed in
    plain = st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant"]), words)
    small = message.filter(lambda m: len(orjson.dumps(m)) < 2_000)
    templates = draw(st.lists(plain if clean else small, min_size=3, max_size=12))
    chains = draw(st.lists(small_chain(), min_size=1, max_size=4))
    rng = random.Random(draw(st.integers(0, 2**32)))
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    while len(out) < 10_000:
        if rng.random() < 0.6:
            tag = f"#{len(out)}"  # fresh ids per copy, so chains stay well-formed
            out.extend({**m, "tool_call_id": m["tool_call_id"] + tag} if m["role"] == "tool"
                       else {**m, "tool_calls": [{**c, "id": c["id"] + tag} for c in m["tool_calls"]]}
                       if m.get("tool_calls") else m for m in rng.choice(chains))
        else:
            out.append(rng.choice(templates))
    return out[:10_000]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(long_histories(), st.sampled_from([500, 20_000, None]), st.sampled_from(POLICIES))
def test_ten_thousand_message_histories(messages, target, policy):
    body = _body(messages)
    check_chat_body(body)
    result = _run(body, policy, target, None, None)
    _check(body, result)
    again = _run(_body(copy.deepcopy(messages)), policy, target, None, None)
    assert orjson.dumps(again.request) == orjson.dumps(result.request)
    following = _body(messages + [{"role": "user", "content": "and now?"}])  # the next turn, replaying the plan
    _check(following, _run(following, policy, target, None, None, FrozenPlan.from_bytes(result.state.to_bytes())))


# -- the wire checks -------------------------------------------------------------------------------

def _accepts(check, *args) -> bool:
    try:
        check(*args)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.message
        return False
    return True


@WIRE
@given(st.one_of(json_values, st.dictionaries(st.sampled_from(["model", "messages", "stream", "stream_options",
                                                                "max_tokens", "max_completion_tokens", "n"]),
                                               json_values)))
def test_wire_checks_refuse_arbitrary_json_only_with_invalid_request(value):
    raw = orjson.dumps(value)
    if _accepts(parse_body, raw):
        _accepts(check_chat_body, parse_body(raw))


@WIRE
@given(st.binary(max_size=200))
def test_parse_body_refuses_arbitrary_bytes_only_with_invalid_request(raw):
    _accepts(parse_body, raw)


@st.composite
def near_valid_bodies(draw) -> dict[str, Any]:
    """Valid bodies with one or two fields, anywhere, replaced by arbitrary JSON."""
    messages = draw(conversations)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(messages) - 1))
        value = draw(json_values)
        calls = messages[i].get("tool_calls")
        intact = isinstance(calls, list) and calls and isinstance(calls[0], dict) and \
            isinstance(calls[0].get("function"), dict)  # not already replaced by an earlier round
        target = draw(st.sampled_from(["message", "call", "function"])) if intact else "message"
        if target == "message":
            field = draw(st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "function_call"]))
            messages[i] = {**messages[i], field: value}
        elif target == "call":
            calls = list(calls)
            calls[0] = value if draw(st.booleans()) else {**calls[0], draw(st.sampled_from(["id", "function"])): value}
            messages[i] = {**messages[i], "tool_calls": calls}
        else:
            calls = list(calls)
            field = draw(st.sampled_from(["name", "arguments"]))
            calls[0] = {**calls[0], "function": {**calls[0]["function"], field: value}}
            messages[i] = {**messages[i], "tool_calls": calls}
    body = _body(messages, stream=draw(st.sampled_from([None, True, False])),
                 max_tokens=draw(st.sampled_from([None, 1, 16.0, 4096])))
    if draw(st.booleans()):
        body[draw(st.sampled_from(["model", "messages", "stream", "stream_options", "max_tokens"]))] = draw(json_values)
    return body


@WIRE
@given(near_valid_bodies(), targets, st.sampled_from(POLICIES))
def test_what_the_wire_checks_accept_the_pipeline_handles(body, target, policy):
    accepted = _accepts(check_chat_body, body)
    event("accepted by the wire checks" if accepted else "refused by the wire checks")
    if accepted:
        _check(body, _run(body, policy, target, None, None))


@WIRE
@given(st.integers(1, 1_100), st.sampled_from(["metadata", "message", "part", "arguments"]), targets)
def test_deep_nesting_is_refused_or_handled(depth, where, target):
    nested = "[" * depth + "]" * depth
    message = {"message": '{"role": "user", "content": "x", "extra": %s}' % nested,
               "part": '{"role": "user", "content": [{"type": "text", "text": "x", "extra": %s}]}' % nested,
               "arguments": '{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": %s}}'
                            % nested}.get(where, '{"role": "user", "content": "x"}')
    metadata = nested if where == "metadata" else "null"
    raw = ('{"model": "m", "metadata": %s, "messages": [%s, {"role": "user", "content": "y"}]}'
           % (metadata, message)).encode()
    if _accepts(parse_body, raw):
        body = parse_body(raw)
        check_chat_body(body)
        result = _run(body, POLICIES[2], target, None, None)
        orjson.dumps(result.request)  # what is accepted can be forwarded


header_values = st.one_of(st.text(CHARS, max_size=20), st.integers(-5, 10**8).map(str),
                          st.sampled_from(["", " 12 ", "1_000", "+5", "1e3", "0x10", "NONE", " Window ", "٣"]))


@WIRE
@given(st.dictionaries(st.sampled_from(["x-sieve-target-tokens", "x-sieve-strategy", "x-sieve-goal",
                                        "x-sieve-conversation-id"]), header_values))
def test_sieve_headers_refuse_only_with_invalid_request(headers):
    _accepts(parse_sieve_headers, headers)
