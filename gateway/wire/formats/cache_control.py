"""Anthropic prompt-cache breakpoints (``cache_control``) through a prune.

A client's breakpoint says "cache everything up to here". Pruning keeps that
meaning: a breakpoint on a kept block stays where it is; one on a dropped block
moves to the last kept block before it (the end of what is left of the span it
cached), so the provider still caches that prefix; and at most
``MAX_BREAKPOINTS`` are forwarded (the provider refuses more), the earliest
giving way first (a later breakpoint's prefix holds the earlier one's). For a
client that caches its history, the frozen span ends on a breakpoint as well
(``messages._mark_frozen_end``).

The view never sees ``cache_control`` (``messages.py`` reads text only), so a
client that moves its breakpoints from one request to the next, as Claude
Code moves its last one forward, does not change a message's fingerprint:
the conversation's frozen decisions keep applying.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

MAX_BREAKPOINTS = 4
# Blocks the provider does not let carry a breakpoint.
_UNMARKABLE = frozenset(("thinking", "redacted_thinking"))


def breakpoints_in(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    """The ``cache_control`` values of ``blocks``, in order."""
    return [b["cache_control"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("cache_control"), dict)]


def markable(block: Mapping[str, Any]) -> bool:
    """A block that may carry a breakpoint: not a thinking block, not empty text."""
    return block.get("type") not in _UNMARKABLE and not (block.get("type") == "text" and not block.get("text"))


def with_breakpoint(block: Mapping[str, Any], cache_control: dict[str, Any]) -> dict[str, Any]:
    """``block`` carrying a moved breakpoint (its own one stays if it has one)."""
    if isinstance(block.get("cache_control"), dict):
        return dict(block)
    return {**block, "cache_control": cache_control}


def cap_breakpoints(body: dict[str, Any]) -> None:
    """At most MAX_BREAKPOINTS in ``body`` (tools, system and messages counted): the earliest
    message breakpoints are removed, on copies of the turns and blocks they sit in."""
    fixed = _count(body.get("tools")) + _count(body.get("system"))
    messages = body["messages"]
    marked = [(k, j) for k, turn in enumerate(messages) if isinstance(turn.get("content"), list)
              for j, block in enumerate(turn["content"])
              if isinstance(block, dict) and isinstance(block.get("cache_control"), dict)]
    excess = fixed + len(marked) - MAX_BREAKPOINTS
    if excess <= 0:
        return
    copied: set[int] = set()
    for k, j in marked[:excess]:
        if k not in copied:
            messages[k] = {**messages[k], "content": list(messages[k]["content"])}
            copied.add(k)
        block = dict(messages[k]["content"][j])
        del block["cache_control"]
        messages[k]["content"][j] = block


def _count(blocks: Any) -> int:
    return len(breakpoints_in(blocks)) if isinstance(blocks, list) else 0
