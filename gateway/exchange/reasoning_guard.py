"""Preserved reasoning on the request path: no request fails because Sieve rewrote history, and what it cost is counted.

Providers bind a model's reasoning to the history before it (ARCHITECTURE.md 2a,
``gateway.wire.formats.reasoning``). Between epochs Sieve's forwards only grow,
so nothing is invalidated; an epoch (or a forward Sieve changed for any reason)
can leave reasoning after its first changed position bound to a prefix that is
gone. Per the providers' documentation:

* **Anthropic**, a model with preserved thinking (settings ``preserved_thinking_models``):
  an invalid block answers 400 "bound to a different conversation". A trimmed
  history is to have the thinking of the turns kept after the change removed
  ("Fix a thinking block bound to a different conversation", "Change tools or
  instructions without failing the prefix check"), so Sieve takes those blocks out;
  but a thinking-enabled request's last assistant turn must open with its thinking
  block (the turn a tool loop is under way in), so in the current loop the blocks
  stay and the request sets ``thinking.block_binding.prefix_mismatch_behavior:
  "drop_block"`` with ``anthropic-beta: thinking-binding-controls-2026-08-01`` (merged
  into the client's own betas): the API drops them and lists them in
  ``input_transformations``. A request that still comes back with that 400 (a model
  Sieve did not know binds its thinking) is sent once more in that form, and the
  conversation keeps it. A model without preserved thinking does not check
  prefixes (and reads no earlier turn's thinking): its requests go as they are.
* **OpenAI Responses**: a reasoning item after a prefix change is dropped by the
  API without an error (and an item a message or call of its response names by id
  must not go missing), so the request goes as it is; what it lost is counted.

Each conversation's record (its key with ``|reasoning``, beside the frozen plan, in
the state store) holds the prefix each carrier still valid is bound to, the hashes
of the bodies sent upstream since its last request (what the answers' reasoning is
bound to) and the carriers already counted as lost, so a loss is counted once, on the request whose
rewrite caused it: ``sieve_reasoning_invalidated_total{org,route,scope}``, the
``x-sieve-reasoning-invalidated`` header, the audit line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from gateway.exchange.prune_step import conversation_key
from gateway.config import Settings
from gateway.state import ConversationStore
from gateway.wire import Carrier, ModelCall, Scope, Verdict, WireFormat, carriers, chain, judge, strippable

log = logging.getLogger("sieve.reasoning")
KEY_SUFFIX = "|reasoning"
BINDING_BETA = "thinking-binding-controls-2026-08-01"
DROP_BLOCK = {"prefix_mismatch_behavior": "drop_block"}
# Anthropic's 400 for a block whose prefix changed ("Fix a thinking block bound to a different conversation").
PREFIX_ERROR = b"bound to a different conversation"
MAX_LOST = 4096  # carriers remembered as counted (the oldest go first: at worst one is counted twice)


@dataclass(slots=True)
class ReasoningRecord:
    """One conversation's record as this request read it (module docstring)."""

    key: str
    bound: dict[str, str] = field(default_factory=dict)  # carrier -> the prefix it is bound to
    pending: set[str] = field(default_factory=set)      # bodies sent since: the prefixes new carriers have
    lost: list[str] = field(default_factory=list)       # carriers counted as lost
    stripped: list[str] = field(default_factory=list)   # of those, the ones whose blocks Sieve takes out
    binding: bool = False  # drop_block on every request (a prefix-check 400 was seen)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"v": 1, "bound": self.bound, "pending": sorted(self.pending),
                             "lost": self.lost[-MAX_LOST:], "stripped": self.stripped[-MAX_LOST:],
                             "binding": self.binding})

    @classmethod
    def from_bytes(cls, key: str, raw: bytes | None) -> "ReasoningRecord":
        try:
            d = orjson.loads(raw) if raw else {}
            return cls(key, dict(d.get("bound") or {}), set(d.get("pending") or ()), list(d.get("lost") or ()),
                       list(d.get("stripped") or ()), bool(d.get("binding")))
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            return cls(key)


