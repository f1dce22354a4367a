"""Synthetic agent conversations for tests: tool chains (parallel calls too), bulky outputs, ids."""

from __future__ import annotations

import json
from typing import Any

SYSTEM = "You are a support agent for an online store. Use the tools to look up orders and users."
GOAL = "Please exchange the broken lamp in order #W1000001 for the same lamp in blue. Never refund to a gift card."


def agent_history(steps: int, *, parallel_every: int = 3, output_lines: int = 40) -> list[dict[str, Any]]:
    """system, task, then ``steps`` tool-calling steps each answered, with user turns in between."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}]
    for step in range(steps):
        ids = [f"call_{step}_{k}" for k in range(2 if step % parallel_every == 0 else 1)]
        calls = [{"id": cid, "type": "function",
                  "function": {"name": "get_order_details" if k == 0 else "get_product_details",
                               "arguments": json.dumps({"order_id": f"#W{1000000 + step}"})}}
                 for k, cid in enumerate(ids)]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for k, cid in enumerate(ids):
            rows = "\n".join(f"item {step}-{k}-{i}: sku {700000 + step * 100 + i}, price {10 + i}.99, "
                             f"status delivered, notes lorem ipsum dolor sit amet {i}" for i in range(output_lines))
            messages.append({"role": "tool", "tool_call_id": cid, "content": f"order #W{1000000 + step}\n{rows}"})
        messages.append({"role": "assistant", "content": f"I checked order #W{1000000 + step}."})
        messages.append({"role": "user", "content": f"Thanks. Now step {step + 1}: what about the next order?"})
    return messages


def call(name: str, arguments: dict, cid: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def reading_loop(steps: int) -> list[dict]:
    """An agent working alone on one task: each step reads a line range of a source file
    with a tool of its own schema, and the output is that range, numbered."""
    messages = [{"role": "system", "content": "You are a coding agent. Use the tools to fix the bug."},
                {"role": "user", "content": "The parser drops the last token of a quoted string. Fix it."}]
    for step in range(steps):
        start = 100 + 37 * step
        args = {"path": f"src/parser/mod{step % 4}.py", "start_line": start, "end_line": start + 40}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call("read_file", args, f"c{step}")]})
        body = "\n".join(f"{start + i:5d}    value_{step}_{i} = tokens[{i}] if quoted else None" for i in range(40))
        messages.append({"role": "tool", "tool_call_id": f"c{step}", "content": body})
    return messages
