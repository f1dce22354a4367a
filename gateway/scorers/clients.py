"""How a scoring call reaches the cheap model: one Protocol, two transports.

* ``OpenAICompatibleClient`` — an OpenAI-compatible ``api_base`` (vLLM, Ollama's
  /v1, OpenAI itself, a LiteLLM proxy, the test fake) over the gateway's shared
  aiohttp session: no litellm import (seconds), no per-call translation layer,
  pooled keep-alive connections. This is the path a policy gets when it names
  ``scorer_api_base``.
* ``LiteLLMClient`` — any other litellm model string (``claude-haiku-4-5``,
  ``bedrock/...``, ``ollama/qwen2.5:3b``) through ``litellm.acompletion``,
  imported on first use only.

Both raise ``ScorerCallError`` with a bounded ``reason`` (the label of
``sieve_scorer_failures_total``) and never anything else.

::

    client = OpenAICompatibleClient(session, "http://127.0.0.1:8000/v1", api_key=None)
    answer = await client.complete("qwen2.5-3b", messages, max_tokens=400, json_mode=True, timeout_s=1.0)
    answer.text, answer.prompt_tokens, answer.completion_tokens
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

REASON_TIMEOUT = "timeout"
REASON_HTTP = "http_error"
REASON_CONNECTION = "connection"
REASON_BAD_RESPONSE = "bad_response"


class ScorerCallError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int | None       # as the provider reported; None if it did not
    completion_tokens: int | None


class ScorerClient(Protocol):
    async def complete(self, model: str, messages: list[dict[str, Any]], *, max_tokens: int,
                       json_mode: bool, timeout_s: float) -> Completion: ...


class OpenAICompatibleClient:
    def __init__(self, session: aiohttp.ClientSession, api_base: str, api_key: str | None) -> None:
        self._session = session
        self._url = api_base.rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json", "accept-encoding": "identity"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"

    async def complete(self, model: str, messages: list[dict[str, Any]], *, max_tokens: int,
                       json_mode: bool, timeout_s: float) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0,
                                "max_tokens": max_tokens, "stream": False}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        try:
            async with asyncio.timeout(timeout_s):
                async with self._session.post(self._url, data=orjson.dumps(body), headers=self._headers) as resp:
                    raw = await resp.read()
                    status = resp.status
        except TimeoutError as exc:
            raise ScorerCallError(REASON_TIMEOUT, f"no answer within {timeout_s:.2f}s") from exc
        except aiohttp.ClientError as exc:
            raise ScorerCallError(REASON_CONNECTION, f"{exc.__class__.__name__}: {exc}") from exc
        if status >= 400:
            raise ScorerCallError(REASON_HTTP, f"status {status}: {raw[:200]!r}")
        try:
            payload = orjson.loads(raw)
            message = payload["choices"][0]["message"]
            text = message.get("content") or ""
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ScorerCallError(REASON_BAD_RESPONSE, f"not a chat completion: {raw[:200]!r}") from exc
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        return Completion(str(text), _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")))


class LiteLLMClient:
    """Any litellm model string. ``api_base``/``api_key`` are passed when given;
    otherwise litellm finds the provider's key itself."""

    def __init__(self, api_base: str | None = None, api_key: str | None = None) -> None:
        self._api_base = api_base
        self._api_key = api_key
        self._litellm: Any = None

    def _lib(self) -> Any:
        if self._litellm is None:
            from gateway.config import prepare_offline_environment  # noqa: PLC0415

            prepare_offline_environment()
            import litellm  # noqa: PLC0415 - seconds to import: only when a policy needs it

            self._litellm = litellm
        return self._litellm

    async def complete(self, model: str, messages: list[dict[str, Any]], *, max_tokens: int,
                       json_mode: bool, timeout_s: float) -> Completion:
        litellm = self._lib()
        params: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0,
                                  "max_tokens": max_tokens, "timeout": timeout_s, "drop_params": True,
                                  "num_retries": 0}
        if json_mode:
            params["response_format"] = {"type": "json_object"}
        if self._api_base:
            params["api_base"] = self._api_base
        if self._api_key:
            params["api_key"] = self._api_key
        try:
            async with asyncio.timeout(timeout_s):
                result = await litellm.acompletion(**params)
        except TimeoutError as exc:
            raise ScorerCallError(REASON_TIMEOUT, f"no answer within {timeout_s:.2f}s") from exc
        except Exception as exc:  # noqa: BLE001 - litellm's own exception tree, mapped by status
            status = getattr(exc, "status_code", None)
            if isinstance(exc, litellm.Timeout):
                raise ScorerCallError(REASON_TIMEOUT, str(exc)[:200]) from exc
            reason = REASON_HTTP if isinstance(status, int) and status >= 400 else REASON_CONNECTION
            raise ScorerCallError(reason, f"{exc.__class__.__name__}: {str(exc)[:200]}") from exc
        try:
            text = result.choices[0].message.content or ""
        except (AttributeError, IndexError) as exc:
            raise ScorerCallError(REASON_BAD_RESPONSE, "not a chat completion") from exc
        usage = getattr(result, "usage", None)
        return Completion(str(text), _int(getattr(usage, "prompt_tokens", None)),
                          _int(getattr(usage, "completion_tokens", None)))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
