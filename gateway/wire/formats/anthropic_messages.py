"""Anthropic Messages read into the chat view, and the decision written back as Anthropic turns.

Reading (one view message per unit-sized piece of a turn)::

    system (string or blocks)         -> a system message (written back untouched)
    system turn inside messages       -> a system message (pinned, as the system prompt is)
    assistant turn                    -> one assistant message: its text; each tool_use a tool
                                         call with the tool_use id; thinking blocks ride along
    user turn: each tool_result block -> a tool message answering that id (first, as the
                                         provider wants results before text)
               the other blocks       -> one user message (text, image and document stand-ins)

So a tool_use and its tool_result make one unit, as a chat tool call and its
results do, however a user turn mixes results and text. Writing back: a kept
view message is its original blocks (the same objects, byte for byte; a turn
reproduced whole is the original turn object), a masked tool message is its
tool_result with the mask text as content, an inserted marker is a user text
block; pieces of one role that end up adjacent merge into one turn, so roles
still alternate after a drop, and omission markers side by side in it merge into
one (``markers.py``). Thinking blocks are never edited, and go only
with their turn. Breakpoints follow ``cache_control.py``; for a client that uses
them, the frozen span (what the stored decisions cover) ends on one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.pruning import DROPPED_MARKER, PruneResult
from gateway.wire.chat import WireLimits
from gateway.wire.formats.cache_control import (MAX_BREAKPOINTS, breakpoints_in, cap_breakpoints, markable,
                                                 with_breakpoint)
from gateway.wire.formats.content import compact_json, parts_text
from gateway.wire.formats.merged_markers import is_marker_text, merged_marker_text
from gateway.wire.formats.messages_check import check_messages_body
from gateway.wire.formats.view import ChatView, WireFormat

SYSTEM_TURN = -1


@dataclass(frozen=True, slots=True)
class BlockOrigin:
    """Where a view message came from: a turn of ``messages`` (SYSTEM_TURN: ``system``), and
    which of its blocks (None: the turn's string content)."""

    turn: int
    blocks: tuple[int, ...] | None


@dataclass(slots=True)
class _Piece:
    """Blocks of one native turn (or an inserted marker: turn None) as they are forwarded."""

    role: str
    turn: int | None
    blocks: list[dict[str, Any]]
    indices: tuple[int, ...] | None
    edited: bool = False
    source: int = -1  # the view message it is (-1: an inserted marker)


class MessagesAdapter:
    format = WireFormat.MESSAGES

    def read(self, body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> ChatView:
        check_messages_body(body, limits)
        messages: list[dict[str, Any]] = []
        origins: list[BlockOrigin] = []
        system = parts_text(body.get("system"))
        if system:
            messages.append({"role": "system", "content": system})
            origins.append(BlockOrigin(SYSTEM_TURN, None))
        for k, turn in enumerate(body["messages"]):
            for message, blocks in _view_of_turn(turn):
                messages.append(message)
                origins.append(BlockOrigin(k, blocks))
        view: dict[str, Any] = {"model": body["model"], "messages": messages}
        if isinstance(body.get("metadata"), dict):
            view["metadata"] = body["metadata"]
        return ChatView(view, tuple(origins))

    def write(self, body: Mapping[str, Any], view: ChatView, result: PruneResult) -> dict[str, Any]:
        if not result.changed:
            return dict(body)
        turns = body["messages"]
        pieces = _pieces(turns, view, result)
        _mark_frozen_end(pieces, result.state.decided, body)
        out = dict(body)
        out["messages"] = _merged_turns(pieces, turns)
        cap_breakpoints(out)
        return out


def _view_of_turn(turn: Mapping[str, Any]) -> list[tuple[dict[str, Any], tuple[int, ...] | None]]:
    role, content = turn["role"], turn["content"]
    if isinstance(content, str):
        return [({"role": role, "content": content}, None)]
    if role == "system":
        return [({"role": "system", "content": parts_text(content)}, tuple(range(len(content))))]
    if role == "assistant":
        return [(_assistant_message(content), tuple(range(len(content))))]
    results = [j for j, block in enumerate(content) if block["type"] == "tool_result"]
    rest = tuple(j for j, block in enumerate(content) if block["type"] != "tool_result")
    out: list[tuple[dict[str, Any], tuple[int, ...] | None]] = [
        ({"role": "tool", "tool_call_id": content[j]["tool_use_id"], "content": parts_text(content[j].get("content"))},
         (j,)) for j in results]
    if rest or not results:
        out.append(({"role": "user", "content": parts_text([content[j] for j in rest])}, rest))
    return out


def _assistant_message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": compact_json(b["input"])}}
             for b in blocks if b["type"] == "tool_use"]
    text = parts_text([b for b in blocks if b["type"] != "tool_use"])
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _pieces(turns: list[dict[str, Any]], view: ChatView, result: PruneResult) -> list[_Piece]:
    """The forwarded view messages as native blocks, breakpoints of dropped blocks moved."""
    viewed = view.body["messages"]
    carrier = _BreakpointCarrier(turns, view.origins, result.sources)
    pieces: list[_Piece] = []
    for message, src in zip(result.request["messages"], result.sources):
        if src < 0:
            pieces.append(_Piece("user", None, [{"type": "text", "text": message["content"]}], None, True))
            continue
        origin: BlockOrigin = view.origins[src]
        if origin.turn == SYSTEM_TURN:
            continue
        carrier.before(src)
        turn = turns[origin.turn]
        if origin.blocks is None:
            text = turn["content"]
            piece = _Piece(turn["role"], origin.turn, [{"type": "text", "text": text}] if text else [], None,
                           source=src)
        else:
            piece = _Piece(turn["role"], origin.turn, [turn["content"][j] for j in origin.blocks], origin.blocks)
            piece.source = src
            if message.get("content") != viewed[src].get("content"):  # a masked tool result
                piece.blocks = [{**piece.blocks[0], "content": message["content"]}]
                piece.edited = True
        pieces.append(piece)
        carrier.kept(piece)
    carrier.before(len(viewed))
    return pieces


class _BreakpointCarrier:
    """Moves the breakpoints of dropped view messages onto the last kept block before them."""

    def __init__(self, turns: list[dict[str, Any]], origins, sources: list[int]) -> None:
        forwarded = set(sources)
        self._pending: list[tuple[int, dict[str, Any]]] = []
        for j, origin in enumerate(origins):
            if j in forwarded or origin.turn == SYSTEM_TURN or origin.blocks is None:
                continue
            content = turns[origin.turn]["content"]
            self._pending.extend((j, cc) for cc in breakpoints_in(content[i] for i in origin.blocks))
        self._last: tuple[_Piece, int] | None = None

    def kept(self, piece: _Piece) -> None:
        for i in range(len(piece.blocks) - 1, -1, -1):
            if markable(piece.blocks[i]):
                self._last = (piece, i)
                return

    def before(self, src: int) -> None:
        """Moves the breakpoints of dropped view messages before ``src``; with no kept block
        before them they go (nothing of their span is left to cache)."""
        while self._pending and self._pending[0][0] < src:
            _, cc = self._pending.pop(0)
            if self._last is not None:
                piece, i = self._last
                if not isinstance(piece.blocks[i].get("cache_control"), dict):
                    piece.blocks[i] = with_breakpoint(piece.blocks[i], cc)
                    piece.edited = True


def _mark_frozen_end(pieces: list[_Piece], decided: int, body: Mapping[str, Any]) -> None:
    """A breakpoint on the last block of the frozen span (the view messages the stored
    decisions cover), when the client caches history beyond it and leaves a breakpoint free.

    That span is forwarded byte for byte until the next epoch, so a cache entry ending
    there keeps hitting however far the client's own newest breakpoint moves on (the
    provider looks back only so many blocks from a breakpoint for an earlier entry).
    With a client breakpoint after it, the entry costs no extra cache writes (the
    provider writes up to the last breakpoint anyway); it takes that breakpoint's
    lifetime (the provider wants longer-lived breakpoints first)."""
    frozen = [p for p in pieces if 0 <= p.source < decided]
    last = next(((p, i) for p in reversed(frozen) for i in range(len(p.blocks) - 1, -1, -1)
                 if markable(p.blocks[i])), None)
    if last is None or isinstance(last[0].blocks[last[1]].get("cache_control"), dict):
        return
    fixed = breakpoints_in(body.get("system") or ()) if isinstance(body.get("system"), list) else []
    fixed += breakpoints_in(body.get("tools") or ()) if isinstance(body.get("tools"), list) else []
    piece, i = last
    at = pieces.index(piece)
    before = fixed + [cc for p in pieces[:at] for cc in breakpoints_in(p.blocks)] + breakpoints_in(piece.blocks[:i])
    after = breakpoints_in(piece.blocks[i + 1:]) + [cc for p in pieces[at + 1:] for cc in breakpoints_in(p.blocks)]
    if not after or len(before) + len(after) >= MAX_BREAKPOINTS:
        return
    piece.blocks[i] = with_breakpoint(piece.blocks[i], after[0])
    piece.edited = True


def _merged_turns(pieces: list[_Piece], turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent pieces of one role merged into one turn, unless the client sent them as
    adjacent turns of its own; a user turn first when the client's was."""
    groups: list[list[_Piece]] = []
    for piece in _markers_forward(pieces):
        last = groups[-1][-1] if groups else None
        if last is not None and last.role == piece.role and not _adjacent_turns(last, piece):
            groups[-1].append(piece)
        else:
            groups.append([piece])
    out = [_turn_of(group, turns) for group in groups]
    if turns[0]["role"] == "user" and out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": DROPPED_MARKER}]})
    return out


def _markers_forward(pieces: list[_Piece]) -> list[_Piece]:
    """The pieces with the inserted markers that would merge into the client's user turn before
    them (an assistant turn after them: roles must alternate) moved into the next user turn
    instead, after that assistant turn. The turn before keeps its bytes: the first position an
    epoch changes is the first one it omitted, not an earlier turn (message 0, for a span right
    after the task), so the prompt cache and the reasoning bound to what precedes it stay."""
    out: list[_Piece] = []
    waiting: list[_Piece] = []
    for i, piece in enumerate(pieces):
        after = next((p for p in pieces[i + 1:] if p.turn is not None), None)
        if piece.turn is None and out and out[-1].role == "user" and out[-1].turn is not None \
                and after is not None and after.role == "assistant":
            waiting.append(piece)  # held until the next client user turn
            continue
        out.append(piece)
        if waiting and piece.role == "user" and piece.turn is not None:
            out.extend(waiting)
            waiting = []
    return out + waiting


def _adjacent_turns(a: _Piece, b: _Piece) -> bool:
    return a.turn is not None and b.turn is not None and b.turn == a.turn + 1


def _one_marker_per_run(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent omission-marker blocks as one (``markers.py``); a breakpoint either carried
    stays on the merged block, the later one first (it ended the run)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        last = out[-1] if out else None
        if last is not None and _is_marker_block(last) and _is_marker_block(block):
            out[-1] = {**last, **block, "text": merged_marker_text(last["text"], block["text"])}
        else:
            out.append(block)
    return out


def _breakpoint_after_markers(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Markers placed after the block the client marked for its cache (``_markers_forward``) take
    its breakpoint: the client's cache entry ends on its turn's end, so it holds the markers too
    (else they are read again, uncached, on every request after)."""
    tail = len(blocks)
    while tail > 0 and _is_marker_block(blocks[tail - 1]):
        tail -= 1
    if tail == 0 or tail == len(blocks) or not isinstance(blocks[tail - 1].get("cache_control"), dict):
        return blocks
    marked = {k: v for k, v in blocks[tail - 1].items() if k != "cache_control"}
    return [*blocks[:tail - 1], marked, *blocks[tail:-1], {**blocks[-1], "cache_control": blocks[tail - 1]["cache_control"]}]


def _is_marker_block(block: Mapping[str, Any]) -> bool:
    return block.get("type") == "text" and is_marker_text(block.get("text"))


def _turn_of(group: list[_Piece], turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The original turn object when ``group`` reproduces it whole and unedited, else a turn
    of the group's blocks (tool results first in a user turn)."""
    first = group[0]
    if first.turn is not None and all(p.turn == first.turn and not p.edited for p in group):
        original = turns[first.turn]
        content = original["content"]
        covered = {i for p in group for i in (p.indices or ())}
        if isinstance(content, str) or covered == set(range(len(content))):
            return original
    blocks = [b for p in group for b in p.blocks]
    if first.role == "user" and len(group) > 1:
        blocks.sort(key=lambda b: b.get("type") != "tool_result")  # stable: order kept otherwise
        blocks = _breakpoint_after_markers(_one_marker_per_run(blocks))
    template = turns[first.turn] if first.turn is not None else {}
    turn = {k: v for k, v in template.items() if k not in ("role", "content")}
    turn["role"], turn["content"] = first.role, blocks
    return turn

