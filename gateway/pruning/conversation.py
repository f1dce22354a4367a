"""A request's messages rebuilt as units, with the task goal located.

A *unit* is the atom of pruning: one plain message, or an assistant message
with ``tool_calls`` (or a legacy ``function_call``) together with every
``tool`` / ``function`` message that answers it. Units are kept, masked or
dropped whole, so the forwarded request never holds an orphan.

Input that is already broken (a tool result answering nothing, a call left
unanswered in the middle) is reported in ``Conversation.problems`` and kept as
it came: Sieve never makes a broken chain worse, and never "fixes" a client's
history behind its back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gateway.pruning.messages import (
    SYSTEM_ROLES,
    content_text,
    fingerprint,
    readable_text,
    tool_call_ids,
    tool_names,
)

KIND_SYSTEM = "system"
KIND_USER = "user"
KIND_ASSISTANT = "assistant"
KIND_TOOL_CHAIN = "tool_chain"
KIND_BROKEN = "broken"  # orphan tool result or unanswered call, kept as received


@dataclass(slots=True)
class Unit:
    index: int                  # position among the units
    start: int                  # first original message index
    stop: int                   # one past the last original message index
    kind: str
    tokens: int
    text: str                   # what a scorer reads
    tool_names: tuple[str, ...] = ()
    tool_result_tokens: int = 0  # tokens in tool/function results (the maskable part)

    @property
    def indices(self) -> range:
        return range(self.start, self.stop)


@dataclass(slots=True)
class Conversation:
    messages: list[dict[str, Any]]
    tokens: list[int]           # per message
    fingerprints: list[str]     # per message
    units: list[Unit]
    goal_units: tuple[int, ...]  # unit indices that define the task
    goal_text: str
    current_request: str        # the newest user message: the current step
    last_user_unit: int | None
    problems: list[str] = field(default_factory=list)
    goal_explicit: bool = False

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def task_unit(self) -> int | None:
        """The newest user message that opens a turn (``opens_turn``): the task the running tool
        loop works on."""
        return next((u.index for u in reversed(self.units)
                     if u.kind == KIND_USER and opens_turn(self.messages, u.start)), None)


def build_conversation(
    messages: Sequence[Mapping[str, Any]],
    count_message,
    *,
    explicit_goal: str | None = None,
    fingerprints: Sequence[str] | None = None,
    tokens: Sequence[int] | None = None,
) -> Conversation:
    """Split ``messages`` into units and find the goal.

    ``count_message`` maps a message to its token count; pass precomputed
    ``fingerprints``/``tokens`` when the caller has them already.
    """
    msgs = list(messages)
    fps = list(fingerprints) if fingerprints is not None else [fingerprint(m) for m in msgs]
    toks = list(tokens) if tokens is not None else [count_message(m) for m in msgs]
    units: list[Unit] = []
    problems: list[str] = []
    i, n = 0, len(msgs)
    while i < n:
        msg = msgs[i]
        role = msg.get("role")
        start = i
        kind = KIND_USER if role == "user" else KIND_ASSISTANT
        if role in SYSTEM_ROLES:
            kind = KIND_SYSTEM
            i += 1
        elif role == "assistant" and (msg.get("tool_calls") or msg.get("function_call")):
            i = _chain_end(msgs, i, problems)
            kind = KIND_TOOL_CHAIN if not _chain_broken(msgs, start, i) else KIND_BROKEN
        elif role in ("tool", "function"):
            problems.append(f"[{i}] {role} message answers no call of the assistant message before it")
            kind = KIND_BROKEN
            i += 1
        else:
            i += 1
        units.append(_unit(len(units), msgs, toks, start, i, kind))

    goal_units, goal_text = _locate_goal(msgs, units, explicit_goal)
    last_user = next((u.index for u in reversed(units) if u.kind == KIND_USER), None)
    current = content_text(msgs[units[last_user].start].get("content")) if last_user is not None else ""
    return Conversation(msgs, toks, fps, units, goal_units, goal_text, current, last_user, problems,
                        goal_explicit=bool(explicit_goal))


def opens_turn(messages: Sequence[Mapping[str, Any]], index: int) -> bool:
    """Whether the user message at ``index`` opens a turn: one right after tool results is the
    text of the turn that carries them (Claude Code adds its reminders there; an interruption
    goes there too), so the loop it sits in goes on."""
    return index == 0 or messages[index - 1].get("role") not in ("tool", "function")


def _chain_end(msgs: list[Mapping[str, Any]], i: int, problems: list[str]) -> int:
    """Index one past the tool results that answer the call at ``i``."""
    call = msgs[i]
    if call.get("function_call") and not call.get("tool_calls"):
        j = i + 1
        while j < len(msgs) and msgs[j].get("role") == "function":
            j += 1
        if j == i + 1 and j < len(msgs):
            problems.append(f"[{i}] function_call without a function result")
        return j
    pending = set(tool_call_ids(call))
    j = i + 1
    while j < len(msgs) and msgs[j].get("role") == "tool":
        tid = msgs[j].get("tool_call_id")
        if tid not in pending:
            problems.append(f"[{j}] tool message {tid!r} answers no call of message {i}")
        pending.discard(tid)
        j += 1
    # A call still open at the very end is the one the client is answering now.
    if pending and j < len(msgs):
        problems.append(f"[{i}] tool_calls without results: {sorted(pending)}")
    return j


def _chain_broken(msgs: list[Mapping[str, Any]], start: int, stop: int) -> bool:
    call = msgs[start]
    if not call.get("tool_calls"):
        return stop == start + 1 and stop < len(msgs)
    ids = set(tool_call_ids(call))
    answered = [m.get("tool_call_id") for m in msgs[start + 1:stop]]
    return set(answered) != ids or len(answered) != len(set(answered))


def _unit(index: int, msgs, toks, start: int, stop: int, kind: str) -> Unit:
    texts: list[str] = []
    names: list[str] = []
    result_tokens = 0
    for j in range(start, stop):
        m = msgs[j]
        texts.append(readable_text(m))
        names.extend(tool_names(m))
        if m.get("role") in ("tool", "function"):
            result_tokens += toks[j]
    return Unit(index, start, stop, kind, sum(toks[start:stop]), "\n".join(texts),
                tuple(names), result_tokens)


def _locate_goal(msgs, units: list[Unit], explicit_goal: str | None) -> tuple[tuple[int, ...], str]:
    """The goal is the explicit one, or the system prompt + the first user message."""
    system_text = "\n".join(u.text for u in units if u.kind == KIND_SYSTEM)
    first_user = next((u for u in units if u.kind == KIND_USER), None)
    goal_units = (first_user.index,) if first_user is not None else ()
    if explicit_goal:
        return goal_units, explicit_goal
    first_text = first_user.text if first_user is not None else ""
    return goal_units, (system_text + "\n" + first_text).strip()
