"""One parsed, authorized request, as every layer above the wire sees it.

A route reads the body and headers, authenticates the caller and finds its
policy; from then on the request travels as one :class:`ModelCall`::

    call = ModelCall(request_id, body, len(raw), identity, policy, parse_sieve_headers(headers), headers)
    call.identity.org, call.policy.target_tokens, call.sieve.conversation_id

A request in another format (Anthropic Messages, OpenAI Responses) travels the
same way: ``body`` is its chat-shaped view (what the pruner, the conversation
key and the accounting read), ``native`` the body as the client sent it, and
``view`` says where each view message came from, so the decision can be
written back in the format.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from gateway.pruning import Policy
from gateway.wire.formats import ChatView, WireFormat
from gateway.wire.headers import SieveHeaders

ANONYMOUS_ORG = "anonymous"


class IdentityKind(str, Enum):
    VIRTUAL = "virtual"          # a Sieve virtual key
    PASSTHROUGH = "passthrough"  # the client's own provider key, forwarded upstream
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Identity:
    """Who is calling: the org (budgets, policy, metrics), and the team and key within it."""

    org: str
    team: str | None = None
    key_name: str | None = None
    kind: IdentityKind = IdentityKind.VIRTUAL

    @property
    def forwards_client_key(self) -> bool:
        return self.kind is IdentityKind.PASSTHROUGH


ANONYMOUS = Identity(ANONYMOUS_ORG, kind=IdentityKind.ANONYMOUS)


@dataclass(slots=True, weakref_slot=True)  # weakref: gateway.exchange.big_bodies sees when a big one is freed
class ModelCall:
    request_id: str
    body: dict[str, Any]
    body_bytes: int
    identity: Identity
    policy: Policy
    sieve: SieveHeaders
    headers: Mapping[str, str]
    started: float = field(default_factory=time.perf_counter)
    format: WireFormat = WireFormat.CHAT
    native: dict[str, Any] | None = None  # the body as sent, when ``body`` is its view
    view: ChatView | None = None

    @property
    def sent_body(self) -> dict[str, Any]:
        """The body as the client sent it, in its own format."""
        return self.native if self.native is not None else self.body
    # The route template it came by (the access line's ``route``), and whether it was sent
    # upstream: its access line is then the accounting's to write (gateway.telemetry.access_log).
    route: str = ""
    forwarded: bool = False
