"""``POST /v1/prune`` with ``x-sieve-format``: Anthropic Messages and OpenAI Responses bodies
pruned by a real gateway under uvicorn (raw HTTP, as a client of either format sends them),
answered in their own format; nothing reaches the upstream."""

from __future__ import annotations

import copy
import json

import orjson

from gateway.pruning.compression import MASKED_PREFIX
from tests.support.conversations import agent_history
from tests.support.formats import chat_to_messages, chat_to_responses, messages_problems, responses_problems

CACHE = {"type": "ephemeral"}
TARGET = {"x-sieve-target-tokens": "3000"}


def claude_code_session(steps: int) -> dict:
    body = chat_to_messages({"model": "claude-sonnet-4-5", "messages": agent_history(steps)})
    body["system"] = [{"type": "text", "text": body["system"], "cache_control": CACHE}]
    body["metadata"] = {"user_id": "u-1"}
    for k, turn in enumerate(body["messages"]):
        if turn["role"] == "assistant" and isinstance(turn["content"], list):
            turn["content"].insert(0, {"type": "thinking", "thinking": f"step {k} \u00e9\u4e2d",
                                       "signature": f"EqQBCkgIARAB/+{k}=="})
    body["messages"][-1] = {"role": "user", "content": [{"type": "text", "text": "Next?", "cache_control": CACHE}]}
    return body


def prune(gateway, body: dict, fmt: str, headers: dict | None = None):
    raw = orjson.dumps(body)
    reply = gateway.post("/v1/prune", content=raw, headers={"content-type": "application/json",
                                                            "x-sieve-format": fmt, **TARGET, **(headers or {})})
    return reply


def _thinking_bytes(raw: bytes) -> set[bytes]:
    """The thinking blocks of a JSON text, as the bytes they were sent in."""
    return {orjson.dumps(b) for t in orjson.loads(raw)["messages"] if isinstance(t["content"], list)
            for b in t["content"] if b["type"] == "thinking"}


def test_messages_body_is_pruned_in_its_own_format(gateway, upstream):
    body = claude_code_session(16)
    reply = prune(gateway, body, "messages")
    assert reply.status_code == 200, reply.text
    out = reply.json()
    sent, report = out["request"], out["report"]
    assert upstream.requests == []
    assert report["format"] == "messages" and report["mode"] == "stateless"
    assert report["forwarded_tokens"] < report["original_tokens"] == int(reply.headers["x-sieve-original-tokens"])
    assert messages_problems(sent) == []                    # alternating, no orphans, <= 4 breakpoints
    assert {k: v for k, v in sent.items() if k != "messages"} == {k: v for k, v in body.items() if k != "messages"}
    sent_thinking = {orjson.dumps(b) for t in sent["messages"] if isinstance(t["content"], list)
                     for b in t["content"] if b["type"] == "thinking"}
    assert sent_thinking and sent_thinking < _thinking_bytes(orjson.dumps(body))  # byte for byte, some dropped
    results = [b for t in sent["messages"] if isinstance(t["content"], list) for b in t["content"]
               if b["type"] == "tool_result"]
    assert any(str(b["content"]).startswith(MASKED_PREFIX) for b in results)
    assert sent["messages"][-1] == body["messages"][-1]


def test_messages_conversation_forwards_a_stable_prefix(start_gateway, providers):
    """Request after request of one conversation (Claude Code moving its newest breakpoint
    along): while the decisions stand, the turns forwarded before come again byte for byte.
    Each step is dry-run (what it would forward, and how it was decided), then forwarded: the
    forward keeps the conversation's plan, the dry run writes none."""
    gateway = start_gateway(upstream_base_url=providers.base_url, anthropic_base_url=providers.anthropic_base_url)
    body = claude_code_session(16)
    forwards = []
    for step in range(4):
        reply = prune(gateway, body, "messages")
        assert reply.status_code == 200
        forwards.append((reply.json()["report"]["mode"], reply.json()["request"]["messages"]))
        sent = gateway.post("/v1/messages", json={**body, "max_tokens": 64}, headers=TARGET)
        assert sent.status_code == 200 and providers.requests[-1].json["messages"] == forwards[-1][1]
        body = copy.deepcopy(body)
        del body["messages"][-1]["content"][-1]["cache_control"]
        body["messages"] += [{"role": "assistant", "content": f"Noted {step}."},
                             {"role": "user", "content": [{"type": "text", "text": f"More {step}?",
                                                           "cache_control": CACHE}]}]
    modes = [mode for mode, _ in forwards]
    assert modes[0] == "stateless" and "frozen" in modes[1:]
    for (_, before), (mode, after) in zip(forwards, forwards[1:]):
        if mode == "frozen":
            n = len(before) - 1
            assert orjson.dumps(after[:n]) == orjson.dumps(before[:n])
            assert _without_breakpoints(after[n]) == _without_breakpoints(before[n])  # the client moved it


