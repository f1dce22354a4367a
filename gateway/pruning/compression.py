"""Masks and markers: the deterministic text that stands in for removed content.

No timestamps, no random ids, stable wording: the same decision on the same
message yields the same bytes, so the provider's prompt cache keeps hitting.
Markers stay tiny; a long placeholder eats the saving it announces.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gateway.pruning.conversation import KIND_USER, Conversation
from gateway.pruning.ids import field_codes, strong_ids, text_ids
from gateway.pruning.messages import content_text
from gateway.pruning.policy import Policy

MASKED_PREFIX = "[sieve: masked"
MAX_KEPT_VALUES = 48  # about 200 tokens: a mask stays a fraction of the output it replaces
MAX_KEPT_CODES = 16   # and after them, a record's codes (``ids.field_codes``)
MAX_NAMED_VALUES = 120  # a mask with every value (``named_values``): a source file's names, about 500 tokens


def masked_message(message: Mapping[str, Any], tokens: int, fingerprint: str, keep_ids: bool = True,
                   lines: Sequence[str] = (), every_value: bool = False) -> dict[str, Any]:
    """The tool message with its bulk replaced; role and tool_call_id stay, so the chain stays valid.

    The exact ids of the output survive in the marker: an old order listing
    shrinks to the order, item and payment ids a later call may still need, at
    a fraction of its size. Amounts and plain words do not survive, except in
    ``lines``: the few lines of the output that bear on the current step
    (``gateway.pruning.key_lines``), verbatim. With ``every_value``, the names of code
    and codes the output holds stay too (``named_values``).
    """
    masked = dict(message)
    text = content_text(message.get("content"))
    values = (named_values(text) if every_value else kept_values(text)) if keep_ids else ()
    kept = f"; ids: {' '.join(values)}" if values else ""
    if lines and keep_ids:
        kept += "; lines:\n" + "\n".join(lines)
    masked["content"] = f"{MASKED_PREFIX} {tokens} tokens, ref {fingerprint[:8]}{kept}]"
    return masked


def kept_values(text: str) -> list[str]:
    """The exact values of a tool output that name one record (``values.is_strong``: a
    digit, an @, a /: ids, e-mails, paths, dates), in the order of first occurrence,
    at most MAX_KEPT_VALUES; then up to MAX_KEPT_CODES codes that are whole field
    values of a structured output (a fare class, a state, an airport). Codes in
    capitals and names of code in prose or code stay out: a mask repeats on every
    step, and there they more often name a kind of thing (USB, a field) than the
    record; omission markers still list them, ranked after."""
    return list(strong_ids(text)[:MAX_KEPT_VALUES]) + list(field_codes(text)[:MAX_KEPT_CODES])


def named_values(text: str) -> list[str]:
    """``kept_values``, then the output's other values (names of code, codes), first
    occurrence first, up to MAX_NAMED_VALUES in all: what a mask keeps of the last view of
    a thing the agent works on (the file it edits: the names its next edit copies), where
    the room allows (``decision._with_key_lines``)."""
    kept = kept_values(text)
    seen = set(kept)
    return (kept + [v for v in text_ids(text) if v not in seen])[:MAX_NAMED_VALUES]


OMITTED_PREFIX = "[sieve: some earlier messages omitted"
DROPPED_MARKER = OMITTED_PREFIX + "]"


CALLS_HEAD = "; calls:\n"
IDS_HEAD = "; ids: "


def dropped_marker(ids: Sequence[str] = (), calls: Sequence[str] = ()) -> dict[str, Any]:
    """The marker before an omitted span, with the short calls the span made and the
    exact ids it held (if any).

    No counts and no positions: the text depends only on what was omitted, and it
    is frozen with the decision, so a later epoch that omits more never changes
    bytes the provider has cached; it adds a marker of its own further down.
    ``calls`` (``gateway.pruning.omitted_calls``): one line each, before the ids, which
    stay last (``marker_ids``).
    """
    listed = CALLS_HEAD + "\n".join(calls) if calls else ""
    if ids:
        listed += f"{IDS_HEAD}{' '.join(ids)}"
    return {"role": "user", "content": f"{OMITTED_PREFIX}{listed}]"}


SUMMARY_PREFIX = "[sieve: summary of omitted messages]"


def marker_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids an omission marker lists (none for a plain one): after its last ids head
    (a listed call never holds one: ``omitted_calls``)."""
    content = message.get("content")
    if not is_omission_marker(message) or IDS_HEAD not in content:
        return []
    return content.rsplit(IDS_HEAD, 1)[1].rstrip("]").split()


def marker_calls(message: Mapping[str, Any]) -> list[str]:
    """The calls an omission marker lists, one a line (none for a plain one)."""
    content = message.get("content")
    if not is_omission_marker(message) or CALLS_HEAD not in content:
        return []
    listed = content.split(CALLS_HEAD, 1)[1]
    listed = listed.rsplit(IDS_HEAD, 1)[0] if IDS_HEAD in listed else listed[:-1]
    return listed.split("\n")


def is_omission_marker(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(OMITTED_PREFIX)


def is_marker(message: Mapping[str, Any]) -> bool:
    """An omission marker, or the summary that replaced one."""
    content = message.get("content")
    return is_omission_marker(message) or (
        message.get("role") == "user" and isinstance(content, str) and content.startswith(SUMMARY_PREFIX))


def summary_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{text.strip()}"}


def goal_reminder(goal: str, max_chars: int) -> dict[str, Any]:
    text = " ".join(goal.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return {"role": "user", "content": f"[sieve: task reminder] {text}"}


def is_maskable(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("tool", "function") and isinstance(message.get("content"), (str, list))


def task_reminder(conv: Conversation, policy: Policy) -> dict[str, Any] | None:
    """A one-line task reminder: the explicit goal, else the task-defining first user
    message (the system prompt is long and stays at the top anyway)."""
    if not policy.goal_reminder:
        return None
    first_user = next((u for u in conv.units if u.kind == KIND_USER), None)
    text = conv.goal_text if conv.goal_explicit else (first_user.text if first_user else "")
    return goal_reminder(text, policy.goal_reminder_max_chars) if text.strip() else None
