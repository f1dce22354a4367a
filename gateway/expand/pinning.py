"""A conversation's ``sieve_expand`` exchanges, put back where they were made.

A pin is the exchange one request's rounds appended (``make_pin``): Sieve's calls and
their results, placed after the client turn that request ended with. On later
requests it goes back after that turn (``with_pins``), when the forward kept that turn
and the one after it as they are: the model asked for that content, and the provider's
cached prefix of that round grows rather than breaks. The conversation's pins are kept
in its record (``gateway.expand.record``); the pruner holds their room under the target
(``gateway.pruning.pins``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

import orjson

from gateway.errors import InvalidRequest
from gateway.expand.restore import TOOL_NAME
from gateway.wire import ChatView, WireFormat, adapter_for


def history_of(body: Mapping[str, Any], fmt: WireFormat) -> list[Any] | None:
    """The body's list of turns or items (None: a Responses ``input`` given as one string)."""
    turns = body.get("input" if fmt is WireFormat.RESPONSES else "messages")
    return turns if isinstance(turns, list) else None


def digest(item: Any) -> str:
    """A client turn's identity, its prompt-cache breakpoints aside (``plain``)."""
    return hashlib.blake2b(orjson.dumps(plain(item), option=orjson.OPT_SORT_KEYS), digest_size=12).hexdigest()


def plain(item: Any) -> Any:
    """``item`` without ``cache_control``: a client moves its breakpoints to its newest turns
    on every request (Claude Code marks its last turns), so a turn is the same turn with or
    without one, as the chat view already sees it (``gateway.wire.formats.cache_control``)."""
    if isinstance(item, dict):
        return {k: plain(v) for k, v in item.items() if k != "cache_control"}
    if isinstance(item, list):
        return [plain(v) for v in item]
    return item


def make_pin(sent: Mapping[str, Any], forwarded_before: int, asked: Mapping[str, Any],
             fmt: WireFormat) -> dict[str, Any] | None:
    """The exchange a request's rounds appended (``asked``'s turns past ``forwarded_before``),
    to go after the client's last turn of that request (``sent``)."""
    history, turns = history_of(sent, fmt), history_of(asked, fmt)
    if not history or turns is None:
        return None
    return {"at": len(history), "after": digest(history[-1]), "items": turns[forwarded_before:]}


def pin_place(sent: Mapping[str, Any], fmt: WireFormat, pin: Mapping[str, Any]) -> int | None:
    """Where ``pin`` goes in the client's history (``sent``): after turn ``at - 1``, when the
    history still holds that turn (same place, same bytes) and something after it; else None."""
    history = history_of(sent, fmt)
    at = int(pin.get("at", 0))
    if not history or not 0 < at < len(history) or digest(history[at - 1]) != pin.get("after"):
        return None
    return at


def with_pins(forwarded: dict[str, Any], sent: Mapping[str, Any], fmt: WireFormat,
              pins: list[dict[str, Any]]) -> tuple[dict[str, Any], list[int]]:
    """``forwarded`` with each pin's exchange back after the client turn it followed
    (``pin_place``), when the forward kept that turn and the one after it as they are; and
    the indices (in ``pins``) of the pins put back."""
    history, turns = history_of(sent, fmt), history_of(forwarded, fmt)
    if not history or turns is None:
        return forwarded, []
    out, added = list(turns), []
    for i in sorted(range(len(pins)), key=lambda i: -int(pins[i].get("at", 0))):
        at = pin_place(sent, fmt, pins[i])
        place = _kept_at(out, history, at - 1) if at is not None else None
        if place is None:
            continue
        items = list(pins[i].get("items") or ())
        out[place + 1:place + 1] = items
        _unspliced(out, place + 1 + len(items), items, fmt)
        added.append(i)
    key = "input" if fmt is WireFormat.RESPONSES else "messages"
    return ({**forwarded, key: out} if added else forwarded), sorted(added)


