"""Reversible pruning: the refs that name what a forward left out, and what they restore.

With the policy's ``expand_tool`` on, every forward that masks or omits anything
carries one extra tool, ``sieve_expand`` (fixed text, placed after the client's
tools), and its omission markers name a ref; a mask names one already
(``ref <fingerprint8>``). The model can call the tool with a few refs; Sieve answers
the call itself (``gateway.expander``) and asks the provider again.

A ref is 8 hex digits:

* a masked tool result: its message's fingerprint (the ref its mask shows);
* an omission marker: a hash of the fingerprint of the span's first message and its
  place (the marker is placed at that message); the ref restores every message of the span
  that is omitted, or, for a span too long to show whole, lists its units;
* a unit of a span (a call and its results, or one message): its first message's
  fingerprint, named in that list, so any omitted fact is two rounds away at most;
* anything else a call names (an id a marker lists): the omitted units holding it.

Both depend only on the history the decision was taken on, which the frozen prefix
keeps, so the bytes of a decorated marker are the same on every replay: the
decoration is applied to the forwarded messages after the decision, never stored
in the plan (a policy that turns the tool off forwards the markers as they were).
Its room is held under the target all the same: with the tool on, the decision counts
each marker as decorated (``with_refs``: the same bytes) and the pipeline counts the
forward so (``gateway.pruning.pipeline``).

The originals are the client's own history: it resends every message on every
request, and the frozen plan says which of them a ref stands for. A ref whose
messages are no longer in the request (an edited history, an expired plan) gets a
"not available" result, never an error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import orjson

from gateway.pruning.compression import MASKED_PREFIX, OMITTED_PREFIX, is_omission_marker
from gateway.pruning.messages import content_text, fingerprint
from gateway.pruning.result import PruneResult
from gateway.pruning.vocabulary import DROPPED, MASKED, Action

TOOL_NAME = "sieve_expand"
MAX_REFS_PER_CALL = 4
REF_CHARS = 8
TOOL_DESCRIPTION = (
    "Read back content Sieve left out of this conversation to save space: pass the refs that markers "
    f"such as '[sieve: masked ..., ref 1a2b3c4d]' name (at most {MAX_REFS_PER_CALL}). Only when it is needed.")
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"refs": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_REFS_PER_CALL}},
    "required": ["refs"],
}
# The short line an omission marker gains when the tool is on (a mask already shows its ref).
REF_HINT = "sieve_expand restores it"
NOT_AVAILABLE = "not available: Sieve holds no content for this ref (unknown, or no longer in the conversation)"
# A tool result over this many characters is cut (the model asked for a few units, not the whole history).
MAX_RESULT_CHARS = 32_000


def ref_of(fingerprint: str) -> str:
    return fingerprint[:REF_CHARS]


def span_ref(first: str, position: int) -> str:
    """The ref of an omitted span, from the fingerprint of the message it starts at and
    that message's place in the history (the span's first unit has the message's own
    ref: the two must differ). The place tells two spans apart whose first messages are
    alike (an agent's "How can I help you today?" opening each task); the history before
    it is the frozen prefix, so the place is as stable as the bytes."""
    return ref_of(hashlib.blake2b(b"span\x00%d\x00" % position + first.encode(), digest_size=12).hexdigest())


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
        if action == MASKED and j < len(plan.fingerprints):
            refs[ref_of(plan.fingerprints[j])] = [j]
    spans = marker_spans(plan.inserts, actions, plan.fingerprints)
    for _, _, ref, span in spans:
        for unit in units_of(span, messages):
            refs.setdefault(ref_of(plan.fingerprints[unit[0]]), unit)
        refs[ref] = span
    return Expandable(with_refs(forwarded, result.sources, spans), refs)


def shown_with_refs(result: PruneResult) -> PruneResult:
    """``result`` with its forwarded messages as the expander sends them (each omission
    marker naming its ref), for a dry run to show: no index of refs, as it answers no call."""
    if not result.changed:
        return result
    plan = result.state
    spans = marker_spans(plan.inserts, result.message_actions, plan.fingerprints)
    result.request = {**result.request,
                      "messages": with_refs(result.request.get("messages") or (), result.sources, spans)}
    return result


def marker_spans(inserts: Sequence[tuple[int, Mapping[str, Any]]], actions: Sequence[Action],
                 fingerprints: Sequence[str]) -> list[tuple[int, Mapping[str, Any], str, list[int]]]:
    """Each omission marker among a plan's ``inserts`` that stands for something: its
    rank among the plan's omission markers, the marker, the ref it names and the
    original messages its span omits (up to the next marker). ``actions``: every
    original message's."""
    markers = [(pos, m) for pos, m in inserts if is_omission_marker(m)]
    ends = [pos for pos, _ in markers[1:]] + [len(actions)]
    out = []
    for rank, ((pos, marker), end) in enumerate(zip(markers, ends)):
        span = [j for j in range(pos, end) if actions[j] == DROPPED]
        if span and pos < len(fingerprints):
            out.append((rank, marker, span_ref(fingerprints[pos], pos), span))
    return out


def refs_tokens(forwarded: Sequence[Mapping[str, Any]], sources: Sequence[int],
                spans: Sequence[tuple[int, Mapping[str, Any], str, list[int]]],
                count: Callable[[Mapping[str, Any]], int]) -> int:
    """The tokens the spans' refs add to ``forwarded``'s markers, by ``count``: only the
    markers change, so only they are counted again."""
    named = with_refs(forwarded, sources, spans)
    return sum(count(m) - count(o) for m, o in zip(named, forwarded) if m is not o)


def with_refs(forwarded: Sequence[dict[str, Any]], sources: Sequence[int],
              spans: Sequence[tuple[int, Mapping[str, Any], str, list[int]]]) -> list[dict[str, Any]]:
    """``forwarded`` with each inserted omission marker naming the ref of its span
    (``marker_spans``): the bytes the expander forwards, which the decision counts too.
    A marker is known by its rank: the forward inserts the plan's markers in the plan's
    order, and two plain markers have the same text, each naming its own span."""
    decorated = {rank: (str(marker["content"]), with_ref(marker, ref)) for rank, marker, ref, _ in spans}
    out = list(forwarded)
    rank = 0
    for i, src in enumerate(sources):
        if src >= 0 or not is_omission_marker(out[i]):
            continue
        text, marked = decorated.get(rank, (None, None))
        if out[i].get("content") == text:
            out[i] = marked
        rank += 1
    return out


def units_of(indices: Sequence[int], messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """``indices`` (in order) grouped into units: a tool result goes with the call before it."""
    units: list[list[int]] = []
    for j in indices:
        if units and messages[j].get("role") in ("tool", "function") and units[-1][-1] == j - 1:
            units[-1].append(j)
        else:
            units.append([j])
    return units


def with_ref(marker: Mapping[str, Any], *refs: str) -> dict[str, Any]:
    """The omission marker naming its ref, or the refs of the spans it stands for when two
    were merged into one (before its ids, which stay last: ``marker_ids``)."""
    content = str(marker["content"])
    rest = content[len(OMITTED_PREFIX):]
    named = "".join(f", ref {ref}" for ref in refs)
    return {**marker, "content": f"{OMITTED_PREFIX}{named}, {REF_HINT}{rest}"}


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
