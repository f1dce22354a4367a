"""Omission markers: where they go, and the ids they list.

One marker stands before an omitted span. Once forwarded it is frozen with the
other decisions (the provider has its bytes cached); a later epoch that omits
more gives its own span a marker of its own. A marker lists the exact ids of
what it stands for, as far as the room held back for them allows: a later call
is far more likely to reuse an old id than an old sentence.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.compression import (CALLS_HEAD, dropped_marker, is_marker, is_omission_marker, marker_calls,
                                         marker_ids)
from gateway.pruning.conversation import Conversation
from gateway.pruning.marker_refs import with_ref
from gateway.pruning.ids import ids_in, omitted_ids, text_ids
from gateway.pruning.messages import call_arguments_text, content_text, readable_text
from gateway.pruning.omitted_calls import CALLS_SHARE, MAX_CALL_TOKENS, call_lines, omitted_calls, says_more_than_ids
from gateway.pruning.policy import Policy
from gateway.pruning.text_features import query_words, stem
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.vocabulary import DROPPED, Action

MARKER_RESERVE = 12  # tokens a decision holds back for the omission marker (a plain one costs 12)
# At most this share of the room the pins leave is held back for the ids of what
# is omitted (policy ``omitted_ids_tokens`` caps it in tokens).
OMITTED_IDS_SHARE = 3
MASK_OVERHEAD = 24  # tokens of a masked tool message that are not its ids


def omitted_ids_reserve(conv: Conversation, policy: Policy, candidates: Sequence[int], forced: Mapping[int, Action],
                         masked_forms: Mapping[int, dict[str, Any]], counter: TokenCounter, room: int) -> int:
    """Tokens held back for the ids of what this decision omits: a share of the room
    the pins leave, and no more than the undecided candidates hold in ids (a chat
    history without tool output holds few; an unused reserve is waste): the ids their
    masks keep and, where those fall short, the values their calls pass (an agent whose
    outputs are code or prose holds its paths and names in its calls, not its masks) and
    the short calls a marker lists (``omitted_calls``: the line ranges it read)."""
    if policy.omitted_ids_tokens <= 0 or room <= 0:
        return 0
    undecided = [i for i in candidates if i not in forced]
    supply = sum(max(0, counter.count_message(masked_forms[j]) - MASK_OVERHEAD)
                 for i in undecided for j in conv.units[i].indices if j in masked_forms)
    wanted = min(policy.omitted_ids_tokens, room // OMITTED_IDS_SHARE)
    if supply < wanted:
        called = dict.fromkeys(v for i in undecided
                               for v in text_ids(call_arguments_text(conv.messages[conv.units[i].start])))
        supply += counter.count_text(" ".join(called)) if called else 0
    if supply < wanted:
        listed = dict.fromkeys(line for i in undecided for line in call_lines(conv.messages[conv.units[i].start])
                               if says_more_than_ids(line))
        supply += sum(cost for cost in map(counter.count_text, listed) if cost <= MAX_CALL_TOKENS)
    return min(wanted, supply)


def place_markers(conv: Conversation, actions: dict[int, Action], prior: Sequence[tuple[int, dict[str, Any]]],
                  boundary: int, locked: bool, per_epoch: bool,
                  earlier_drops: set[int]) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """Where the omission markers go, by original message index.

    One marker before the first dropped unit. When the decided prefix was kept as
    it was (an append-only epoch), its markers (or the summaries that replaced
    them) stay byte for byte; the newly decided region gets a marker of its own
    when it drops something (its ids are not in the older markers). Also returns
    the positions of the markers made now (the ones that may still take ids).
    """
    prior_markers = {pos: m for pos, m in prior if is_marker(m)}
    dropped = [u.start for u in conv.units if actions.get(u.index) == DROPPED]
    if not dropped:
        return {}, []
    if not locked:
        first = dropped[0]
        reused = prior_markers.get(first)
        if reused is None:
            return {first: dropped_marker()}, [first]
        # The old marker stays (its bytes may be cached); from the first unit dropped
        # only now, the rest gets a marker of its own.
        newly = [u.start for u in conv.units if actions.get(u.index) == DROPPED and u.index not in earlier_drops]
        if not per_epoch:
            return {first: reused}, []
        # So do the markers later epochs put before the units still dropped: each lists
        # the ids of its own span, which no other marker lists (the decision counted them).
        end = newly[0] if newly else len(conv.messages)
        still = set(dropped)
        markers = {pos: m for pos, m in prior_markers.items() if pos in still and pos < end}
        if newly and newly[0] > first:
            markers[newly[0]] = dropped_marker()
            return markers, [newly[0]]
        return markers, []
    markers = {pos: m for pos, m in prior_markers.items() if pos < boundary}
    new = [pos for pos in dropped if pos >= boundary]
    fresh = []
    if new and (per_epoch or not markers):
        markers[new[0]] = dropped_marker()
        fresh.append(new[0])
    if not markers:  # an old drop without its marker (a state written by an older version)
        markers[dropped[0]] = dropped_marker()
        fresh.append(dropped[0])
    return markers, fresh


def listing_room(ids_tokens: int) -> int:
    """The room a decision's fresh markers may list in: the ids' (policy ``omitted_ids_tokens``)
    and, beside it, the calls' (``omitted_calls``: 1/CALLS_SHARE of the ids')."""
    return ids_tokens + ids_tokens // CALLS_SHARE


def unlisted_carried(markers: Mapping[int, dict[str, Any]], fresh: Sequence[int]) -> list[int]:
    """The carried omission markers that list nothing: their lists given up over the target
    (``without_carried_ids``), or left no room when they were placed."""
    return [pos for pos, m in markers.items()
            if pos not in fresh and is_omission_marker(m) and not (marker_ids(m) or marker_calls(m))]


def with_omitted_ids(conv: Conversation, actions: Mapping[int, Action], markers: dict[int, dict[str, Any]],
                     listing: tuple[Sequence[int], Sequence[int]], forwarded: Sequence[Mapping[str, Any]],
                     rooms: tuple[int, int | None], counter: TokenCounter,
                     refs: Mapping[int, str] | None = None) -> dict[int, dict[str, Any]]:
    """``listing`` = (fresh, relisted): the fresh markers with the short calls (``omitted_calls``)
    and the ids of the span each stands for (up to the next marker), newest span first; ``rooms``:
    ``room`` tokens in all and ``ids_room``: with it, the ids up to it and the calls up to
    1/CALLS_SHARE of it (and 1/(CALLS_SHARE + 1) of what is left), neither taking the other's;
    without it, the ids alone. A fresh marker left without either goes when an older one stands for
    its span. ``refs``: each marker's ref (``marker_refs``), as forwarded. ``relisted``: carried
    markers listed so too, after the fresh (``unlisted_carried``), kept if nothing comes of it."""
    (fresh, relisted), refs, (room, ids_room) = listing, refs or {}, rooms
    ids_left = room if ids_room is None else min(ids_room, room)
    calls_left = ids_room // CALLS_SHARE if ids_room is not None else 0

    def cost(pos: int, marker: dict[str, Any]) -> int:
        return counter.count_message(with_ref(marker, refs[pos]) if pos in refs else marker)

    present = ids_in(readable_text(m) for m in forwarded)
    # A tool's name is in the tool definitions every request carries (the model called
    # it from there): listing it again tells the model nothing.
    present.update(name for u in conv.units for name in u.tool_names)
    made = {line for m in forwarded for line in call_lines(m)}  # the calls the forward still shows
    # Stems: a request names things in the plural ("cameras") that a record names
    # in the singular ("Indoor Security Camera"); a stem is a prefix of both.
    query = tuple(dict.fromkeys(map(stem, query_words(conv.current_request))))
    positions, out = sorted(markers), dict(markers)
    for pos in sorted([*fresh, *relisted], reverse=True):  # the newest span is the likeliest to be needed
        later = [p for p in positions if p > pos]
        end = later[0] if later else len(conv.messages)
        span = [u for u in conv.units if pos <= u.start < end and actions.get(u.index) == DROPPED]
        # The span's short calls first (``omitted_calls``), up to a share of the room: the
        # ids of the outputs take the rest, and none a listed call already says.
        calls = omitted_calls((conv.messages[u.start] for u in reversed(span)), made,
                              min(calls_left, room // (CALLS_SHARE + 1)), counter.count_text)
        said = present | ids_in(calls)
        texts = (t for u in reversed(span) for j in reversed(u.indices) for t in _texts_read(conv.messages[j], present))
        calls_cost = counter.count_text(CALLS_HEAD + "\n".join(calls)) if calls else 0
        ids_budget = min(ids_left, room - calls_cost) - 2  # 2: "; ids:"
        ids = omitted_ids(texts, said, ids_budget, counter.count_text, query) if ids_budget > 0 else []
        bare = cost(pos, markers[pos])
        while (ids or calls) and cost(pos, dropped_marker(ids, calls)) - bare > room:
            if ids:  # the estimate is close, the target is exact
                ids.pop()
            else:
                calls.pop(0)  # the oldest call
        if ids or calls:
            marker = dropped_marker(ids, calls)
            added = cost(pos, marker) - bare
            with_calls = cost(pos, dropped_marker(ids)) - bare if calls else added
            room -= added
            ids_left -= with_calls
            calls_left -= added - with_calls
            out[pos] = marker
            present.update(ids)
            present.update(ids_in(calls))
            made.update(calls)
        elif pos not in relisted and any(p < pos for p in out):
            del out[pos]
    return out


def without_carried_ids(markers: Mapping[int, dict[str, Any]], fresh: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Over an attainable target with nothing left to shed, the omission markers carried
    from an earlier decision give up their ids: the target is the client's limit, an id
    list a help (the bytes from such a marker on are written to the cache again)."""
    return {pos: dropped_marker() if pos not in fresh and is_omission_marker(m) and (marker_ids(m) or marker_calls(m))
            else m
            for pos, m in markers.items()}


