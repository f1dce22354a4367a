"""The seam between a wire format and the pruning pipeline: one view, one adapter per format."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Mapping, Protocol, Sequence

from gateway.pruning.result import PruneResult


class WireFormat(StrEnum):
    """The request formats Sieve reads (``x-sieve-format`` on ``/v1/prune``)."""

    CHAT = "chat"            # OpenAI Chat Completions
    MESSAGES = "messages"    # Anthropic Messages
    RESPONSES = "responses"  # OpenAI Responses


@dataclass(slots=True)
class ChatView:
    """A body seen as Chat Completions: ``body`` holds ``model`` and ``messages`` (and whatever
    else the pruner reads, ``metadata.sieve_goal`` say); ``origins[i]`` says where view
    message ``i`` came from in the native body (the adapter's own business)."""

    body: dict[str, Any]
    origins: Sequence[Any] = field(default_factory=tuple)


class FormatAdapter(Protocol):
    format: WireFormat

    def read(self, body: Mapping[str, Any]) -> ChatView:
        """The view of a checked native body; ``InvalidRequest`` (400) naming the field if the
        body is not one Sieve can read."""

    def write(self, body: Mapping[str, Any], view: ChatView, result: PruneResult) -> dict[str, Any]:
        """The native body to forward: ``body`` with the decision in ``result`` applied
        (``result.request['messages']`` and ``result.sources`` say what is forwarded)."""


class ChatAdapter:
    """Chat Completions is the view's own shape: nothing to translate."""

    format = WireFormat.CHAT

    def read(self, body: Mapping[str, Any]) -> ChatView:
        return ChatView(dict(body) if not isinstance(body, dict) else body)

    def write(self, body: Mapping[str, Any], view: ChatView, result: PruneResult) -> dict[str, Any]:
        return result.request


def adapter_for(fmt: WireFormat) -> FormatAdapter:
    """The adapter of ``fmt``."""
    return _ADAPTERS[fmt]


_ADAPTERS: dict[WireFormat, FormatAdapter] = {WireFormat.CHAT: ChatAdapter()}
