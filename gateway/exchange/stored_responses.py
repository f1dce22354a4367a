"""Stored Responses belong to the org that made them: the ids Sieve relayed, and whose they are.

With the gateway's own provider key every org shares one provider account, so the
provider would serve any org a response, its input items or its continuation, given
the id. Sieve keeps a registry (``gateway.state``: in memory, or Redis shared by the
replicas) of every response it relays, streamed ones included, and of the
conversations they belong to: id -> the org, and the size of its chain (what a
request continuing it sends the model again: its input, earlier turns included, and
its output), for the provider's retention (``RETENTION_S``: OpenAI keeps a stored response 30 days)::

    stored = StoredResponses(stores.responses)
    chain = await stored.continued(identity, policy, body)   # previous_response_id / conversation
    await stored.owned(identity, policy, "resp_123")         # GET/DELETE /v1/responses/{id} and the rest
    await stored.record(identity.org, "resp_456", 1_830, conversation=None)

A request naming an id that is not the caller's (another org's, or one Sieve never
relayed) is a 404 in OpenAI's shape, the same for both, so it tells nothing of what
exists; a policy may let ids Sieve never saw through (``allow_unmanaged_response_ids``:
made with the provider directly), never another org's. The chain's size is what a
continuation reserves on the budgets (``gateway.exchange.budget_guard``); an unmanaged one's is
unknown, so it reserves the policy's ``reference_floor_tokens``. A registry that cannot
be read refuses the request (503): ownership is not checked open.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

from gateway.errors import StoreUnavailable, UnknownStoredResponse
from gateway.pruning import Policy
from gateway.state import ResponseRegistry, StoredResponse
from gateway.wire import RESPONSE_ID_CHARS, Identity

__all__ = ["RESPONSE_ID_CHARS", "RETENTION_S", "StoredResponses", "conversation_id"]

log = logging.getLogger("sieve.stored_responses")
# The alphabet of the providers' ids (resp_..., conv_..., msg_...; gateway.wire): one path segment, never a dot.
_RESPONSE_ID = re.compile(RESPONSE_ID_CHARS)
RETENTION_S = 30 * 86_400


class StoredResponses:
    def __init__(self, registry: ResponseRegistry, retention_s: int = RETENTION_S) -> None:
        self._registry = registry
        self._retention_s = retention_s

    async def owned(self, identity: Identity, policy: Policy, response_id: str,
                    param: str | None = None) -> int | None:
        """The chain size of ``response_id`` when the caller may use it (None: an id Sieve never
        relayed, which the policy lets through); else ``UnknownStoredResponse`` (404)."""
        what = "Conversation" if param == "conversation" else "Response"
        if not _RESPONSE_ID.fullmatch(response_id):
            raise UnknownStoredResponse(f"{what} with id {response_id[:64]!r} not found.", param=param)
        entry = await self._registry.get(response_id)
        if entry is not None and entry.org == identity.org:
            return entry.tokens
        if entry is None and policy.allow_unmanaged_response_ids:
            return None
        raise UnknownStoredResponse(f"{what} with id {response_id!r} not found.", param=param)

    async def continued(self, identity: Identity, policy: Policy, body: Mapping[str, Any]) -> int:
        """The stored history a Responses body continues (``previous_response_id``,
        ``conversation``): its size in tokens, each checked to be the caller's (404 if not)."""
        tokens = 0
        for param, response_id in (("previous_response_id", body.get("previous_response_id")),
                                   ("conversation", conversation_id(body.get("conversation")))):
            if isinstance(response_id, str):
                size = await self.owned(identity, policy, response_id, param)
                tokens += policy.reference_floor_tokens if size is None else size
        return tokens

    async def record(self, org: str, response_id: Any, tokens: int, conversation: Any = None) -> None:
        """``response_id`` (and the conversation it belongs to) is ``org``'s, its chain ``tokens``
        long. A registry that cannot be written is logged: the owner's later requests with that
        id are then refused, nothing is exposed."""
        for name in (response_id, conversation_id(conversation)):
            if not isinstance(name, str) or not _RESPONSE_ID.fullmatch(name):
                continue
            try:
                if not await self._registry.claim(name, StoredResponse(org, max(tokens, 0)), self._retention_s):
                    log.warning("stored response %s is another org's: not recorded for %s", name, org)
            except StoreUnavailable:
                log.warning("stored-response registry unreachable: %s not recorded for %s", name, org)

    async def forget(self, response_id: str) -> None:
        """A response its owner deleted."""
        try:
            await self._registry.forget(response_id)
        except StoreUnavailable:
            log.warning("stored-response registry unreachable: %s not forgotten (it expires)", response_id)


def conversation_id(value: Any) -> str | None:
    """The id a Responses ``conversation`` names: the string itself, or its object's ``id``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("id"), str):
        return value["id"]
    return None