def _without_breakpoints(turn: dict) -> list[dict]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in turn["content"]]


def test_responses_body_is_pruned_in_its_own_format(gateway, upstream):
    body = chat_to_responses({"model": "gpt-5", "messages": agent_history(16)})
    body.update(store=False, prompt_cache_key="task-7", include=["reasoning.encrypted_content"],
                reasoning={"effort": "low"})
    items = []
    for item in body["input"]:
        if item["type"] == "function_call" and items[-1]["type"] != "function_call":
            items.append({"type": "reasoning", "id": f"rs_{item['call_id']}", "summary": [],
                          "encrypted_content": f"gAAAA{item['call_id']}+/=="})
        items.append(item)
    # An item type Sieve does not know goes with its neighbour (here the pinned task) as it came.
    items.insert(1, {"type": "compaction_summary", "id": "cmp_1", "encrypted_content": "opaque"})
    body["input"] = items
    reply = prune(gateway, body, "responses")
    assert reply.status_code == 200, reply.text
    sent, report = reply.json()["request"], reply.json()["report"]
    assert upstream.requests == [] and report["format"] == "responses"
    assert responses_problems(sent) == []
    assert {k: v for k, v in sent.items() if k != "input"} == {k: v for k, v in body.items() if k != "input"}
    assert {"type": "compaction_summary", "id": "cmp_1", "encrypted_content": "opaque"} in sent["input"]
    by_id = {i["id"]: i for i in body["input"] if i["type"] == "reasoning"}
    kept_calls = {i["call_id"] for i in sent["input"] if i["type"] == "function_call"}
    for item in sent["input"]:
        if item["type"] == "reasoning":
            assert orjson.dumps(item) == orjson.dumps(by_id[item["id"]])
    assert {i["id"] for i in sent["input"] if i["type"] == "reasoning"} == \
        {f"rs_{c}" for c in kept_calls if f"rs_{c}" in by_id}   # a reasoning item goes with its call
    outputs = [i for i in sent["input"] if i["type"] == "function_call_output"]
    assert any(i["output"].startswith(MASKED_PREFIX) for i in outputs)


def test_unknown_format_and_unreadable_bodies_are_400s_naming_what(gateway, upstream):
    reply = prune(gateway, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "anthropic")
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "x-sieve-format"
    assert "chat, messages, responses" in reply.json()["error"]["message"]
    reply = prune(gateway, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "content": "x"}]}]}, "messages")
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "messages[0].content[0].tool_use_id"
    reply = prune(gateway, {"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, "responses")
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input[0].call_id"


def test_chat_stays_the_default_format(gateway, upstream):
    body = {"model": "gpt-4o-mini", "messages": agent_history(16)}
    # Two conversations, each named (a named conversation's first decision goes to the
    # low-water mark, an unnamed request's to the target): the same rule on both sides.
    plain = gateway.post("/v1/prune", json=body, headers={**TARGET, "x-sieve-conversation-id": "one"}).json()
    named = gateway.post("/v1/prune", json=body, headers={**TARGET, "x-sieve-format": "chat",
                                                         "x-sieve-conversation-id": "other"}).json()
    assert plain["report"]["format"] == named["report"]["format"] == "chat"
    assert json.dumps(plain["request"]) == json.dumps(named["request"])