def _unspliced(turns: list[Any], at: int, items: list[Any], fmt: WireFormat) -> None:
    """After a pin put back at ``at - len(items)``: the client's answer that follows, when Sieve
    spliced it (its stream named sieve_expand after text: the round's answer went on in the same
    message), loses the part the pin's own turn already holds. The provider made that part in the
    round and the rest after the exchange: forwarded as it made them, every piece of reasoning in
    them keeps the prefix it is bound to (ARCHITECTURE.md 2a)."""
    if fmt is WireFormat.MESSAGES:
        said = next((t for t in items if isinstance(t, dict) and t.get("role") == "assistant"), None)
        answer = turns[at] if at < len(turns) else None
        if not isinstance(said, dict) or not isinstance(answer, dict) or answer.get("role") != "assistant" \
                or not isinstance(said.get("content"), list) or not isinstance(answer.get("content"), list):
            return
        shown = [b for b in said["content"] if not (isinstance(b, dict) and b.get("name") == TOOL_NAME)]
        if shown and len(answer["content"]) > len(shown) and plain(answer["content"][:len(shown)]) == plain(shown):
            turns[at] = {**answer, "content": answer["content"][len(shown):]}
    elif fmt is WireFormat.RESPONSES:
        calls = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("name") == TOOL_NAME}
        shown = [i for i in items if isinstance(i, dict) and i.get("name") != TOOL_NAME
                 and i.get("call_id") not in calls]
        if shown and plain(turns[at:at + len(shown)]) == plain(shown):
            del turns[at:at + len(shown)]


def pin_needs(view: ChatView | None, fmt: WireFormat, at: int) -> tuple[int, ...]:
    """The view messages a pin placed at ``at`` needs kept: those of the client turns ``at - 1``
    and ``at`` (a chat turn is its own view message; a Messages turn or Responses item may
    make several, or share one with its neighbours)."""
    turns = {at - 1, at}
    if fmt is WireFormat.CHAT or view is None:
        return tuple(sorted(turns))
    needs = []
    for j, origin in enumerate(view.origins):
        if fmt is WireFormat.MESSAGES and getattr(origin, "turn", None) in turns:
            needs.append(j)
        elif fmt is WireFormat.RESPONSES and turns & set(getattr(origin, "items", ())):
            needs.append(j)
    return tuple(needs)


def pin_messages(pin: Mapping[str, Any], fmt: WireFormat, model: str) -> list[dict[str, Any]]:
    """A pin's exchange as chat-view messages, the shape the forwarded count is taken in (an
    exchange the format's reader refuses counts as its JSON text)."""
    items = list(pin.get("items") or ())
    if fmt is WireFormat.CHAT:
        return items
    key = "input" if fmt is WireFormat.RESPONSES else "messages"
    try:
        return adapter_for(fmt).read({"model": model, "max_tokens": 1, key: items}).body["messages"]
    except InvalidRequest:
        return [{"role": "user", "content": orjson.dumps(items).decode()}]


def _comparable(turn: Any) -> Any:
    """A turn as a pin's place is found by: breakpoints aside (``plain``), a string content as the
    text block it stands for, and without the omission markers Sieve put in it (an epoch's marker
    goes into the user turn after the kept turn that follows its span: ``gateway.wire.formats.anthropic_messages``)."""
    turn = plain(turn)
    content = turn.get("content") if isinstance(turn, dict) else None
    if isinstance(content, str):
        return {**turn, "content": [{"type": "text", "text": content}]}
    if not isinstance(content, list):
        return turn
    return {**turn, "content": [b for b in content if not (isinstance(b, dict) and b.get("type") == "text"
                                                           and str(b.get("text", "")).startswith("[sieve:"))]}


def _kept_at(turns: list[Any], history: list[Any], index: int) -> int | None:
    """Where the client's turn ``history[index]`` is in the forwarded ``turns``, when it was kept
    as it is with the turn after it (breakpoints and Sieve's markers aside: ``_comparable``):
    counted from the end (a
    later turn equal to it, a repeated "continue", is told apart by how many equal ones
    follow), the newest turns being the ones a prune keeps."""
    item, following = _comparable(history[index]), plain(history[index + 1])
    nth = sum(1 for h in history[index:] if _comparable(h) == item)
    for i in range(len(turns) - 1, -1, -1):
        if _comparable(turns[i]) == item:
            nth -= 1
            if nth == 0:
                return i if i + 1 < len(turns) and plain(turns[i + 1]) == following else None
    return None


__all__ = ["digest", "history_of", "make_pin", "pin_messages", "pin_needs", "pin_place", "plain", "with_pins"]
