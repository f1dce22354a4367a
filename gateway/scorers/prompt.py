"""The scoring prompt: what the cheap model reads for one batch of units.

::

    view = UnitView.of(conversation, unit_index, max_chars=1000)
    messages = batch_messages(conversation, [view, ...], window, context_chars=1500)
    # [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "FINAL GOAL ..."}]

Deterministic: the same units give the same bytes (so providers' prompt
caches hit on the fixed system part, and the score cache key is stable).
Units are shown as ``[id] (role/type, tool name) text`` where ``id`` is the
unit's index in the conversation; long contents keep a head and a tail.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gateway.pruning import Conversation, KIND_BROKEN, KIND_SYSTEM, KIND_TOOL_CHAIN, content_text, tool_call_text

# Bump when the prompt's meaning changes: cached scores of the old prompt stop matching.
PROMPT_VERSION = "v1"

SYSTEM_PROMPT = """\
You are the memory manager of an AI agent. The agent's context window is limited, so older \
messages of its conversation are removed unless they are still needed. Rate how much each \
listed message is still worth to the task, judged against the FINAL GOAL and the CURRENT STEP.

Rubric (integer score):
5 = decides success: a user constraint or requirement, a unique id / number / name, key data \
the task needs exactly.
4 = affects the next key steps.
3 = useful background.
2 = weakly related; drop first.
1 = unrelated to the goal and the current step.

Criteria, in this order:
1. Topic: is it about what the final goal or the current step is about?
2. Entities: does it hold ids, file names, APIs, plan names, people, places, dates or numbers \
that the current step mentions or will need verbatim?
3. Intent continuation: is it followed up, corrected or reversed later ("plan A won't work", \
"use the other address")? The original and its correction both matter.
4. Recency: only to break ties between otherwise equal messages.

Be strict: most old messages are no longer needed. Greetings, thanks, acknowledgements, small \
talk, tool output that a newer result repeats or supersedes, and finished side tasks score 1-2, \
however long or polite. Give 5 only if losing the message would make the task fail.
Examples: "Thanks, that helps!" -> 1. A chat about the weather while the task is a refund -> 1. \
An older search result replaced by a newer one -> 2. "Never refund to a gift card" -> 5. \
"Order #W123 ships to 12 Main St" when the step concerns order #W123 -> 5.

Output only this JSON object, nothing else:
{"scores": [{"id": <id>, "score": <1-5>, "reason": "<at most 8 words>"}, ...]}
One entry for every listed id, exactly once, in the listed order. Do not skip any message."""

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class UnitView:
    """One unit as the scorer model reads it (already cut to length)."""

    id: int
    label: str      # "user/message", "assistant/tool call + result, tools: a, b", ...
    text: str

    @classmethod
    def of(cls, conv: Conversation, index: int, max_chars: int) -> "UnitView":
        unit = conv.units[index]
        return cls(index, _label(unit.kind, conv.messages[unit.start].get("role"), unit.tool_names),
                   head_tail(_unit_text(conv, index), max_chars))

    def line(self) -> str:
        return f"[{self.id}] ({self.label}) {self.text}"

    @property
    def content_hash(self) -> str:
        """What the score depends on in the unit itself (its rendering, not its position)."""
        return hashlib.blake2b(f"{self.label}\x00{self.text}".encode(), digest_size=12).hexdigest()


def batch_messages(conv: Conversation, views: Sequence[UnitView], window: Sequence[int],
                   *, context_chars: int, text_chars: int = 1500) -> list[dict[str, Any]]:
    """The chat messages of one scoring call."""
    goal = head_tail(_flat(conv.goal_text), text_chars) or "(not stated)"
    step = head_tail(_flat(conv.current_request), text_chars)
    if not step or _flat(conv.current_request) == _flat(conv.goal_text):
        step = "(the same as the final goal)"
    parts = [f"FINAL GOAL (with every hard requirement):\n{goal}",
             f"CURRENT STEP (the newest user request):\n{step}"]
    context = recent_context(conv, window, context_chars)
    if context:
        parts.append("RECENT CONTEXT (kept anyway; for reference, do not score):\n" + context)
    parts.append("MESSAGES TO SCORE:\n" + "\n".join(v.line() for v in views))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def recent_context(conv: Conversation, window: Sequence[int], max_chars: int) -> str:
    """The protected recent units, newest kept first when cut, in time order."""
    if max_chars <= 0:
        return ""
    lines: list[str] = []
    room = max_chars
    per_unit = max(max_chars // 4, 120)
    for i in reversed(list(window)):
        unit = conv.units[i]
        if unit.kind == KIND_SYSTEM:
            continue
        view = UnitView(i, _label(unit.kind, conv.messages[unit.start].get("role"), unit.tool_names),
                        head_tail(_unit_text(conv, i), min(per_unit, room)))
        line = f"({view.label}) {view.text}"
        if len(line) > room:
            break
        lines.append(line)
        room -= len(line) + 1
    return "\n".join(reversed(lines))


def head_tail(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars``: two thirds head, one third tail."""
    if len(text) <= max_chars:
        return text
    marker = f" … [{len(text) - max_chars} chars cut] … "
    head = max((max_chars * 2) // 3, 1)
    tail = max(max_chars - head, 0)
    return text[:head].rstrip() + marker + (text[-tail:].lstrip() if tail else "")


def context_key(model: str, conv: Conversation) -> str:
    """The part of a score cache key shared by all units of a request: scorer model,
    prompt version, goal and current step (the task staying the same)."""
    h = hashlib.blake2b(digest_size=12)
    for part in (PROMPT_VERSION, model, _flat(conv.goal_text), _flat(conv.current_request)):
        h.update(part.encode() + b"\x00")
    return h.hexdigest()


def _unit_text(conv: Conversation, index: int) -> str:
    unit = conv.units[index]
    pieces = []
    for j in unit.indices:
        m = conv.messages[j]
        pieces.append(_message_text(m))
    return _flat(" | ".join(p for p in pieces if p))


def _message_text(m: Mapping[str, Any]) -> str:
    role = m.get("role")
    text = content_text(m.get("content"))
    if role in ("tool", "function"):
        return f"result: {text}"
    calls = tool_call_text(m)
    if calls:
        pairs = [f"{calls[k]}({calls[k + 1]})" for k in range(0, len(calls) - 1, 2)]
        call_text = "call " + "; ".join(pairs)
        return f"{text} {call_text}".strip()
    return text


def _label(kind: str, role: Any, tools: tuple[str, ...]) -> str:
    names = ", ".join(dict.fromkeys(tools))
    if kind == KIND_TOOL_CHAIN:
        return f"assistant/tool call + result, tool: {names}" if names else "assistant/tool call + result"
    if kind == KIND_BROKEN:
        return f"{role}/unmatched tool message" + (f", tool: {names}" if names else "")
    return f"{role}/message"


def _flat(text: str) -> str:
    return _SPACES.sub(" ", text).strip()
