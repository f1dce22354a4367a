"""The view every wire format is read into: a Chat Completions body, and where each message came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Mapping, Protocol, Sequence

from gateway.errors import InvalidRequest
from gateway.pruning import PruneResult

FORMAT_HEADER = "x-sieve-format"


class WireFormat(StrEnum):
    """The request formats Sieve reads (``x-sieve-format`` on ``/v1/prune``)."""

    CHAT = "chat"            # OpenAI Chat Completions
    MESSAGES = "messages"    # Anthropic Messages
    RESPONSES = "responses"  # OpenAI Responses


def parse_format(value: str | None) -> WireFormat:
    """The format an ``x-sieve-format`` header names (chat when absent), or a 400 naming the header."""
    if value is None:
        return WireFormat.CHAT
    try:
        return WireFormat(value)
    except ValueError:
        raise InvalidRequest(f"{FORMAT_HEADER} must be one of {', '.join(WireFormat)}; got {value!r}",
                             param=FORMAT_HEADER) from None


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