def with_carried_trimmed(markers: Mapping[int, dict[str, Any]], fresh: Sequence[int], over: int,
                         cost: Callable[[int, dict[str, Any]], int]) -> dict[int, dict[str, Any]]:
    """Over an attainable target by ``over`` tokens, the carried omission markers (placed by
    earlier decisions) give up as much of their lists as it takes and no more: the newest
    first (the cached bytes before it stay as they are), its
    lowest-ranked ids first (they are listed best first), then its oldest calls
    (``with_omitted_ids`` trims so). The fresh markers keep theirs. A carried marker that
    changes has its bytes, and those after it, written to the cache again, as giving up its
    whole list would (``without_carried_ids``). ``cost``: a marker's tokens at a position,
    as forwarded."""
    out = dict(markers)
    for pos in sorted(markers, reverse=True):
        marker = markers[pos]
        if over <= 0:
            break
        if pos in fresh or not is_omission_marker(marker):
            continue
        ids, calls = marker_ids(marker), marker_calls(marker)
        if not (ids or calls):
            continue
        before = cost(pos, marker)
        trimmed = marker
        while (ids or calls) and before - cost(pos, trimmed) < over:
            if ids:
                ids.pop()
            else:
                calls.pop(0)
            trimmed = dropped_marker(ids, calls)
        over -= before - cost(pos, trimmed)
        out[pos] = trimmed
    return out


