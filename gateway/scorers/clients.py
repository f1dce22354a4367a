"""How a scoring call reaches the cheap model: a chat-completion request through the
same seam as a forward, ``Upstream.send(route, call, body) -> UpstreamResponse``.

* a policy that names ``scorer_api_base`` (vLLM, Ollama's /v1, OpenAI itself, a
  LiteLLM proxy, the test fake) goes by the forward's fast path
  (``OpenAICompatibleUpstream``: its pooled HTTP/1.1 client, its body limit,
  credentials in the URL), to ``{scorer_api_base}/chat/completions``;
* any other litellm model string (``claude-haiku-4-5``, ``bedrock/...``,
  ``ollama/qwen2.5:3b``) goes by ``LiteLLMUpstream``, which imports litellm on first use.

The call is a :class:`gateway.wire.ModelCall` of Sieve's own (no client, so no
client key goes along: the scorer's key is ``SIEVE_SCORER_API_KEY``'s). What
comes back is read as a chat completion; anything else raises ``ScorerCallError``
with a bounded ``reason`` (the label of ``sieve_scorer_failures_total``), never
another exception.

::

    client = ScorerClient(upstreams[RouteKind.OPENAI], RouteKind.OPENAI, "http://127.0.0.1:8000/v1", api_key=None)
    answer = await client.complete("qwen2.5-3b", messages, max_tokens=400, json_mode=True, timeout_s=1.0)
    answer.text, answer.prompt_tokens, answer.completion_tokens
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config import ModelRoute, RouteKind
from gateway.errors import SieveError, UpstreamTimeout
from gateway.pruning import Policy
from gateway.upstream import ResolvedRoute, Upstream, UpstreamResponse
from gateway.wire import ANONYMOUS, ModelCall, SieveHeaders

REASON_TIMEOUT = "timeout"
REASON_HTTP = "http_error"
REASON_CONNECTION = "connection"
REASON_BAD_RESPONSE = "bad_response"
SCORING_REQUEST_ID = "scorer"  # the call is Sieve's own, made for a request that has its own id
_POLICY = Policy()


class ScorerCallError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int | None       # as the provider reported; None if it did not
    completion_tokens: int | None


class ScorerClient:
    """A scoring model behind one transport: ``kind`` says which (the router's
    :class:`gateway.config.RouteKind`); ``api_base`` and ``api_key`` are the scorer's."""

    def __init__(self, upstream: Upstream, kind: RouteKind, api_base: str | None, api_key: str | None) -> None:
        self._upstream = upstream
        self.kind = kind
        self._api_base = api_base
        self._api_key = api_key
        self._url = api_base.rstrip("/") + "/chat/completions" if kind is RouteKind.OPENAI and api_base else None

    def route(self, model: str) -> ResolvedRoute:
        """Where a call for ``model`` goes, as the router would resolve a configured model."""
        litellm_model = model if self.kind is RouteKind.LITELLM else None
        configured = ModelRoute(name=model, kind=self.kind, api_base=self._api_base, api_key=self._api_key,
                                litellm_model=litellm_model)
        return ResolvedRoute(model=model, kind=self.kind, url=self._url, api_key=self._api_key,
                             upstream_model=None, route=configured)

    async def complete(self, model: str, messages: list[dict[str, Any]], *, max_tokens: int,
                       json_mode: bool, timeout_s: float) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0,
                                "max_tokens": max_tokens, "stream": False}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        call = ModelCall(request_id=SCORING_REQUEST_ID, body=body, body_bytes=0, identity=ANONYMOUS,
                         policy=_POLICY, sieve=SieveHeaders(), headers={})
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._upstream.send(self.route(model), call, body)
        except (TimeoutError, UpstreamTimeout) as exc:
            raise ScorerCallError(REASON_TIMEOUT, f"no answer within {timeout_s:.2f}s") from exc
        except SieveError as exc:  # unreachable, a broken connection, an answer over the body limit
            raise ScorerCallError(REASON_CONNECTION, f"{exc.__class__.__name__}: {exc}") from exc
        return _completion(response)


def _completion(response: UpstreamResponse) -> Completion:
    if response.chunks is not None:  # an event stream is no whole answer: its connection is not reused
        if response.release is not None:
            response.release.close()
        raise ScorerCallError(REASON_BAD_RESPONSE, "an event stream, not a chat completion")
    raw = response.body or b""
    if response.status >= 400:
        raise ScorerCallError(REASON_HTTP, f"status {response.status}: {raw[:200]!r}")
    try:
        payload = orjson.loads(raw)
        message = payload["choices"][0]["message"]
        text = message.get("content") or ""
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ScorerCallError(REASON_BAD_RESPONSE, f"not a chat completion: {raw[:200]!r}") from exc
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    return Completion(str(text), _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
