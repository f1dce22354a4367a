"""Providers that do not speak OpenAI's protocol (Anthropic, Bedrock, Vertex, ...),
through ``litellm.acompletion``; the answer is re-encoded as OpenAI JSON / SSE.

litellm is imported on first use only: it costs seconds at import time, and a
gateway that routes everything through the fast path never pays it.

litellm reads the provider's answer itself, whole, so ``SIEVE_MAX_UPSTREAM_BODY_BYTES``
cannot stop that read; it bounds what this route re-encodes and relays (a larger
answer is a 502, as on the fast path).
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import orjson

from gateway.errors import UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable
from gateway.telemetry import scrub
from gateway.upstream.base import ResolvedRoute, UpstreamResponse
from gateway.wire import ModelCall, client_provider_key

_JSON = {"content-type": "application/json"}
_SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


class LiteLLMUpstream:
    def __init__(self, timeout_s: float, max_body_bytes: int = 32 * 1024 * 1024) -> None:
        self._timeout_s = timeout_s
        self._max_body_bytes = max_body_bytes
        self._litellm: Any = None

    def _lib(self) -> Any:
        if self._litellm is None:
            import litellm  # noqa: PLC0415 - deliberate lazy import

            litellm.drop_params = True
            self._litellm = litellm
        return self._litellm

    async def send(self, route: ResolvedRoute, call: ModelCall, body: dict[str, Any]) -> UpstreamResponse:
        litellm = self._lib()
        model = route.route
        params = {k: v for k, v in body.items() if k not in ("model",)}
        params["model"] = model.litellm_model or model.name
        params["timeout"] = self._timeout_s
        # The client decides whether to retry: a retry here would be billed twice and
        # answer a budget reservation made for one call.
        params["max_retries"] = 0
        if model.api_base:
            params["api_base"] = model.api_base
        key = model.api_key or client_provider_key(call.identity, call.headers)
        if key:
            params["api_key"] = key
        try:
            result = await litellm.acompletion(**params)
        except Exception as exc:  # litellm raises its own tree; map by status
            return _error_response(exc, key)
        if body.get("stream") is not True:
            answer = orjson.dumps(result.model_dump())
            if len(answer) > self._max_body_bytes:
                raise UpstreamTooLarge(f"the provider's answer is {len(answer)} bytes, over the limit of "
                                       f"{self._max_body_bytes} bytes (SIEVE_MAX_UPSTREAM_BODY_BYTES); "
                                       "nothing was relayed")
            return UpstreamResponse(200, dict(_JSON), body=answer)
        return UpstreamResponse(200, dict(_SSE), chunks=_sse(result))


async def _sse(stream: Any) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            yield b"data: " + orjson.dumps(chunk.model_dump()) + b"\n\n"
    except Exception as exc:  # noqa: BLE001 - a provider error mid-stream ends the stream
        raise UpstreamUnavailable(f"provider stream failed: {exc.__class__.__name__}") from exc
    yield b"data: [DONE]\n\n"


def _error_response(exc: Exception, key: str | None) -> UpstreamResponse:
    """The provider's error as OpenAI JSON; its text loses any key it quotes (SDK errors
    often echo the key they were given)."""
    status = getattr(exc, "status_code", None)
    name = exc.__class__.__name__
    secrets = [key] if key else []
    if "Timeout" in name:
        raise UpstreamTimeout(f"provider timed out ({name})") from exc
    if not isinstance(status, int) or status < 400:
        raise UpstreamUnavailable(f"provider call failed: {name}: {scrub(str(exc)[:300], secrets)}") from exc
    body = {"error": {"message": scrub(str(getattr(exc, "message", exc))[:2000], secrets), "type": name,
                      "param": None, "code": status}}
    return UpstreamResponse(status, dict(_JSON), body=orjson.dumps(body))
