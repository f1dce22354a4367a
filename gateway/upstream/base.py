"""The one seam between Sieve and a provider: ``Upstream.send(route, call, body)``.

Two transports implement it, and the router picks one per model
(:class:`gateway.config.settings.RouteKind`), as httpx's client picks a transport
per URL::

    route = router.resolve(call.body["model"])           # ResolvedRoute (cached per model)
    response = await router.upstream_for(route).send(route, call, forwarded_body)
    response.body           # a whole answer, or
    response.chunks         # a stream of SSE bytes, relayed as they come

* :class:`gateway.upstream.openai_compat.OpenAICompatibleUpstream`: the HTTP/1.1
  fast path (:class:`gateway.upstream.http1.Http1Client`), byte-transparent to an
  OpenAI-compatible API;
* :class:`gateway.upstream.litellm_route.LiteLLMUpstream`: every other provider
  through litellm, its answers re-encoded as OpenAI JSON / SSE.

A transport raises ``UpstreamTimeout`` / ``UpstreamUnavailable`` when it gets
no answer; a provider's own error comes back as a response with its status.
Every exchange with a provider goes through it: forwards, the pass-through routes
and the model listing (``OpenAICompatibleUpstream.relay``), and the LLM scorer's
calls (``gateway.scorers.clients.ScorerClient``: a ``ModelCall`` of Sieve's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, AsyncIterator, Protocol

from gateway.config import ModelRoute, RouteKind
from gateway.wire import ModelCall


class KeyScheme(StrEnum):
    """How a provider takes its key."""

    BEARER = "bearer"      # Authorization: Bearer <key> (OpenAI and the OpenAI-compatible)
    X_API_KEY = "x-api-key"  # x-api-key: <key> (Anthropic); a client's own Bearer token passes as it came


@dataclass(frozen=True, slots=True)
class ResolvedRoute:
    """Where one model's requests go: the transport kind, the URL, the key."""

    model: str
    kind: RouteKind
    url: str | None           # the format's endpoint (OPENAI kind): .../chat/completions, .../responses, .../v1/messages
    api_key: str | None       # configured key; None = forward the client's
    upstream_model: str | None
    route: ModelRoute
    key_scheme: KeyScheme = KeyScheme.BEARER


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: dict[str, str]
    body: bytes | None = None                      # non-streaming
    chunks: AsyncIterator[bytes] | None = None     # streaming
    release: Any = None                            # closes the upstream response


class Upstream(Protocol):
    async def send(self, route: ResolvedRoute, call: ModelCall, body: dict[str, Any]) -> UpstreamResponse:
        """Forward ``body`` (already pruned; ``body["stream"]`` says how it answers) for ``call``."""
        ...
