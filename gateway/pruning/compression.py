"""Masks and markers: the deterministic text that stands in for removed content.

No timestamps, no random ids, stable wording: the same decision on the same
message yields the same bytes, so the provider's prompt cache keeps hitting.
Markers stay tiny; a long placeholder eats the saving it announces.
"""

from __future__ import annotations

from typing import Any, Mapping

MASKED_PREFIX = "[sieve: tool output masked"


def masked_message(message: Mapping[str, Any], tokens: int, fingerprint: str) -> dict[str, Any]:
    """The tool message with its content replaced; role and tool_call_id stay, so the chain stays valid."""
    masked = dict(message)
    masked["content"] = f"{MASKED_PREFIX}: {tokens} tokens, ref {fingerprint[:10]}]"
    return masked


def dropped_marker(messages: int, tokens: int) -> dict[str, Any]:
    noun = "message" if messages == 1 else "messages"
    return {"role": "user",
            "content": f"[sieve: {messages} earlier {noun} ({tokens} tokens) omitted as not relevant to the current step]"}


def goal_reminder(goal: str, max_chars: int) -> dict[str, Any]:
    text = " ".join(goal.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return {"role": "user", "content": f"[sieve: task reminder] {text}"}


def is_maskable(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("tool", "function") and isinstance(message.get("content"), (str, list))
