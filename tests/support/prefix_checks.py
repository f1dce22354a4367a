"""Preserved reasoning as the providers document it: reasoning bound to its prefix, checked on the way back.

Anthropic ("Preserved thinking", "Prefix checks on thinking blocks", "Fix a thinking block
bound to a different conversation"), for a model with preserved thinking:

* every ``thinking`` / ``redacted_thinking`` block the API returns is bound to its prefix: the
  top-level ``system``, ``tools``, every earlier message and every earlier block of its own
  message. A block sent back after another prefix is invalid; a change invalidates the blocks
  already after it, and those produced after the change stay valid (leaving a block out or
  moving one changes the prefix of the blocks after it);
* by default (accounts created since 2026-08-31) an invalid block fails the request: 400
  ``messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to
  a different conversation. ...``; with ``thinking.block_binding.prefix_mismatch_behavior:
  "drop_block"`` *and* the beta header ``anthropic-beta: thinking-binding-controls-2026-08-01``
  the invalid blocks are dropped and listed in the response's ``input_transformations``
  (``{"type": "thinking_dropped", "path": "messages.i.content.j", "reason":
  "prefix_binding_mismatch"}``); ``drop_block`` without the header is a 400 asking for it;
* a thinking-enabled request (``thinking`` not disabled; a model with preserved thinking thinks
  adaptively when the request says nothing) whose last user turn holds tool results must have
  its last assistant turn open with a thinking block (400 otherwise), whatever the model;
* a model without preserved thinking checks no prefix.

OpenAI ("Keep the prefix unchanged", "Preserved reasoning"): a ``reasoning`` item whose prefix
(``instructions``, ``tools`` and every earlier input item) changed is dropped without an error
and listed in ``input_transformations`` (``{"type": "reasoning", "id": ..., "action":
"removed", "reason": "prefix_mismatch"}``).

Prefixes are compared with ``cache_control`` aside (Claude Code moves its breakpoints every
request and is documented as unaffected) and with a string content read as one text block.
Every request's outcome is kept (``log``): which issued blocks or items came back valid, which
were dropped, whether it was refused: what a test compares Sieve's own counts with.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

BINDING_BETA = "thinking-binding-controls-2026-08-01"
PRESERVED = ("claude-fable-5", "claude-mythos-5", "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")
THINKING = ("thinking", "redacted_thinking")


@dataclass
class Checked:
    """One request as the provider saw it."""

    fmt: str
    valid: list[str] = field(default_factory=list)     # signatures / item ids sent back and accepted
    dropped: list[str] = field(default_factory=list)   # sent back, bound to another prefix
    transformations: list[dict[str, Any]] = field(default_factory=list)
    refused: str | None = None                         # the 400's message
    issued: str | None = None                          # the answer's own block or item (signature / id)
    main_loop: bool = True                             # an agent loop's request (not a CLI's side request)
    round: bool = False                                # a gateway's own round (it answers a call it took)
    held: bool = True                                  # the answer reaches the client (not taken by a gateway)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())


def _hash(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(_plain(list(parts)), option=orjson.OPT_SORT_KEYS)).hexdigest()


class PrefixChecks:
    """The provider's side: blocks and items issued bound to a prefix, and requests checked."""

    def __init__(self, *, preserved_models: tuple[str, ...] = PRESERVED) -> None:
        self.preserved = preserved_models
        self.issued: dict[str, str] = {}   # signature / item id -> the prefix it is bound to
        self.log: list[Checked] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def binds(self, model: Any) -> bool:
        return isinstance(model, str) and model.startswith(self.preserved)

    # -- Anthropic Messages --------------------------------------------------------------------
    def thinks(self, body: Mapping[str, Any]) -> bool:
        thinking = body.get("thinking")
        if isinstance(thinking, dict):
            return thinking.get("type") != "disabled"
        return self.binds(body.get("model"))

    def thinking_block(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A thinking block for the answer to ``body``: first in a new assistant message."""
        messages = [{**m, "content": _blocks(m.get("content"))} for m in body.get("messages") or ()]
        prefix = _hash(body.get("system"), body.get("tools"), messages, [])
        with self._lock:
            signature = f"sig{next(self._ids):06d}." + prefix[:16]
            self.issued[signature] = prefix
        return {"type": "thinking", "thinking": f"Reasoning over {len(messages)} messages.", "signature": signature}

    def check_messages(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Checked:
        """A Messages request checked; ``Checked.refused`` holds the 400's message, if any."""
        checked = Checked("messages")
        messages = [{**m, "content": _blocks(m.get("content"))} for m in body.get("messages") or ()]
        refusal = self._last_turn_rule(body, messages)
        if refusal is None and self.binds(body.get("model")):
            refusal = self._prefixes(body, messages, headers, checked)
        checked.refused = refusal
        with self._lock:
            self.log.append(checked)
        return checked

    def _prefixes(self, body: Mapping[str, Any], messages: list[dict[str, Any]], headers: Mapping[str, str],
                  checked: Checked) -> str | None:
        broken: list[tuple[int, int, str]] = []
        for i, message in enumerate(messages):
            for j, block in enumerate(message["content"]):
                if not isinstance(block, dict) or block.get("type") not in THINKING:
                    continue
                signature = block.get("signature") or block.get("data") or ""
                bound = self.issued.get(signature)
                if bound is None:
                    return f"messages.{i}.content.{j}: Invalid `signature` in `{block['type']}` block"
                here = _hash(body.get("system"), body.get("tools"), messages[:i], message["content"][:j])
                if here != bound:
                    broken.append((i, j, signature))
                else:
                    checked.valid.append(signature)
        if not broken:
            return None
        behavior = ((body.get("thinking") or {}).get("block_binding") or {}).get("prefix_mismatch_behavior")
        if behavior != "drop_block":
            i, j, _ = broken[0]
            return (f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a "
                    "different conversation. Remove the block, or set "
                    "`thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\".")
        betas = [b.strip() for b in (headers.get("anthropic-beta") or "").split(",")]
        if BINDING_BETA not in betas:
            return ("thinking.block_binding: this field needs the beta header "
                    f"`anthropic-beta: {BINDING_BETA}`")
        for i, j, signature in broken:
            checked.dropped.append(signature)
            checked.transformations.append({"type": "thinking_dropped", "path": f"messages.{i}.content.{j}",
                                            "reason": "prefix_binding_mismatch"})
        return None

    def _last_turn_rule(self, body: Mapping[str, Any], messages: list[dict[str, Any]]) -> str | None:
        """Thinking on and a tool loop under way: the last assistant turn opens with thinking."""
        if not self.thinks(body) or not messages or messages[-1].get("role") != "user":
            return None
        if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in messages[-1]["content"]):
            return None
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
        if last is None or not messages[last]["content"]:
            return None
        first = messages[last]["content"][0]
        kind = first.get("type") if isinstance(first, dict) else type(first).__name__
        if kind in THINKING:
            return None
        return (f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{kind}`. "
                "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
                "(preceeding the lastmost set of `tool_use` and `tool_result` blocks).")

    # -- OpenAI Responses ----------------------------------------------------------------------
    def reasoning_item(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A reasoning item for the answer to ``body``: first in its output."""
        items = body.get("input") if isinstance(body.get("input"), list) else \
            [{"role": "user", "content": body.get("input")}]
        prefix = _hash(body.get("instructions"), body.get("tools"), items)
        with self._lock:
            n = next(self._ids)
            self.issued[f"rs_fake{n:06d}"] = prefix
        return {"id": f"rs_fake{n:06d}", "type": "reasoning", "summary": [],
                "encrypted_content": f"enc{n:06d}.{prefix[:16]}"}

    def check_responses(self, body: Mapping[str, Any]) -> Checked:
        """A Responses request checked: reasoning after a changed prefix dropped, silently."""
        checked = Checked("responses")
        items = body.get("input") if isinstance(body.get("input"), list) else []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or item.get("type") != "reasoning":
                continue
            item_id = str(item.get("id") or "")
            bound = self.issued.get(item_id)
            here = _hash(body.get("instructions"), body.get("tools"), items[:i])
            if bound is not None and here == bound:
                checked.valid.append(item_id)
                continue
            checked.dropped.append(item_id)
            checked.transformations.append({"type": "reasoning", "id": item_id, "action": "removed",
                                            "reason": "prefix_mismatch"})
        with self._lock:
            self.log.append(checked)
        return checked


def newly_lost(log: list[Checked]) -> list[int]:
    """Per request of one agent session (its main loop, in order): the blocks or items the client
    held from the earlier answers that came back invalid or not at all, counted on the first
    request that lost them. What Sieve's ``x-sieve-reasoning-invalidated`` must say."""
    held: list[str] = []
    lost: set[str] = set()
    out = []
    for checked in (c for c in log if c.main_loop and c.refused is None):
        if not checked.round:  # a round is its client request's, which counted what it lost
            gone = {s for s in held if s not in checked.valid} - lost
            lost |= gone
            out.append(len(gone))
        if checked.issued and checked.held:
            held.append(checked.issued)
    return out


def anthropic_refusal(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


__all__ = ["BINDING_BETA", "Checked", "PRESERVED", "PrefixChecks", "anthropic_refusal", "newly_lost"]
