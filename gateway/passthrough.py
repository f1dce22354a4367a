"""The routes Sieve relays as they came: nothing to prune, no answer to budget.

``POST /v1/messages/count_tokens``, ``POST /v1/responses/compact``,
``/v1/responses/input_tokens``, ``GET``/``DELETE /v1/responses/{id}``,
``POST /v1/responses/{id}/cancel`` and ``GET /v1/responses/{id}/input_items``
belong to the formats Sieve serves, so a client pointed at Sieve must reach
them; they go to the format's upstream (the model's, when the body names one,
else the format's default), with the same key rules as a forwarded request,
and their answers (an event stream included) come back unchanged, with
``x-sieve-request-id``::

    relay = PassThrough(router, fast_path)
    reply = await relay.forward(PassThroughCall(request_id, identity, "GET", WireFormat.RESPONSES,
                                                "/resp_123", "", headers, None))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Mapping

import orjson

from gateway.errors import SieveError
from gateway.proxy import Reply
from gateway.upstream.base import UpstreamResponse
from gateway.upstream.openai_compat import OpenAICompatibleUpstream, provider_headers
from gateway.upstream.router import ModelRouter
from gateway.wire.call import Identity
from gateway.wire.formats import WireFormat
from gateway.wire.ingress import INGRESSES

log = logging.getLogger("sieve.passthrough")


@dataclass(frozen=True, slots=True)
class PassThroughCall:
    request_id: str
    identity: Identity
    method: str
    format: WireFormat
    suffix: str                       # below the format's endpoint: "/count_tokens", "/{id}/input_items"
    query: str                        # the query string, as sent
    headers: Mapping[str, str]
    body: dict[str, Any] | None       # a POST's JSON body (it may name the model)


class PassThrough:
    def __init__(self, router: ModelRouter, http: OpenAICompatibleUpstream) -> None:
        self._router = router
        self._http = http

    async def forward(self, call: PassThroughCall) -> Reply:
        model = call.body.get("model") if call.body is not None else None
        route = self._router.resolve(model, call.format) if isinstance(model, str) and model \
            else self._router.default_route(call.format)
        body = call.body
        if body is not None and route.upstream_model:
            body = {**body, "model": route.upstream_model}
        url = (route.url or "") + call.suffix + (f"?{call.query}" if call.query else "")
        headers = provider_headers(route, call.identity, call.headers)
        try:
            response = await self._http.relay(call.method, url, orjson.dumps(body) if body is not None else None,
                                              headers, call.format)
        except SieveError as exc:
            exc.headers["x-sieve-request-id"] = call.request_id
            raise
        out = {**response.headers, "x-sieve-request-id": call.request_id}
        if response.chunks is None:
            return Reply(response.status, out, body=response.body or b"")
        return Reply(response.status, out, stream=_relay(response, call.format), on_close=lambda: None)


async def _relay(response: UpstreamResponse, fmt: WireFormat) -> AsyncGenerator[bytes, None]:
    """The provider's events as they come; a stream that breaks ends with the format's error event."""
    tap = INGRESSES[fmt].tap()
    try:
        assert response.chunks is not None
        async for chunk in response.chunks:
            out = tap.feed(chunk)
            if out:
                yield out
        tail = tap.flush()
        if tail:
            yield tail
    except SieveError as exc:
        log.warning("a relayed stream broke: %s", exc.message)
        yield tap.error_event(exc)
    finally:
        if response.release is not None:
            response.release.release()
