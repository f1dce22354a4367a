"""A model's reasoning in a native body, and whether the history before it is the one it was made under.

Providers bind each piece of reasoning they return to its prefix, everything the
request held before it (ARCHITECTURE.md 2a): Anthropic checks every ``thinking`` /
``redacted_thinking`` block against ``system``, ``tools`` and every earlier message
and block (400, or the block dropped under ``drop_block``); OpenAI drops a
``reasoning`` item whose prefix changed, silently. A *carrier* is one piece of
reasoning: a thinking block (bound to the blocks before it in its message too), or a
reasoning item.

A conversation's record (``gateway.exchange.reasoning_guard``) keeps, per carrier, the prefix it
is bound to (a chain hash, ``chain``), and the bodies Sieve sent upstream since the
last request: the answer to a body is made under that body whole, and the client
appends it right after, so a carrier met for the first time is bound to the body
whose hash stands before it, and a carrier is *valid* in a later forward exactly
when the hash of what stands before it there is its own prefix (a block moved to
where another one was made is not). ``judge`` tells, for the body Sieve is about to send
(``forward``) against the body the client sent (``sent``), which carriers Sieve's
rewrite left invalid (only those after the first place where the two differ: an
invalid carrier Sieve did not touch is the client's business) and which of them
are lost for the first time (their identity not yet in ``lost``).

Hashes ignore ``cache_control``: a client moving its breakpoints (Claude Code moves
its newest one every request) rewrites nothing a provider binds reasoning to.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Mapping

import orjson

from gateway.wire.formats.view import WireFormat

THINKING_TYPES = frozenset(("thinking", "redacted_thinking"))
DIGEST_BYTES = 12


class Scope(StrEnum):
    """Where an invalidated carrier stood (the ``scope`` label of ``sieve_reasoning_invalidated_total``)."""

    CURRENT_LOOP = "current_loop"  # after the newest user message: the tool loop under way
    EARLIER = "earlier"            # an earlier turn


@dataclass(frozen=True, slots=True)
class Carrier:
    """Reasoning at ``position`` of a body's history: one thinking block of a Messages turn (its
    index in ``blocks``), or a Responses reasoning item."""

    position: int
    digest: str             # its identity: the same block or item in another body has the same one
    count: int              # blocks (Messages) or items (Responses) it holds
    blocks: tuple[int, ...] = ()  # Messages: the indices of its thinking blocks in the turn


@dataclass(slots=True)
class Verdict:
    """One forward judged (module docstring)."""

    invalid: list[Carrier] = field(default_factory=list)     # in ``forward``, invalid by Sieve's rewrite
    lost: dict[Scope, int] = field(default_factory=dict)      # blocks or items lost for the first time
    lost_digests: list[str] = field(default_factory=list)
    loop_start: int | None = None                            # forward position of the newest user message
    stripped: list[Carrier] = field(default_factory=list)     # of ``invalid``: the blocks taken out
    prefixes: dict[str, str] = field(default_factory=dict)    # per carrier forwarded: the hash before it
    body: dict[str, Any] = field(default_factory=dict)        # ``forward`` with ``stripped`` taken out
    whole: str = ""                                           # the hash of ``body`` whole

    @property
    def kept_invalid(self) -> list[Carrier]:
        """Invalid carriers forwarded as they are: the provider must be told to drop them."""
        done = {c.digest for c in self.stripped}
        return [c for c in self.invalid if c.digest not in done]

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    def in_loop(self, carrier: Carrier) -> bool:
        return self.loop_start is not None and carrier.position > self.loop_start


def digest(value: Any) -> str:
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=DIGEST_BYTES).hexdigest()


def history(body: Mapping[str, Any], fmt: WireFormat) -> list[Any]:
    """The body's list of turns (Messages) or items (Responses); a string ``input`` is none."""
    turns = body.get("input" if fmt is WireFormat.RESPONSES else "messages")
    return turns if isinstance(turns, list) else []


def chain(body: Mapping[str, Any], fmt: WireFormat) -> list[str]:
    """``out[i]``: the hash of everything before history item ``i`` (``out[-1]``: the whole body):
    the instructions (``system`` / ``instructions``), ``tools``, then each turn or item in turn."""
    h = _head(body, fmt)
    out = [h.hexdigest()]
    for item in history(body, fmt):
        h.update(orjson.dumps(_plain(item), option=orjson.OPT_SORT_KEYS))
        out.append(h.copy().hexdigest())
    return out


