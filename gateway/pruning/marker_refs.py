"""Omission markers that name a ref: what ``sieve_expand`` can restore, as the forward shows it.

With the policy's ``expand_tool`` on, a forward's omission markers name a ref (a mask
names one already: ``ref <fingerprint8>``), and the decision counts each marker so,
since the tool's rounds (``gateway.expand``) forward them that way. A ref is 8 hex digits:

* a masked tool result: its message's fingerprint (the ref its mask shows);
* an omission marker: a hash of the fingerprint of the span's first message and its
  place (the marker is placed at that message);
* a unit of a span (a call and its results, or one message): its first message's
  fingerprint (``gateway.expand`` lists them for a span too long to show whole).

Both depend only on the history the decision was taken on, which the frozen prefix
keeps, so the bytes of a decorated marker are the same on every replay: the
decoration is applied to the forwarded messages after the decision, never stored
in the plan (a policy that turns the tool off forwards the markers as they were).
Its room is held under the target all the same: with the tool on, the decision counts
each marker as decorated (``with_refs``: the same bytes) and the pipeline counts the
forward so (``gateway.pruning.pipeline``). What a ref restores, and the tool itself,
are ``gateway.expand``'s.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.compression import OMITTED_PREFIX, is_omission_marker
from gateway.pruning.result import PruneResult
from gateway.pruning.vocabulary import DROPPED, Action

REF_CHARS = 8
# The short line an omission marker gains when the tool is on (a mask already shows its ref).
REF_HINT = "sieve_expand restores it"


def ref_of(fingerprint: str) -> str:
    return fingerprint[:REF_CHARS]


def span_ref(first: str, position: int) -> str:
    """The ref of an omitted span, from the fingerprint of the message it starts at and
    that message's place in the history (the span's first unit has the message's own
    ref: the two must differ). The place tells two spans apart whose first messages are
    alike (an agent's "How can I help you today?" opening each task); the history before
    it is the frozen prefix, so the place is as stable as the bytes."""
    return ref_of(hashlib.blake2b(b"span\x00%d\x00" % position + first.encode(), digest_size=12).hexdigest())


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


def with_ref(marker: Mapping[str, Any], *refs: str) -> dict[str, Any]:
    """The omission marker naming its ref, or the refs of the spans it stands for when two
    were merged into one (before its ids, which stay last: ``marker_ids``)."""
    content = str(marker["content"])
    rest = content[len(OMITTED_PREFIX):]
    named = "".join(f", ref {ref}" for ref in refs)
    return {**marker, "content": f"{OMITTED_PREFIX}{named}, {REF_HINT}{rest}"}
