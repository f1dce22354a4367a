"""The fast path: byte-transparent forwarding to an OpenAI-compatible provider.

One shared ``aiohttp.ClientSession`` per process (created in the app's
lifespan). aiohttp rather than httpx: under load on this class of machine
httpx's AsyncClient saturated at a fraction of aiohttp's request rate (see
BENCHMARKS.md), and a gateway's forwarding client sits on every request.

Streams are relayed chunk by chunk as they arrive; nothing is buffered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Mapping

import aiohttp

from gateway.errors import UpstreamTimeout, UpstreamUnavailable

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


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: dict[str, str]
    body: bytes | None = None                      # non-streaming
    chunks: AsyncIterator[bytes] | None = None     # streaming
    release: object = None                         # closes the upstream response


def forward_headers(incoming: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """Headers for the provider: the client's, minus hop-by-hop and x-sieve-*;
    the configured key replaces the client's Authorization when there is one."""
    out = {k: v for k, v in incoming.items()
           if k not in _DROP_REQUEST and not k.startswith("x-sieve-")}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    out["content-type"] = "application/json"
    return out


def relay_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in upstream.items() if k.lower() not in _DROP_RESPONSE}


class OpenAICompatibleUpstream:
    """POSTs a body to ``{api_base}/chat/completions`` and hands back status, headers and bytes."""

    def __init__(self, session: aiohttp.ClientSession, read_timeout_s: float, connect_timeout_s: float) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s,
                                              sock_read=read_timeout_s)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], stream: bool) -> UpstreamResponse:
        try:
            resp = await self._session.post(url, data=body, headers=headers, timeout=self._timeout)
        except asyncio.TimeoutError as exc:
            raise UpstreamTimeout(f"upstream did not answer in time: {url}") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"cannot reach upstream {url}: {exc.__class__.__name__}") from exc
        headers_out = relay_headers(resp.headers)
        if not stream or resp.status >= 400:
            try:
                payload = await resp.read()
            except asyncio.TimeoutError as exc:
                raise UpstreamTimeout(f"upstream stopped answering: {url}") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamUnavailable(f"upstream connection broke: {exc.__class__.__name__}") from exc
            finally:
                resp.release()
            return UpstreamResponse(resp.status, headers_out, body=payload)
        return UpstreamResponse(resp.status, headers_out, chunks=_relay(resp, url), release=resp)


async def _relay(resp: aiohttp.ClientResponse, url: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except asyncio.TimeoutError as exc:
        raise UpstreamTimeout(f"upstream stream stalled: {url}") from exc
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"upstream stream broke: {exc.__class__.__name__}") from exc
    finally:
        resp.release()
