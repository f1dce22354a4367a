"""Whether a request says that more steps of its conversation follow.

A conversation's first decision goes to the low-water mark when more steps follow
(``gateway.pruning.pipeline``, ``continued``): pruned to just under the target, the
very next step would open an epoch and rewrite the prefix the provider cached one
step before. A request says more steps follow when it names its conversation
(``x-sieve-conversation-id``), or when it asks the provider to keep its prefix for
the requests after it:

* OpenAI Chat Completions and Responses: a ``prompt_cache_key``, which routes the
  requests that share it to one cache (Codex CLI sends its session's id);
* Anthropic Messages: a ``cache_control`` breakpoint anywhere (top level, system,
  tools or a message block): a cache write is paid for the reads after it (Claude
  Code marks its system prompt and its newest turn).

Both are protocol fields with one meaning in every domain, so the rule keys on no
data set. A request that does none of these may be the only one of its kind: its
first decision keeps all its target allows.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.wire.formats import WireFormat


def more_steps_follow(body: Mapping[str, Any], fmt: WireFormat, conversation_id: str | None = None) -> bool:
    """``body`` (as the client sent it, in ``fmt``) names its conversation or asks for its
    prefix to be cached."""
    if conversation_id is not None:
        return True
    if fmt is WireFormat.MESSAGES:
        return _has_breakpoint(body)
    key = body.get("prompt_cache_key")
    return isinstance(key, str) and bool(key)


def _has_breakpoint(body: Mapping[str, Any]) -> bool:
    if isinstance(body.get("cache_control"), dict):
        return True
    system = body.get("system")
    if isinstance(system, list) and _marked(system):
        return True
    tools = body.get("tools")
    if isinstance(tools, list) and _marked(tools):
        return True
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and _marked(content):
            return True
    return False


def _marked(blocks: list[Any]) -> bool:
    return any(isinstance(block, dict) and isinstance(block.get("cache_control"), dict) for block in blocks)
