"""What ``sieve_expand`` restores: the tool's text, the index of a forward's refs, a call's answer.

The pure part of reversible pruning (no I/O, like ``gateway.pruning``, whose markers
name the refs: ``gateway.pruning.marker_refs``). With the policy's ``expand_tool`` on,
every forward that masks or omits anything carries one extra tool, ``sieve_expand``
(fixed text, placed after the client's tools); the model can call it with a few refs,
and Sieve answers the call itself (``gateway.expand.rounds``) and asks the provider again.

What a ref restores:

* a masked tool result: that message;
* an omission marker's ref: every message of the span that is omitted, or, for a span
  too long to show whole, the list of its units with their own refs, so any omitted
  fact is two rounds away at most;
* anything else a call names (an id a marker lists): the omitted units holding it.

The originals are the client's own history: it resends every message on every
request, and the frozen plan says which of them a ref stands for. A ref whose
messages are no longer in the request (an edited history, an expired plan) gets a
"not available" result, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import orjson

from gateway.pruning import (MASKED_PREFIX, Action, PruneResult, content_text, fingerprint, marker_spans, ref_of,
                             with_refs)

TOOL_NAME = "sieve_expand"
MAX_REFS_PER_CALL = 4
TOOL_DESCRIPTION = (
    "Read back content Sieve left out of this conversation to save space: pass the refs that markers "
    f"such as '[sieve: masked ..., ref 1a2b3c4d]' name (at most {MAX_REFS_PER_CALL}). Only when it is needed.")
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"refs": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_REFS_PER_CALL}},
    "required": ["refs"],
}
NOT_AVAILABLE = "not available: Sieve holds no content for this ref (unknown, or no longer in the conversation)"
# A tool result over this many characters is cut (the model asked for a few units, not the whole history).
MAX_RESULT_CHARS = 32_000


@dataclass(slots=True)
class Expandable:
    """The forwarded messages with refs in their markers, and what each ref restores
    (original message indices, in order)."""

    messages: list[dict[str, Any]]
    refs: dict[str, list[int]] = field(default_factory=dict)

    @property
    def removed(self) -> bool:
        return bool(self.refs)


def expandable(result: PruneResult, messages: Sequence[Mapping[str, Any]]) -> Expandable:
    """``result``'s forwarded messages, each omission marker naming the ref of its span,
    and the index of every ref: masked messages, marker spans, and each unit of a span
    (a call with its results, or one message), which a span too long to show whole
    lists (``restore``). ``messages``: the original ones."""
    forwarded = list(result.request.get("messages") or ())
    plan, actions = result.state, result.message_actions
    refs: dict[str, list[int]] = {}
    for j, action in enumerate(actions):
        if action == Action.MASKED and j < len(plan.fingerprints):
            refs[ref_of(plan.fingerprints[j])] = [j]
    spans = marker_spans(plan.inserts, actions, plan.fingerprints)
    for _, _, ref, span in spans:
        for unit in units_of(span, messages):
            refs.setdefault(ref_of(plan.fingerprints[unit[0]]), unit)
        refs[ref] = span
    return Expandable(with_refs(forwarded, result.sources, spans), refs)


def units_of(indices: Sequence[int], messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """``indices`` (in order) grouped into units: a tool result goes with the call before it."""
    units: list[list[int]] = []
    for j in indices:
        if units and messages[j].get("role") in ("tool", "function") and units[-1][-1] == j - 1:
            units[-1].append(j)
        else:
            units.append([j])
    return units


def refs_of_call(arguments: Any) -> list[str]:
    """The refs one call asks for (its arguments as JSON text or an object), at most
    MAX_REFS_PER_CALL, deduplicated; junk arguments ask for nothing."""
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = orjson.loads(arguments or b"{}")
        except orjson.JSONDecodeError:
            return []
    refs = arguments.get("refs") if isinstance(arguments, dict) else None
    if isinstance(refs, str):
        refs = refs.replace(",", " ").split()
    out: list[str] = []
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, str) and ref.strip() and ref.strip() not in out:
            out.append(ref.strip())
    return out[:MAX_REFS_PER_CALL]


def restore(refs: Iterable[str], index: Mapping[str, Sequence[int]],
            messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The tool result for ``refs``: each ref's original messages as text; a span too long
    to show whole, the list of its units with their own refs and first words (the model
    asks for those next); an id the markers list (anything else), the omitted units that
    hold it, newest first; else "not available". Also how many refs were found."""
    refs = list(refs)
    parts, found = [], 0
    room = MAX_RESULT_CHARS // max(1, len(refs))
    for ref in refs:
        text = _restored(ref, index, messages, room)
        found += text is not None
        parts.append(f"ref {ref}:\n{text}" if text is not None else f"ref {ref}: {NOT_AVAILABLE}")
    text = "\n\n".join(parts) or f"no refs given: {NOT_AVAILABLE}"
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + "\n[sieve: cut]"
    return text, found


def _restored(ref: str, index: Mapping[str, Sequence[int]], messages: Sequence[Mapping[str, Any]],
              room: int) -> str | None:
    indices = index.get(ref.strip().lower().removeprefix("ref ").strip())
    if indices is not None:
        if any(j >= len(messages) for j in indices):
            return None
        text = "\n".join(_as_text(messages[j]) for j in indices)
        return text if len(text) <= room else _unit_list(indices, messages, room)
    if len(ref.strip()) < 3:
        return None
    # An id a marker lists: the omitted or masked units that hold it, newest first.
    omitted = sorted({j for js in index.values() for j in js if j < len(messages)})
    holding = [u for u in units_of(omitted, messages) if any(ref in _as_text(messages[j]) for j in u)]
    if not holding:
        return None
    out: list[str] = []
    for unit in reversed(holding):
        text = "\n".join(_as_text(messages[j]) for j in unit)
        if out and sum(map(len, out)) + len(text) > room:
            break
        out.append(text[:room])
    return "\n".join(reversed(out))


def _unit_list(indices: Sequence[int], messages: Sequence[Mapping[str, Any]], room: int) -> str:
    """A span too long to show whole: its units, each with its ref and first words."""
    lines = [f"too long to show whole ({len(indices)} messages); its parts, to ask for by ref:"]
    for unit in units_of(indices, messages):
        gist = " ".join(_as_text(messages[unit[0]]).split())[:100]
        lines.append(f"ref {ref_of(fingerprint(messages[unit[0]]))}: {gist}")
    text = "\n".join(lines)
    return text if len(text) <= room else text[:room] + "\n[sieve: cut]"


def _as_text(message: Mapping[str, Any]) -> str:
    """One original message as the model reads it: who said it, what it called, its text."""
    role = str(message.get("role"))
    calls = [c.get("function", {}) for c in message.get("tool_calls") or () if isinstance(c, dict)]
    said = content_text(message.get("content")) if message.get("content") is not None else ""
    if said.startswith(MASKED_PREFIX):  # never the case for an original, but a mask is no content
        said = ""
    lines = [f"[{role}] {said}".rstrip()]
    lines += [f"  call {c.get('name')}({c.get('arguments', '')})" for c in calls if isinstance(c, dict)]
    return "\n".join(lines)
