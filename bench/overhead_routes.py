"""The routes ``bench/overhead.py`` can load: one workload, three wire formats.

Each route names its path, the fake provider that answers it, how the chat payload is written in
its format (``tests/support/formats.py``: the same history, as a client of that format sends it),
how a stream ends, and the LiteLLM proxy model entry that serves it::

    route = ROUTES["messages"]
    body = route.payload(chat_body)           # an Anthropic Messages body of the same conversation
    route.upstream_argv(port, a)              # python -m tests.support.scripted_provider --port ...

``chat`` is served by ``tests.support.fake_upstream`` (Chat Completions); ``messages`` and ``responses`` by
``tests.support.scripted_provider`` (Anthropic Messages and OpenAI Responses, with their real event streams).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tests.support.formats import chat_to_messages, chat_to_responses

ANTHROPIC_MODEL = "claude-sonnet-4-5"


def _stream_chat(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def _stream_native(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True}


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    upstream_module: str  # the fake provider, run as ``python -m <module>``
    ready_path: str
    end_marker: bytes  # seen in a complete stream's last event
    convert: Callable[[Mapping[str, Any]], dict[str, Any]]
    streamed: Callable[[dict[str, Any]], dict[str, Any]]
    model: str | None = None  # the model this format's requests name (None: the chat payload's)

    def payload(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        body = self.convert(chat_body)
        return {**body, "model": self.model} if self.model else body

    def upstream_argv(self, port: int, a: argparse.Namespace) -> list[str]:
        return [sys.executable, "-m", self.upstream_module, "--port", str(port), "--latency-ms", str(a.latency_ms),
                "--chunks", str(a.chunks), "--chunk-delay-ms", str(a.chunk_delay_ms)]

    def sieve_env(self, upstream_port: int) -> dict[str, str]:
        """Sieve's upstreams: the OpenAI-compatible one (chat, responses) and Anthropic's (messages)."""
        return {"SIEVE_UPSTREAM_BASE_URL": f"http://127.0.0.1:{upstream_port}/v1",
                "SIEVE_ANTHROPIC_BASE_URL": f"http://127.0.0.1:{upstream_port}"}

    def litellm_model(self, chat_model: str, upstream_port: int) -> dict[str, Any]:
        """LiteLLM's model_list entry: Anthropic's API for messages (LiteLLM appends /v1/messages),
        an OpenAI-compatible one otherwise (it appends /chat/completions or /responses)."""
        if self.name == "messages":
            return {"model_name": ANTHROPIC_MODEL, "litellm_params": {
                "model": f"anthropic/{ANTHROPIC_MODEL}", "api_base": f"http://127.0.0.1:{upstream_port}",
                "api_key": "sk-ant-fake"}}
        return {"model_name": chat_model, "litellm_params": {
            "model": f"openai/{chat_model}", "api_base": f"http://127.0.0.1:{upstream_port}/v1", "api_key": "sk-fake"}}


ROUTES = {
    "chat": Route("chat", "/v1/chat/completions", "tests.support.fake_upstream", "/v1/models", b"[DONE]",
                  dict, _stream_chat),
    "messages": Route("messages", "/v1/messages", "tests.support.scripted_provider", "/healthz", b"message_stop",
                      chat_to_messages, _stream_native, model=ANTHROPIC_MODEL),
    "responses": Route("responses", "/v1/responses", "tests.support.scripted_provider", "/healthz",
                       b"response.completed", chat_to_responses, _stream_native),
}
