"""The fast path: byte-transparent forwarding to a provider in the client's own format
(an OpenAI-compatible API's Chat Completions or Responses, Anthropic's Messages).

One shared :class:`gateway.upstream.http1.Http1Client` per process (created in the
app's lifespan): a forwarding client sits on every request, and this one costs a
fraction of aiohttp's CPU per request, which cost a fraction of httpx's (BENCHMARKS.md,
``bench/forward_client.py``).

Streams are relayed chunk by chunk as they arrive; nothing is buffered.
A whole answer is read up to ``max_body_bytes`` (``SIEVE_MAX_UPSTREAM_BODY_BYTES``):
the gateway holds it, parses it for usage and relays it, so a provider (or a
proxy in front of one) answering tens of megabytes would otherwise cost that
much memory per request, several times over. Past the limit the connection is
closed and the caller gets a 502 that says so.
A provider's error passes through with its status, headers and JSON body
unchanged; an error body that is not JSON (a load balancer's HTML page) is
put in OpenAI's error shape, so clients can always parse it. The key goes in
the route's :class:`~gateway.upstream.base.KeyScheme`. A URL in Sieve's
own errors is shown through ``redact_url``: an ``api_base`` may carry
credentials (``https://user:pass@proxy``).
"""

from __future__ import annotations

import re
from typing import Any, AsyncIterator, Iterable, Mapping

import orjson

from gateway.errors import UpstreamErrorPage, UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable
from gateway.telemetry import redact_url
from gateway.upstream.base import KeyScheme, ResolvedRoute, UpstreamResponse
from gateway.upstream.http1 import Http1Client, Http1Response
from gateway.wire import INGRESSES, Identity, ModelCall, WireFormat, client_provider_key

# Request headers never forwarded: hop-by-hop, our own, and what the forwarding client sets.
_DROP_REQUEST = frozenset((
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authorization", "proxy-connection", "accept-encoding", "cookie", "x-api-key",
))
# Response headers never relayed (the ASGI server sets its own framing).
_DROP_RESPONSE = frozenset((
    "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding", "date",
    "server", "set-cookie",
))


# With the gateway's key, only these client headers go to the provider: how to answer
# (accept, API versions and betas), who the software is (user-agent, the SDKs'
# x-stainless-*), and retry identity (idempotency keys). Whatever steers billing or
# identity at the provider (OpenAI-Organization, OpenAI-Project) or describes the
# client's network (X-Forwarded-For, Forwarded) stays here: the org pays, the tenant
# must not pick which provider org or project is billed.
FORWARDED_WITH_GATEWAY_KEY = frozenset((
    "accept", "user-agent", "idempotency-key", "x-client-request-id", "openai-beta",
    "anthropic-version", "anthropic-beta", "session-id",
))
FORWARDED_PREFIX_WITH_GATEWAY_KEY = "x-stainless-"


def provider_headers(route: ResolvedRoute, identity: Identity, incoming: Mapping[str, str]) -> dict[str, str]:
    """Headers for the provider of ``route``: :func:`forward_headers` with the key
    :func:`key_headers` picks; the client's own headers go along only with its own key."""
    key = key_headers(route, identity, incoming)
    return forward_headers(incoming, key, clients_key=not route.api_key and bool(key))


def forward_headers(incoming: Mapping[str, str], key: Mapping[str, str], *, clients_key: bool = False) -> dict[str, str]:
    """Headers for the provider, plus ``key`` (:func:`key_headers`). ``clients_key``: the key is
    the caller's own provider key (passthrough, open gateway), so the caller's headers go
    along (its own org and project included), minus hop-by-hop, x-sieve-* and its key
    headers. Otherwise the key is the gateway's (or there is none) and only
    :data:`FORWARDED_WITH_GATEWAY_KEY` pass. ``accept-encoding: identity``: bytes are relayed
    as they come (and read for usage), so the provider must not compress them."""
    if clients_key:
        out = {k: v for k, v in incoming.items()
               if k not in _DROP_REQUEST and k != "authorization" and not k.startswith("x-sieve-")}
    else:
        out = {k: v for k, v in incoming.items()
               if k in FORWARDED_WITH_GATEWAY_KEY or k.startswith(FORWARDED_PREFIX_WITH_GATEWAY_KEY)}
    out.update(key)
    out["content-type"] = "application/json"
    out["accept-encoding"] = "identity"
    return out


def key_headers(route: ResolvedRoute, identity: Identity, incoming: Mapping[str, str]) -> dict[str, str]:
    """The provider key to send: the route's configured one in its provider's scheme, else the
    caller's own provider key (open or passthrough mode; never a Sieve virtual key). Under
    ``x-api-key`` a client key goes in the header it came in: a Bearer token there is an
    OAuth token (Claude Code's subscription login), not an API key."""
    if route.api_key:
        if route.key_scheme is KeyScheme.X_API_KEY:
            return {"x-api-key": route.api_key}
        return {"authorization": f"Bearer {route.api_key}"}
    key = client_provider_key(identity, incoming)
    if not key:
        return {}
    if route.key_scheme is KeyScheme.X_API_KEY and incoming.get("authorization") is None:
        return {"x-api-key": key}
    return {"authorization": f"Bearer {key}"}


def relay_headers(upstream: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in upstream if k.lower() not in _DROP_RESPONSE}


