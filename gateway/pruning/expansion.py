"""Reversible pruning: the refs that name what a forward left out, and what they restore.

With the policy's ``expand_tool`` on, every forward that masks or omits anything
carries one extra tool, ``sieve_expand`` (fixed text, placed after the client's
tools), and its omission markers name a ref; a mask names one already
(``ref <fingerprint8>``). The model can call the tool with a few refs; Sieve answers
the call itself (``gateway.expander``) and asks the provider again.

A ref is the first 8 hex digits of an original message's fingerprint:

* a masked tool result: its own message (the ref its mask shows);
* an omission marker: the first message of the span it stands for (the marker is
  placed at that message), and the ref restores every message of the span that is
  omitted.

Both depend only on the history the decision was taken on, which the frozen prefix
keeps, so the bytes of a decorated marker are the same on every replay: the
decoration is applied to the forwarded messages after the decision, never stored
in the plan (a policy that turns the tool off forwards the markers as they were).

The originals are the client's own history: it resends every message on every
request, and the frozen plan says which of them a ref stands for. A ref whose
messages are no longer in the request (an edited history, an expired plan) gets a
"not available" result, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import orjson

from gateway.pruning.compression import MASKED_PREFIX, OMITTED_PREFIX, is_omission_marker
from gateway.pruning.messages import content_text
from gateway.pruning.result import PruneResult
from gateway.pruning.vocabulary import DROPPED, MASKED

TOOL_NAME = "sieve_expand"
MAX_REFS_PER_CALL = 4
REF_CHARS = 8
TOOL_DESCRIPTION = (
    "Restore content that was left out of this conversation to save space. Markers such as "
    "'[sieve: masked ..., ref 1a2b3c4d ...]' or '[sieve: some earlier messages omitted, ref 1a2b3c4d ...]' "
    f"name a ref; call this with up to {MAX_REFS_PER_CALL} refs to read the original messages. "
    "Use it only when the content is needed for the task.")
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"refs": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_REFS_PER_CALL,
                            "description": "refs named in Sieve's markers"}},
    "required": ["refs"],
}
# The short line an omission marker gains when the tool is on (a mask already shows its ref).
REF_HINT = "sieve_expand restores it"
NOT_AVAILABLE = "not available: Sieve holds no content for this ref (unknown, or no longer in the conversation)"
# A tool result over this many characters is cut (the model asked for a few units, not the whole history).
MAX_RESULT_CHARS = 32_000


def ref_of(fingerprint: str) -> str:
    return fingerprint[:REF_CHARS]


@dataclass(slots=True)
class Expandable:
    """The forwarded messages with refs in their markers, and what each ref restores
    (original message indices, in order)."""

    messages: list[dict[str, Any]]
    refs: dict[str, list[int]] = field(default_factory=dict)

    @property
    def removed(self) -> bool:
        return bool(self.refs)


def expandable(result: PruneResult) -> Expandable:
    """``result``'s forwarded messages, each omission marker naming the ref of its span,
    and the index of every ref (masked messages and marker spans)."""
    forwarded = list(result.request.get("messages") or ())
    plan, actions = result.state, result.message_actions
    refs: dict[str, list[int]] = {}
    for j, action in enumerate(actions):
        if action == MASKED and j < len(plan.fingerprints):
            refs[ref_of(plan.fingerprints[j])] = [j]
    markers = [(pos, m) for pos, m in plan.inserts if is_omission_marker(m)]
    ends = [pos for pos, _ in markers[1:]] + [len(actions)]
    decorated: dict[str, dict[str, Any]] = {}
    for (pos, marker), end in zip(markers, ends):
        span = [j for j in range(pos, end) if actions[j] == DROPPED]
        if not span or pos >= len(plan.fingerprints):
            continue
        ref = ref_of(plan.fingerprints[pos])
        refs[ref] = span
        decorated[marker["content"]] = with_ref(marker, ref)
    inserted = [i for i, src in enumerate(result.sources) if src < 0]
    for i in inserted:
        content = forwarded[i].get("content")
        if isinstance(content, str) and content in decorated:
            forwarded[i] = decorated[content]
    return Expandable(forwarded, refs)


def with_ref(marker: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """The omission marker naming its ref (before its ids, which stay last: ``marker_ids``)."""
    content = str(marker["content"])
    rest = content[len(OMITTED_PREFIX):]
    return {**marker, "content": f"{OMITTED_PREFIX}, ref {ref}, {REF_HINT}{rest}"}


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
    """The tool result for ``refs``: each ref's original messages as text, or "not available";
    and how many refs were found."""
    parts, found = [], 0
    for ref in refs:
        indices = index.get(ref[:REF_CHARS].lower())
        if not indices or any(j >= len(messages) for j in indices):
            parts.append(f"ref {ref}: {NOT_AVAILABLE}")
            continue
        found += 1
        parts.append(f"ref {ref}:\n" + "\n".join(_as_text(messages[j]) for j in indices))
    text = "\n\n".join(parts) or f"no refs given: {NOT_AVAILABLE}"
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + "\n[sieve: cut]"
    return text, found


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
