"""The fast path: byte-transparent forwarding to an OpenAI-compatible provider.

One shared ``aiohttp.ClientSession`` per process (created in the app's
lifespan). aiohttp rather than httpx: under load on this class of machine
httpx's AsyncClient saturated at a fraction of aiohttp's request rate (see
BENCHMARKS.md), and a gateway's forwarding client sits on every request.

Streams are relayed chunk by chunk as they arrive; nothing is buffered.
A whole answer is read up to ``max_body_bytes`` (``SIEVE_MAX_UPSTREAM_BODY_BYTES``):
the gateway holds it, parses it for usage and relays it, so a provider (or a
proxy in front of one) answering tens of megabytes would otherwise cost that
much memory per request, several times over. Past the limit the connection is
closed and the caller gets a 502 that says so.
A provider's error passes through with its status, headers and JSON body
unchanged; an error body that is not JSON (a load balancer's HTML page) is
put in OpenAI's error shape, so clients can always parse it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, AsyncIterator, Mapping

import aiohttp
import orjson

from gateway.errors import UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable
from gateway.upstream.base import ResolvedRoute, UpstreamResponse
from gateway.wire.call import ChatCall
from gateway.wire.keys import client_provider_key

# Request headers never forwarded: hop-by-hop, our own, and what aiohttp sets.
_DROP_REQUEST = frozenset((
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authorization", "proxy-connection", "accept-encoding", "cookie", "x-api-key",
))
# Response headers never relayed (the ASGI server sets its own framing).
_DROP_RESPONSE = frozenset((
    "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding", "date",
    "server", "set-cookie",
))


def forward_headers(incoming: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """Headers for the provider: the client's, minus hop-by-hop and x-sieve-*;
    the configured key replaces the client's Authorization when there is one.
    ``accept-encoding: identity``: bytes are relayed as they come (and read for
    usage), so the provider must not compress them (aiohttp would ask for gzip)."""
    out = {k: v for k, v in incoming.items()
           if k not in _DROP_REQUEST and not k.startswith("x-sieve-")}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    out["content-type"] = "application/json"
    out["accept-encoding"] = "identity"
    return out


def relay_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in upstream.items() if k.lower() not in _DROP_RESPONSE}


_TAGS = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def error_body(status: int, headers: dict[str, str], body: bytes) -> bytes:
    """The provider's error body, unchanged when it is JSON. Anything else (a proxy's HTML
    page, plain text, nothing at all) becomes an OpenAI-shaped error that says what came
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
    return orjson.dumps({"error": {
        "message": f"upstream answered {status} with a non-JSON body ({kind}): {gist}",
        "type": "upstream_error", "param": None, "code": "upstream_error_body"}})


class OpenAICompatibleUpstream:
    """POSTs a body to ``{api_base}/chat/completions`` and hands back status, headers and bytes.

    The key is the route's configured one, else the caller's own provider key
    (passthrough); a Sieve virtual key never leaves the gateway."""

    def __init__(self, session: aiohttp.ClientSession, read_timeout_s: float, connect_timeout_s: float,
                 max_body_bytes: int = 32 * 1024 * 1024) -> None:
        self._session = session
        self._max_body_bytes = max_body_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s,
                                              sock_read=read_timeout_s)

    async def send(self, route: ResolvedRoute, call: ChatCall, body: dict[str, Any]) -> UpstreamResponse:
        api_key = route.api_key or client_provider_key(call.identity, call.headers)
        headers = forward_headers(call.headers, api_key)
        if not api_key:
            headers.pop("authorization", None)
        return await self._post(route.url or "", orjson.dumps(body), headers, body.get("stream") is True)

    async def _post(self, url: str, body: bytes, headers: Mapping[str, str], stream: bool) -> UpstreamResponse:
        try:
            resp = await self._session.post(url, data=body, headers=headers, timeout=self._timeout)
        except asyncio.TimeoutError as exc:
            raise UpstreamTimeout(f"upstream did not answer in time: {url}") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"cannot reach upstream {url}: {exc.__class__.__name__}") from exc
        headers_out = relay_headers(resp.headers)
        if not stream or resp.status >= 400:
            try:
                payload = await _read_bounded(resp, self._max_body_bytes)
            except asyncio.TimeoutError as exc:
                raise UpstreamTimeout(f"upstream stopped answering: {url}") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamUnavailable(f"upstream connection broke: {exc.__class__.__name__}") from exc
            finally:
                resp.release()
            if resp.status >= 400:
                payload = error_body(resp.status, headers_out, payload)
            return UpstreamResponse(resp.status, headers_out, body=payload)
        return UpstreamResponse(resp.status, headers_out, chunks=_relay(resp, url), release=resp)


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or ``UpstreamTooLarge`` (the connection closed, not reused) once it is
    declared or counted past ``limit`` bytes; counted as decoded, as it would be held."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise UpstreamTooLarge(f"the upstream's answer is {declared} bytes, over the limit of {limit} bytes "
                               "(SIEVE_MAX_UPSTREAM_BODY_BYTES); nothing was relayed")
    parts, size = [], 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            resp.close()
            raise UpstreamTooLarge(f"the upstream's answer exceeds the limit of {limit} bytes "
                                   "(SIEVE_MAX_UPSTREAM_BODY_BYTES); nothing was relayed")
        parts.append(chunk)
    return b"".join(parts)


async def _relay(resp: aiohttp.ClientResponse, url: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except asyncio.TimeoutError as exc:
        raise UpstreamTimeout(f"upstream stream stalled: {url}") from exc
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"upstream stream broke before it finished ({exc.__class__.__name__}): "
                                  "the answer is incomplete") from exc
    finally:
        resp.release()
