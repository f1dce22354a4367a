"""Chat Completions bodies converted into Anthropic Messages and OpenAI Responses, and each
format's own validity rules: test and bench support for the format adapters.

::

    native = chat_to_messages(chat_body)          # or chat_to_responses
    assert messages_problems(pruned_native) == []  # or responses_problems

The converters write what a client of that format sends for the same history: the
chat system prompt as ``system`` / ``instructions``, tool calls as ``tool_use`` /
``function_call`` items with the call's id, results as ``tool_result`` blocks (a
user's words after them in the same user turn, as Claude Code sends) or
``function_call_output`` items. Only the test suite and the bench scripts use them.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from gateway.pruning.messages import content_text

MAX_BREAKPOINTS = 4


def chat_to_messages(body: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages body holding ``body``'s conversation."""
    system = [content_text(m.get("content")) for m in body["messages"] if m["role"] in ("system", "developer")]
    turns: list[dict[str, Any]] = []
    for m in body["messages"]:
        role = m["role"]
        if role in ("system", "developer"):
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": content_text(m["content"])}
            if turns and turns[-1]["role"] == "user" and isinstance(turns[-1]["content"], list) \
                    and all(b["type"] == "tool_result" for b in turns[-1]["content"]):
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif role == "user":
            text = content_text(m["content"])
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list) \
                    and last["content"] and last["content"][-1]["type"] == "tool_result":
                last["content"].append({"type": "text", "text": text})  # the user's words after the results
            else:
                turns.append({"role": "user", "content": text})
        else:
            turns.append({"role": "assistant", "content": _assistant_blocks(m)})
    out: dict[str, Any] = {"model": body["model"], "max_tokens": 1024, "messages": turns}
    if system:
        out["system"] = "\n".join(system)
    if body.get("tools"):
        out["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                         "input_schema": t["function"].get("parameters") or {"type": "object"}}
                        for t in body["tools"]]
    return out


def _assistant_blocks(m: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    text = content_text(m.get("content"))
    calls = m.get("tool_calls") or []
    if not calls:
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for call in calls:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    return blocks


def chat_to_responses(body: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses body holding ``body``'s conversation (the leading system prompt as
    ``instructions``)."""
    messages = list(body["messages"])
    out: dict[str, Any] = {"model": body["model"]}
    if messages and messages[0]["role"] == "system":
        out["instructions"] = content_text(messages.pop(0)["content"])
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": content_text(m["content"])})
            continue
        text = content_text(m.get("content"))
        if role == "assistant":
            if text or not m.get("tool_calls"):
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]})
            items.extend({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                          "arguments": c["function"]["arguments"]} for c in m.get("tool_calls") or ())
        else:
            items.append({"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})
    out["input"] = items
    if body.get("tools"):
        out["tools"] = [{"type": "function", "name": t["function"]["name"],
                         "parameters": t["function"].get("parameters")} for t in body["tools"]]
    return out


def messages_problems(body: Mapping[str, Any], first_role: str | None = "user") -> list[str]:
    """Why the provider would refuse ``body``'s turns: a tool_result answering no tool_use of
    the turn before, a tool_use left unanswered (but in the last turn), roles not
    alternating, more than MAX_BREAKPOINTS breakpoints, a first turn not ``first_role``."""
    problems: list[str] = []
    turns = body["messages"]
    if first_role and turns and turns[0]["role"] != first_role:
        problems.append(f"first turn is {turns[0]['role']}")
    open_ids: set[str] = set()
    for k, turn in enumerate(turns):
        blocks = turn["content"] if isinstance(turn["content"], list) else []
        if k and turn["role"] == turns[k - 1]["role"]:
            problems.append(f"turn {k}: two {turn['role']} turns in a row")
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if answered - open_ids:
            problems.append(f"turn {k}: orphan tool_result {sorted(answered - open_ids)}")
        if open_ids - answered:
            problems.append(f"turn {k}: tool_use without result {sorted(open_ids - answered)}")
        open_ids = {b["id"] for b in blocks if b.get("type") == "tool_use"} if turn["role"] == "assistant" else set()
    marks = sum(isinstance(b, dict) and "cache_control" in b for part in (body.get("system"), body.get("tools"))
                if isinstance(part, list) for b in part)
    marks += sum("cache_control" in b for t in turns if isinstance(t["content"], list) for b in t["content"])
    if marks > MAX_BREAKPOINTS:
        problems.append(f"{marks} cache_control breakpoints")
    return problems


def responses_problems(body: Mapping[str, Any]) -> list[str]:
    """Orphans of ``body``'s input: an output whose call is not before it, a call whose output
    never comes (but at the very end), for every item type carrying a call_id."""
    items = body["input"] if isinstance(body.get("input"), list) else []
    problems: list[str] = []
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            continue
        if str(item.get("type", "")).endswith("_output"):
            if call_id not in calls:
                problems.append(f"input[{i}]: orphan output {call_id!r}")
            answered.add(call_id)
        else:
            calls[call_id] = i
    last_call = max(calls.values(), default=-1)
    tail = {c for c, i in calls.items() if all(not str(x.get("type", "")).endswith("_output")
                                               for x in items[i + 1:])}
    for call_id, i in calls.items():
        if call_id not in answered and not (call_id in tail and i <= last_call and _only_calls_after(items, i)):
            problems.append(f"input[{i}]: call {call_id!r} without output")
    return problems


def _only_calls_after(items: list[Mapping[str, Any]], i: int) -> bool:
    """The calls the client is answering now: nothing but calls and reasoning after them."""
    return all(x.get("type") in ("function_call", "custom_tool_call", "reasoning") for x in items[i:])
