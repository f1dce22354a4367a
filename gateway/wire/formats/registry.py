"""The seam between a wire format and the pruning pipeline: one view, one adapter per format.

``WireFormat``, ``ChatView`` and ``FormatAdapter`` live in ``view.py`` (the
adapters import them); this module holds the registry::

    adapter = adapter_for(parse_format(headers.get("x-sieve-format")))
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.pruning import PruneResult
from gateway.wire.chat import WireLimits, check_chat_body
from gateway.wire.formats.anthropic_messages import MessagesAdapter
from gateway.wire.formats.openai_responses import ResponsesAdapter
from gateway.wire.formats.view import FORMAT_HEADER, ChatView, FormatAdapter, WireFormat, parse_format


class ChatAdapter:
    """Chat Completions is the view's own shape: nothing to translate."""

    format = WireFormat.CHAT

    def read(self, body: Mapping[str, Any], limits: WireLimits = WireLimits()) -> ChatView:
        check_chat_body(body, limits)
        return ChatView(dict(body) if not isinstance(body, dict) else body)

    def write(self, body: Mapping[str, Any], view: ChatView, result: PruneResult) -> dict[str, Any]:
        return result.request


def adapter_for(fmt: WireFormat) -> FormatAdapter:
    """The adapter of ``fmt``."""
    return _ADAPTERS[fmt]


_ADAPTERS: dict[WireFormat, FormatAdapter] = {
    WireFormat.CHAT: ChatAdapter(),
    WireFormat.MESSAGES: MessagesAdapter(),
    WireFormat.RESPONSES: ResponsesAdapter(),
}

__all__ = ["FORMAT_HEADER", "ChatAdapter", "ChatView", "FormatAdapter", "WireFormat", "adapter_for", "parse_format"]
