"""Masks and markers: the deterministic text that stands in for removed content.

No timestamps, no random ids, stable wording: the same decision on the same
message yields the same bytes, so the provider's prompt cache keeps hitting.
Markers stay tiny; a long placeholder eats the saving it announces.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

import orjson

from gateway.pruning.messages import content_text

MASKED_PREFIX = "[sieve: tool output masked"
MAX_KEPT_VALUES = 48

# Values an agent's next call reuses verbatim: ids, codes, amounts, e-mails.
_AMOUNT = re.compile(r"-?\d{1,4}(?:\.\d+)?")
_ID_LIKE = re.compile(r"#?[A-Za-z_]*\d[\w.\-@]*|[\w.+-]+@[\w-]+\.[\w.]+")


def masked_message(message: Mapping[str, Any], tokens: int, fingerprint: str) -> dict[str, Any]:
    """The tool message with its bulk replaced; role and tool_call_id stay, so the chain stays valid.

    The exact ids of the output survive in the marker: an old order listing
    shrinks to the order, item and payment ids a later call may still need, at
    a fraction of its size. Amounts and plain words do not survive.
    """
    masked = dict(message)
    values = kept_values(content_text(message.get("content")))
    kept = f"; kept values: {' '.join(values)}" if values else ""
    masked["content"] = f"{MASKED_PREFIX}: {tokens} tokens, ref {fingerprint[:10]}{kept}]"
    return masked


def kept_values(text: str) -> list[str]:
    """Id-like values of a tool output, first occurrence first, deduplicated."""
    seen: dict[str, None] = {}
    stripped = text.strip()
    pairs: Iterator[str]
    if stripped[:1] in "[{":
        try:
            pairs = _json_leaves(orjson.loads(stripped), "")
        except orjson.JSONDecodeError:
            pairs = _plain_ids(text)
    else:
        pairs = _plain_ids(text)
    for item in pairs:
        if len(item) >= 3 and item not in seen:
            seen[item] = None
            if len(seen) >= MAX_KEPT_VALUES:
                break
    return list(seen)


def _plain_ids(text: str) -> Iterator[str]:
    return (t for t in _ID_LIKE.findall(text) if not _AMOUNT.fullmatch(t))


def _json_leaves(value: Any, key: str) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if _ID_LIKE.fullmatch(str(k)):
                yield str(k)  # ids used as keys (payment methods by id)
            yield from _json_leaves(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _json_leaves(v, key)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        yield str(value)  # large integers are ids; small ones and floats are amounts
    elif isinstance(value, str) and _ID_LIKE.fullmatch(value) and not _AMOUNT.fullmatch(value):
        yield value


DROPPED_MARKER = "[sieve: earlier messages from here on were omitted as not relevant to the current step]"


def dropped_marker() -> dict[str, Any]:
    """One marker before the first omitted span. Its text never changes (no counts):
    a later epoch that omits more must not change bytes the provider has cached."""
    return {"role": "user", "content": DROPPED_MARKER}


def goal_reminder(goal: str, max_chars: int) -> dict[str, Any]:
    text = " ".join(goal.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return {"role": "user", "content": f"[sieve: task reminder] {text}"}


def is_maskable(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("tool", "function") and isinstance(message.get("content"), (str, list))