def _head(body: Mapping[str, Any], fmt: WireFormat) -> Any:
    """The running hash, started on what every history item is read after."""
    head = "instructions" if fmt is WireFormat.RESPONSES else "system"
    return hashlib.blake2b(orjson.dumps([_plain(body.get(head)), _plain(body.get("tools"))],
                                        option=orjson.OPT_SORT_KEYS), digest_size=DIGEST_BYTES)


def _plain(value: Any) -> Any:
    """``value`` without ``cache_control``, the one edit a prefix check does not see."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def carriers(body: Mapping[str, Any], fmt: WireFormat) -> list[Carrier]:
    """The reasoning a body holds, in order: each thinking block (Messages), each reasoning item."""
    return [c for c, _ in _with_prefixes(body, fmt)]


def _with_prefixes(body: Mapping[str, Any], fmt: WireFormat) -> list[tuple[Carrier, str]]:
    """Each carrier of ``body`` with the hash of what stands before it, as the body is."""
    out: list[tuple[Carrier, str]] = []
    h = _head(body, fmt)
    for i, item in enumerate(history(body, fmt)):
        for j, block in _reasoning_of(item, fmt):
            out.append((_carrier_at(i, j, block, fmt), _before(h, item, j, fmt)))
        h.update(orjson.dumps(_plain(item), option=orjson.OPT_SORT_KEYS))
    return out


def _reasoning_of(item: Any, fmt: WireFormat) -> list[tuple[int, Any]]:
    """The reasoning in one turn (its thinking blocks, by index) or item (itself, index -1)."""
    if not isinstance(item, dict):
        return []
    if fmt is WireFormat.RESPONSES:
        return [(-1, item)] if item.get("type") == "reasoning" else []
    content = item.get("content")
    if item.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [(j, b) for j, b in enumerate(content) if isinstance(b, dict) and b.get("type") in THINKING_TYPES]


def _carrier_at(position: int, index: int, block: Mapping[str, Any], fmt: WireFormat) -> Carrier:
    if fmt is WireFormat.RESPONSES:
        return Carrier(position, digest(block.get("encrypted_content") or block.get("id") or block), 1)
    return Carrier(position, digest(_identity(block)), 1, (index,))


def _before(h: Any, item: Mapping[str, Any], index: int, fmt: WireFormat) -> str:
    """The prefix of the reasoning at ``index`` of ``item``: what came before the item, and the
    item's own blocks before it (a block is bound to the earlier blocks of its message too)."""
    if fmt is WireFormat.RESPONSES or index <= 0:
        return h.copy().hexdigest()
    at = h.copy()
    at.update(b"\x00blocks")
    at.update(orjson.dumps(_plain(item["content"][:index]), option=orjson.OPT_SORT_KEYS))
    return at.hexdigest()


def _identity(block: Mapping[str, Any]) -> Any:
    """What identifies a thinking block: its signature (a redacted one's data)."""
    return block.get("signature") or block.get("data") or block


def loop_start(body: Mapping[str, Any], fmt: WireFormat) -> int | None:
    """Position of the newest user message that opens a turn (not tool results, not one of
    Sieve's markers): the loop after it is the one under way."""
    items = history(body, fmt)
    for i in range(len(items) - 1, -1, -1):
        if _opens_turn(items[i], fmt):
            return i
    return None


def _opens_turn(item: Any, fmt: WireFormat) -> bool:
    if not isinstance(item, dict) or item.get("role") != "user":
        return False
    content = item.get("content")
    if isinstance(content, str):
        return not content.startswith("[sieve:")
    parts = [p for p in content or () if isinstance(p, dict)]
    if fmt is WireFormat.MESSAGES and any(p.get("type") == "tool_result" for p in parts):
        return False
    texts = [p.get("text") for p in parts if isinstance(p.get("text"), str)]
    return not texts or not all(t.startswith("[sieve:") for t in texts)