def without_later_carried(markers: Mapping[int, dict[str, Any]], fresh: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Still over, plain carried markers after the first go: it stands for every span."""
    carried = sorted(pos for pos in markers if pos not in fresh)
    return {pos: m for pos, m in markers.items() if pos in fresh or pos == carried[0]}


def without_markers(markers: Mapping[int, dict[str, Any]], fresh: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Still over an attainable target (the pins fit in it alone), no marker at all: the
    target is the client's limit (a context window, a budget), which a request over it may
    break, and the marker a notice. The span stays omitted; the next decision with room
    places its marker (``place_markers``)."""
    return {}


def _texts_read(message: Mapping[str, Any], present: set[str]) -> list[tuple[str, bool, bool, bool]]:
    """What a marker reads of a message (``messages.readable_text``): its calls' arguments,
    then its words or its output; each with whether someone said it (user or assistant
    words, not a tool output or a bare call), whether the forwarded request repeats one of
    its values (``present``: a kept later message quoted it), and whether it is calls."""
    said = content_text(message.get("content"))
    dialogue = message.get("role") in ("user", "assistant") and bool(said)
    texts = []
    calls = call_arguments_text(message)
    if calls:
        texts.append((calls, dialogue, not present.isdisjoint(text_ids(calls)), True))
    if said:
        texts.append((said, dialogue, not present.isdisjoint(text_ids(said)), False))
    return texts
