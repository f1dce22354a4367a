"""One parsed, authorized request, as every layer above the wire sees it.

A route reads the body and headers, authenticates the caller and finds its
policy; from then on the request travels as one :class:`ChatCall`::

    call = ChatCall(request_id, body, len(raw), identity, policy, parse_sieve_headers(headers), headers)
    call.identity.org, call.policy.target_tokens, call.sieve.conversation_id
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from gateway.pruning.policy import Policy
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


@dataclass(slots=True, weakref_slot=True)  # weakref: gateway.big_bodies sees when a big one is freed
class ChatCall:
    request_id: str
    body: dict[str, Any]
    body_bytes: int
    identity: Identity
    policy: Policy
    sieve: SieveHeaders
    headers: Mapping[str, str]
    started: float = field(default_factory=time.perf_counter)
