"""A model's reasoning in a native body, and whether the history before it is the one it was made under.

Providers bind each piece of reasoning they return to its prefix, everything the
request held before it (ARCHITECTURE.md 2a): Anthropic checks every ``thinking`` /
``redacted_thinking`` block against ``system``, ``tools`` and every earlier message
and block (400, or the block dropped under ``drop_block``); OpenAI drops a
``reasoning`` item whose prefix changed, silently. A *carrier* is what holds
reasoning: an assistant turn with such blocks, or a reasoning item.

A conversation's record (``gateway.reasoning``) keeps, per carrier, the prefix it
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
    """Reasoning at ``position`` of a body's history (a Messages turn, a Responses item)."""

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
    """The reasoning a body holds, in order."""
    found = []
    for i, item in enumerate(history(body, fmt)):
        carrier = _carrier(i, item, fmt)
        if carrier is not None:
            found.append(carrier)
    return found


def _carrier(position: int, item: Any, fmt: WireFormat) -> Carrier | None:
    if not isinstance(item, dict):
        return None
    if fmt is WireFormat.RESPONSES:
        if item.get("type") != "reasoning":
            return None
        return Carrier(position, digest(item.get("encrypted_content") or item.get("id") or item), 1)
    content = item.get("content")
    if item.get("role") != "assistant" or not isinstance(content, list):
        return None
    blocks = tuple(j for j, b in enumerate(content) if isinstance(b, dict) and b.get("type") in THINKING_TYPES)
    if not blocks:
        return None
    return Carrier(position, digest([_identity(content[j]) for j in blocks]), len(blocks), blocks)


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
    carriers are met here for the first time (each is bound to the body it answers). ``strip(carrier,
    in_loop)`` says whether an invalid carrier's blocks come out (Messages); the carriers after one
    are hashed as it is forwarded, without them (``Verdict.body``)."""
    verdict = Verdict(loop_start=loop_start(forward, fmt))
    clients = {c.digest: c for c in carriers(sent, fmt)}
    behind = chain(sent, fmt)  # a carrier whose prefix is the client's own was not touched by Sieve
    items, h = list(history(forward, fmt)), _head(forward, fmt)
    for i, item in enumerate(items):
        carrier = _carrier(i, item, fmt)
        if carrier is not None:
            before = verdict.prefixes[carrier.digest] = h.copy().hexdigest()
            made_under = bound.get(carrier.digest)
            valid = before == made_under if made_under is not None else before in pending
            untouched = carrier.digest in clients and behind[clients[carrier.digest].position] == before
            if not valid and not untouched:
                items[i] = _judged_invalid(verdict, carrier, item, carrier.digest in clients, lost, strip)
        h.update(orjson.dumps(_plain(items[i]), option=orjson.OPT_SORT_KEYS))
    client_loop = loop_start(sent, fmt)
    for carrier in clients.values():  # what the rewrite left out altogether
        if carrier.digest not in verdict.prefixes:
            _count(verdict, carrier, client_loop is not None and carrier.position > client_loop, lost)
    verdict.body = {**forward, ("input" if fmt is WireFormat.RESPONSES else "messages"): items} \
        if verdict.stripped else dict(forward)
    verdict.whole = h.hexdigest()
    return verdict


def _judged_invalid(verdict: Verdict, carrier: Carrier, item: dict[str, Any], clients: bool, lost: set[str],
                    strip: Callable[[Carrier, bool], bool]) -> dict[str, Any]:
    """An invalid carrier noted (counted when it is the client's: a pinned exchange's is Sieve's
    own), and its blocks taken out where ``strip`` says so."""
    verdict.invalid.append(carrier)
    in_loop = verdict.in_loop(carrier)
    if clients:
        _count(verdict, carrier, in_loop, lost)
    if not strip(carrier, in_loop):
        return item
    verdict.stripped.append(carrier)
    return {**item, "content": [b for j, b in enumerate(item["content"]) if j not in carrier.blocks]}


def _count(verdict: Verdict, carrier: Carrier, in_loop: bool, lost: set[str]) -> None:
    if carrier.digest in lost or carrier.digest in verdict.lost_digests:
        return
    scope = Scope.CURRENT_LOOP if in_loop else Scope.EARLIER
    verdict.lost[scope] = verdict.lost.get(scope, 0) + carrier.count
    verdict.lost_digests.append(carrier.digest)


def strippable(body: Mapping[str, Any], carrier: Carrier) -> bool:
    """Whether taking the carrier's blocks out leaves its turn something to say."""
    content = body["messages"][carrier.position]["content"]
    return len(content) > len(carrier.blocks)


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