@dataclass(slots=True)
class Guarded:
    """A forward as the guard leaves it: the body, the headers it needs, what it cost."""

    body: dict[str, Any]
    record: ReasoningRecord | None = None
    fmt: WireFormat = WireFormat.CHAT
    lost: dict[Scope, int] = field(default_factory=dict)
    stripped: int = 0     # blocks Sieve took out
    dropped: int = 0      # blocks forwarded for the provider to drop (drop_block)
    changed: bool = False  # Sieve's forward differs from what the client sent
    retried: bool = False

    @property
    def invalidated(self) -> int:
        return sum(self.lost.values())


class ReasoningGuard:
    def __init__(self, store: ConversationStore,
                 preserved_models: tuple[str, ...] = Settings.preserved_thinking_models) -> None:
        self._store = store
        self._preserved = tuple(m.lower() for m in preserved_models)

    def binds(self, model: Any) -> bool:
        """A model whose provider binds reasoning to its prefix (and drops or refuses it)."""
        return isinstance(model, str) and model.lower().startswith(self._preserved)

    async def guard(self, call: ModelCall, body: dict[str, Any], changed: bool) -> Guarded:
        """``body`` (the forward in the client's format) made valid for the provider, and what
        Sieve's rewrite cost in reasoning. ``changed``: Sieve's forward differs from the client's."""
        fmt = call.format
        if not self._applies(fmt, body, call.sent_body):
            return Guarded(body, fmt=fmt, changed=changed)
        record = await self._load(call)
        out = Guarded(body, record, fmt, changed=changed)
        lost, stripped = set(record.lost), set(record.stripped)
        thinking = _thinking_on(body, True)

        def strip(carrier: Carrier, in_loop: bool) -> bool:
            """Blocks taken out stay out, blocks left for the provider to drop stay in (either way
            the carriers after them keep the prefix they were made under); a carrier invalid for
            the first time loses its blocks, unless the request's last turn must open with them."""
            if carrier.digest in lost:
                return carrier.digest in stripped
            return fmt is WireFormat.MESSAGES and not (thinking and in_loop) and strippable(body, carrier)

        verdict = judge(body, call.sent_body, fmt, record.bound, record.pending, lost, strip)
        out.body, out.lost = verdict.body, dict(verdict.lost)
        out.stripped = sum(c.count for c in verdict.stripped if c.digest not in lost)
        kept_invalid = verdict.kept_invalid
        if fmt is WireFormat.MESSAGES and (kept_invalid or record.binding):
            out.body = with_drop_block(out.body)
            out.dropped = sum(c.count for c in kept_invalid)
        record.lost.extend(verdict.lost_digests)
        record.stripped.extend(c.digest for c in verdict.stripped if c.digest not in stripped)
        record.bound, record.pending = _still_valid(verdict), set()
        return out

    async def prepare(self, call: ModelCall, forwarded: dict[str, Any], changed: bool) -> Guarded:
        """``guard``, then the beta header on ``call`` where the body asks for drop_block, and the
        record saved before the forward goes (the answer's reasoning is bound to it, and the
        client's next request may come as soon as the answer ends). A bug here forwards the
        body as written."""
        try:
            guarded = await self.guard(call, forwarded, changed)
        except Exception as exc:  # noqa: BLE001 - a bug here must not fail the request
            log.exception("reasoning guard failed (%s); forwarding as written", type(exc).__name__)
            return Guarded(forwarded, fmt=call.format, changed=changed)
        if needs_beta(guarded.body):
            call.headers = with_beta(call.headers)
        self.sent(guarded, guarded.body)
        await self.save(guarded, call.policy.state_ttl_s)
        return guarded

    async def retry_body(self, guarded: Guarded | None, call: ModelCall, status: int,
                         answer: bytes | None) -> dict[str, Any] | None:
        """After a prefix-check 400 on a request Sieve changed: the body to send once more, in the
        safe form (``safe_form``), the beta header set on ``call``; None: the answer stands."""
        if guarded is None or not is_prefix_error(status, answer):
            return None
        body = self.safe_form(guarded)
        if body is None:
            return None
        log.warning("request %s: the provider refused reasoning Sieve's rewrite invalidated; sent again "
                    "with drop_block", call.request_id)
        call.headers = with_beta(call.headers)
        await self.save(guarded, call.policy.state_ttl_s)
        return body

    async def round_sent(self, guarded: Guarded | None, body: Mapping[str, Any], ttl_s: int) -> None:
        """A sieve_expand round's body went upstream: its answer's reasoning is bound to it."""
        if guarded is not None and guarded.record is not None:
            self.sent(guarded, body)
            await self.save(guarded, ttl_s)

    def sent(self, guarded: Guarded, body: Mapping[str, Any]) -> None:
        """A body sent upstream (a sieve_expand round's too): the answer to it is bound to it whole."""
        if guarded.record is not None:
            guarded.record.pending.add(chain(body, guarded.fmt)[-1])

    async def save(self, guarded: Guarded, ttl_s: int) -> None:
        record = guarded.record
        if record is None:
            return
        try:
            await self._store.put(record.key, record.to_bytes(), ttl_s)
        except Exception as exc:  # noqa: BLE001 - the next request judges without it
            log.warning("reasoning record not saved (%s)", exc)

    def safe_form(self, guarded: Guarded) -> dict[str, Any] | None:
        """The forward once more with drop_block (after a prefix-check 400 on a request Sieve
        changed; once), the conversation keeping it; None when there is nothing to retry."""
        if guarded.retried or guarded.fmt is not WireFormat.MESSAGES or not guarded.changed:
            return None
        guarded.retried = True
        if guarded.record is not None:
            guarded.record.binding = True
        guarded.body = with_drop_block(guarded.body)
        return guarded.body

    def _applies(self, fmt: WireFormat, body: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
        """Reasoning may be in play: the history holds some, or the request asks the model to reason."""
        if fmt is WireFormat.MESSAGES:  # a model without preserved thinking checks no prefix
            return self.binds(body.get("model"))
        if fmt is WireFormat.RESPONSES:
            include = body.get("include")
            return body.get("reasoning") is not None or bool(carriers(sent, fmt)) or \
                (isinstance(include, list) and "reasoning.encrypted_content" in include)
        return False

    async def _load(self, call: ModelCall) -> ReasoningRecord:
        key = conversation_key(call.identity.org, call.body, call.sieve.conversation_id) + KEY_SUFFIX
        try:
            return ReasoningRecord.from_bytes(key, await self._store.get(key))
        except Exception as exc:  # noqa: BLE001 - judged as a conversation seen for the first time
            log.warning("reasoning record unavailable (%s)", exc)
            return ReasoningRecord(key)


def _still_valid(verdict: Verdict) -> dict[str, str]:
    """The carriers the forward holds valid, each with its prefix."""
    invalid = {c.digest for c in verdict.invalid}
    return {d: prefix for d, prefix in verdict.prefixes.items() if d not in invalid}


def _thinking_on(body: Mapping[str, Any], binds: bool) -> bool:
    """Whether the request thinks: its ``thinking`` not disabled; a model with preserved
    thinking thinks (adaptively) when the request says nothing."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        return thinking.get("type") != "disabled"
    return binds


def with_drop_block(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` asking the API to drop invalid thinking blocks rather than refuse them."""
    thinking = body.get("thinking")
    thinking = dict(thinking) if isinstance(thinking, dict) else {"type": "adaptive"}
    thinking["block_binding"] = {**(thinking.get("block_binding") or {}), **DROP_BLOCK}
    return {**body, "thinking": thinking}


def with_beta(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the binding controls beta added to the client's own ``anthropic-beta``."""
    out = {k: v for k, v in headers.items() if k.lower() != "anthropic-beta"}
    betas = [b.strip() for k, v in headers.items() if k.lower() == "anthropic-beta" for b in v.split(",")]
    betas = [b for b in betas if b]
    if BINDING_BETA not in betas:
        betas.append(BINDING_BETA)
    out["anthropic-beta"] = ",".join(betas)
    return out


def needs_beta(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and isinstance(thinking.get("block_binding"), dict)


def is_prefix_error(status: int, body: bytes | None) -> bool:
    return status == 400 and body is not None and PREFIX_ERROR in body


__all__ = ["BINDING_BETA", "Guarded", "KEY_SUFFIX", "ReasoningGuard",
           "ReasoningRecord", "is_prefix_error", "needs_beta", "with_beta", "with_drop_block"]
