"""Masks and markers: the deterministic text that stands in for removed content.

No timestamps, no random ids, stable wording: the same decision on the same
message yields the same bytes, so the provider's prompt cache keeps hitting.
Markers stay tiny; a long placeholder eats the saving it announces.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from gateway.pruning.messages import content_text

MASKED_PREFIX = "[sieve: masked"
MAX_KEPT_VALUES = 48

# Values an agent's next call reuses verbatim: ids, codes, amounts, e-mails.
_AMOUNT = re.compile(r"-?\d{1,4}(?:\.\d+)?|-?\d+\.\d{1,2}")
_THREE_DIGITS = re.compile(r"\d\D*\d\D*\d")
_TOKEN = re.compile(r"[#\w.+@\-]+")  # then kept if it has three digits (no backtracking)


def masked_message(message: Mapping[str, Any], tokens: int, fingerprint: str) -> dict[str, Any]:
    """The tool message with its bulk replaced; role and tool_call_id stay, so the chain stays valid.

    The exact ids of the output survive in the marker: an old order listing
    shrinks to the order, item and payment ids a later call may still need, at
    a fraction of its size. Amounts and plain words do not survive.
    """
    masked = dict(message)
    values = kept_values(content_text(message.get("content")))
    kept = f"; ids: {' '.join(values)}" if values else ""
    masked["content"] = f"{MASKED_PREFIX} {tokens} tokens, ref {fingerprint[:8]}{kept}]"
    return masked


def kept_values(text: str) -> list[str]:
    """Id-like values of a tool output (three digits or more; amounts and short
    numbers excluded), first occurrence first, deduplicated. One regex pass:
    this runs on every tool output of a conversation at each epoch."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text):
        token = token.strip(".-")
        if token not in seen and _THREE_DIGITS.search(token) and not _AMOUNT.fullmatch(token):
            seen[token] = None
            if len(seen) >= MAX_KEPT_VALUES:
                break
    return list(seen)


DROPPED_MARKER = "[sieve: some earlier messages omitted]"


def dropped_marker() -> dict[str, Any]:
    """One marker before the first omitted span. Its text never changes (no counts):
    a later epoch that omits more must not change bytes the provider has cached."""
    return {"role": "user", "content": DROPPED_MARKER}


SUMMARY_PREFIX = "[sieve: summary of omitted messages]"


def is_marker(message: Mapping[str, Any]) -> bool:
    """An omission marker, or the summary that replaced one."""
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and (
        content == DROPPED_MARKER or content.startswith(SUMMARY_PREFIX))


def summary_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{text.strip()}"}


def goal_reminder(goal: str, max_chars: int) -> dict[str, Any]:
    text = " ".join(goal.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return {"role": "user", "content": f"[sieve: task reminder] {text}"}


def is_maskable(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("tool", "function") and isinstance(message.get("content"), (str, list))
