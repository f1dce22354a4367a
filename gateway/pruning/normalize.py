"""OpenAI's structural rules for ``messages``, checked on what Sieve forwards.

Rules: system/developer messages only before the conversation; every tool
message answers a call of the assistant message just before it; no call left
unanswered (except a final one); no empty user content.

Sieve works on whole units, so its edits cannot break these rules; this check
is the proof on every request. A problem that was not in the input means a
bug: the pipeline then forwards the request unpruned (fail-open) and says so.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gateway.pruning.messages import SYSTEM_ROLES, content_text, tool_call_ids


class InvariantViolation(Exception):
    """Pruning produced a request that breaks a rule its input did not break."""


def structural_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems, each as 'kind: detail', in message order."""
    problems: list[str] = []
    seen_conversation = False
    pending: set[str] = set()
    pending_at = -1
    for i, m in enumerate(messages):
        role = m.get("role")
        if role != "tool" and pending:
            problems.append(f"unanswered call: message {pending_at} {sorted(pending)}")
            pending = set()
        if role in SYSTEM_ROLES:
            if seen_conversation:
                problems.append(f"late system message: {i}")
            continue
        seen_conversation = True
        if role == "user" and not content_text(m.get("content")).strip() and not _has_media(m):
            problems.append(f"empty user content: {i}")
        elif role == "assistant":
            ids = tool_call_ids(m)
            if ids:
                pending, pending_at = set(ids), i
        elif role == "tool":
            tid = m.get("tool_call_id")
            if tid not in pending:
                problems.append(f"orphan tool result: {i} {tid!r}")
            pending.discard(tid)
    return problems


def check_no_new_problems(original: Sequence[Mapping[str, Any]], forwarded: Sequence[Mapping[str, Any]]) -> None:
    """Raise InvariantViolation if ``forwarded`` has a kind of problem ``original`` had fewer of."""
    before = _kinds(structural_problems(original))
    after = _kinds(structural_problems(forwarded))
    worse = {k: n for k, n in after.items() if n > before.get(k, 0)}
    if worse:
        raise InvariantViolation(f"pruning introduced {worse}")


def _kinds(problems: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in problems:
        kind = p.split(":", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _has_media(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") not in (None, "text") for p in content
    )