_TAGS = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def error_body(status: int, headers: dict[str, str], body: bytes, fmt: WireFormat) -> bytes:
    """The provider's error body, unchanged when it is JSON. Anything else (a proxy's HTML
    page, plain text, nothing at all) becomes an error in ``fmt``'s shape (OpenAI's, or
    Anthropic's on the Messages routes: a client parses only its own) that says what came
    back; the status and the other headers (``retry-after``) stay. ``headers`` is updated."""
    try:
        orjson.loads(body)
        return body
    except orjson.JSONDecodeError:
        pass
    kind = "no content type"
    for name in [k for k in headers if k.lower() == "content-type"]:
        kind = headers.pop(name)
    text = _SPACE.sub(" ", _TAGS.sub(" ", body[:4096].decode("utf-8", "replace"))).strip()
    gist = text[:300] if text else "(empty)"
    headers["content-type"] = "application/json"
    page = UpstreamErrorPage(f"upstream answered {status} with a non-JSON body ({kind}): {gist}", status)
    return orjson.dumps(INGRESSES[fmt].error_body(page))


class OpenAICompatibleUpstream:
    """POSTs a body to the route's endpoint (``{api_base}/chat/completions``, ``/responses``,
    Anthropic's ``/v1/messages``) and hands back status, headers and bytes.

    The key is the route's configured one, else the caller's own provider key
    (passthrough); a Sieve virtual key never leaves the gateway."""

    def __init__(self, client: Http1Client, read_timeout_s: float, max_body_bytes: int = 32 * 1024 * 1024) -> None:
        self._client = client
        self._max_body_bytes = max_body_bytes
        self._read_timeout_s = read_timeout_s

    async def send(self, route: ResolvedRoute, call: ModelCall, body: dict[str, Any]) -> UpstreamResponse:
        headers = provider_headers(route, call.identity, call.headers)
        return await self._request("POST", route.url or "", orjson.dumps(body), headers, body.get("stream") is True,
                                   call.format)

    async def relay(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str],
                    fmt: WireFormat, read_timeout_s: float | None = None) -> UpstreamResponse:
        """Any request as it came (the pass-through routes: ``GET /v1/responses/{id}``,
        ``/v1/messages/count_tokens``; Sieve's own ``GET /models``), its answer relayed like a
        forwarded one's: streamed when the provider answers with an event stream.
        ``read_timeout_s``: a shorter wait than a forward's (None: the forward's)."""
        return await self._request(method, url, body, headers, None, fmt, read_timeout_s)

    async def _request(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str],
                       stream: bool | None, fmt: WireFormat, read_timeout_s: float | None = None) -> UpstreamResponse:
        """``stream``: whether the answer is an event stream; None: as its content type says.
        ``fmt``: the client's format, whose shape a non-JSON error body is given."""
        try:
            resp = await self._client.request(method, url, headers, body, read_timeout_s or self._read_timeout_s)
        except TimeoutError as exc:  # before OSError: a TimeoutError is one
            raise UpstreamTimeout(f"upstream did not answer in time: {redact_url(url)}") from exc
        except (OSError, ValueError) as exc:
            raise UpstreamUnavailable(f"cannot reach upstream {redact_url(url)}: {exc.__class__.__name__}") from exc
        headers_out = relay_headers(resp.headers)
        if stream is None:
            stream = resp.content_type == "text/event-stream"
        if not stream or resp.status >= 400:
            try:
                payload = await _read_bounded(resp, self._max_body_bytes)
            except TimeoutError as exc:
                raise UpstreamTimeout(f"upstream stopped answering: {redact_url(url)}") from exc
            except OSError as exc:
                raise UpstreamUnavailable(f"upstream connection broke: {exc.__class__.__name__}") from exc
            finally:
                resp.release()
            if resp.status >= 400:
                payload = error_body(resp.status, headers_out, payload, fmt)
            return UpstreamResponse(resp.status, headers_out, body=payload)
        return UpstreamResponse(resp.status, headers_out, chunks=_relay(resp, url), release=resp)


async def _read_bounded(resp: Http1Response, limit: int) -> bytes:
    """The whole body, or ``UpstreamTooLarge`` (the connection closed, not reused) once it is
    declared or counted past ``limit`` bytes."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise UpstreamTooLarge(f"the upstream's answer is {declared} bytes, over the limit of {limit} bytes "
                               "(SIEVE_MAX_UPSTREAM_BODY_BYTES); nothing was relayed", resp.status)
    parts, size = [], 0
    async for chunk in resp.chunks():
        size += len(chunk)
        if size > limit:
            resp.close()
            raise UpstreamTooLarge(f"the upstream's answer exceeds the limit of {limit} bytes "
                                   "(SIEVE_MAX_UPSTREAM_BODY_BYTES); nothing was relayed", resp.status)
        parts.append(chunk)
    return b"".join(parts)


async def _relay(resp: Http1Response, url: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.chunks():
            yield chunk
    except TimeoutError as exc:
        raise UpstreamTimeout(f"upstream stream stalled: {redact_url(url)}") from exc
    except OSError as exc:
        raise UpstreamUnavailable(f"upstream stream broke before it finished ({exc.__class__.__name__}): "
                                  "the answer is incomplete") from exc
    finally:
        resp.release()