def judge(forward: Mapping[str, Any], sent: Mapping[str, Any], fmt: WireFormat, bound: Mapping[str, str],
          pending: set[str], lost: set[str], strip: Callable[[Carrier, bool], bool] = lambda c, in_loop: False
          ) -> Verdict:
    """``forward`` judged against what the client ``sent`` (module docstring). ``bound``: per carrier
    seen before, the prefix it is bound to; ``pending``: the bodies sent since, whose answers'
    carriers are met here for the first time (each is bound to the body it answers, so it opens
    its message). ``strip(carrier, in_loop)`` says whether an invalid thinking block comes out
    (Messages); what follows is hashed as it is forwarded, without it (``Verdict.body``)."""
    verdict = Verdict(loop_start=loop_start(forward, fmt))
    clients = dict((c.digest, (c, prefix)) for c, prefix in _with_prefixes(sent, fmt))
    items, h = list(history(forward, fmt)), _head(forward, fmt)
    for i, item in enumerate(items):
        found = _reasoning_of(item, fmt)
        if found:
            items[i] = _judged_item(verdict, i, item, found, h, fmt, (bound, pending, lost, clients), strip)
        h.update(orjson.dumps(_plain(items[i]), option=orjson.OPT_SORT_KEYS))
    client_loop = loop_start(sent, fmt)
    for carrier, _ in clients.values():  # what the rewrite left out altogether
        if carrier.digest not in verdict.prefixes:
            _count(verdict, carrier, client_loop is not None and carrier.position > client_loop, lost)
    verdict.body = {**forward, ("input" if fmt is WireFormat.RESPONSES else "messages"): items} \
        if verdict.stripped else dict(forward)
    verdict.whole = h.hexdigest()
    return verdict


def _judged_item(verdict: Verdict, i: int, item: dict[str, Any], found: list[tuple[int, Any]], h: Any,
                 fmt: WireFormat, known: tuple, strip: Callable[[Carrier, bool], bool]) -> dict[str, Any]:
    """One turn or item with reasoning: each piece judged in order, against the prefix it has as
    forwarded (the blocks taken out before it are out); the turn without the blocks taken out."""
    bound, pending, lost, clients = known
    gone: set[int] = set()
    for j, block in found:
        carrier = _carrier_at(i, j, block, fmt)
        seen = {**item, "content": [b for k, b in enumerate(item["content"]) if k not in gone]} if gone else item
        before = verdict.prefixes[carrier.digest] = _before(h, seen, j - sum(1 for k in gone if k < j), fmt)
        made_under = bound.get(carrier.digest)
        valid = before == made_under if made_under is not None else before in pending
        untouched = carrier.digest in clients and clients[carrier.digest][1] == before
        if not valid and not untouched and _judged_invalid(verdict, carrier, carrier.digest in clients, lost, strip):
            gone.add(j)
    if not gone:
        return item
    return {**item, "content": [b for k, b in enumerate(item["content"]) if k not in gone]}


def _judged_invalid(verdict: Verdict, carrier: Carrier, clients: bool, lost: set[str],
                    strip: Callable[[Carrier, bool], bool]) -> bool:
    """An invalid carrier noted (counted when it is the client's: a pinned exchange's is Sieve's
    own); whether it comes out."""
    verdict.invalid.append(carrier)
    in_loop = verdict.in_loop(carrier)
    if clients:
        _count(verdict, carrier, in_loop, lost)
    if not strip(carrier, in_loop):
        return False
    verdict.stripped.append(carrier)
    return True


def _count(verdict: Verdict, carrier: Carrier, in_loop: bool, lost: set[str]) -> None:
    if carrier.digest in lost or carrier.digest in verdict.lost_digests:
        return
    scope = Scope.CURRENT_LOOP if in_loop else Scope.EARLIER
    verdict.lost[scope] = verdict.lost.get(scope, 0) + carrier.count
    verdict.lost_digests.append(carrier.digest)


def strippable(body: Mapping[str, Any], carrier: Carrier) -> bool:
    """Whether taking thinking blocks out of the carrier's turn leaves it something to say."""
    content = body["messages"][carrier.position]["content"]
    return any(not isinstance(b, dict) or b.get("type") not in THINKING_TYPES for b in content)


def input_transformations(payload: Mapping[str, Any]) -> list[Any]:
    """The ``input_transformations`` entries of a provider's answer: an Anthropic message, an
    OpenAI Responses object, or an event carrying either (``message``, ``response``): what the
    provider changed in the request's input before the model saw it (reasoning it dropped)."""
    for holder in (payload, payload.get("message"), payload.get("response")):
        if isinstance(holder, Mapping) and isinstance(holder.get("input_transformations"), list):
            return list(holder["input_transformations"])
    return []


__all__ = ["Carrier", "Scope", "THINKING_TYPES", "Verdict", "carriers", "chain", "digest", "history", "input_transformations", "judge",
           "loop_start", "strippable"]
