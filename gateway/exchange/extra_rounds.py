"""The seam where a feature above the request path adds rounds of its own to one request.

The forward calls it at three points (``gateway.exchange.forward``): before the prune
(``pinned``: what the conversation holds for this request, and the room it takes under
the target), after it (``open``, then ``body_for`` to shape the forwarded body), and once
the provider answered (``answer``, which may ask the provider again through ``send``).
Sieve's ``sieve_expand`` rounds are the one implementation (``gateway.expand.Expander``,
wired in ``gateway.api.services``); declared here, the request path names no floor above
its own.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

from gateway.exchange.accounting import RequestRecord
from gateway.exchange.prune_step import PruneOutcome
from gateway.pruning import PinnedRoom
from gateway.upstream import UpstreamResponse
from gateway.wire import ModelCall

Send = Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]


class Pinned(Protocol):
    """A conversation's record as the prune reads it."""

    # Whether the conversation's forwards carry the feature's tool (None: not decided yet).
    tool: bool | None

    @property
    def room(self) -> tuple[PinnedRoom, ...]:
        """The pinned exchanges that have a place in this request, as the pruner counts them."""


class ExtraRounds(Protocol):
    async def pinned(self, call: ModelCall) -> Pinned | None:
        """Before the prune: the conversation's record; None when the feature is off."""

    async def open(self, call: ModelCall, outcome: PruneOutcome, pinned: Any) -> Any:
        """After the prune: the request's session (None: nothing to do for this request)."""

    def body_for(self, session: Any, forwarded: dict[str, Any]) -> dict[str, Any]:
        """The forwarded body as the session shapes it."""

    async def answer(self, session: Any, record: RequestRecord, body: dict[str, Any],
                     response: UpstreamResponse, send: Send) -> UpstreamResponse:
        """The answer the client gets, after the session's own rounds (``send`` asks again)."""


__all__ = ["ExtraRounds", "Pinned", "Send"]
