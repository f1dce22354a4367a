"""How a wire format comes in and goes out: one description per format, one proxy for all.

The proxy (:mod:`gateway.exchange.forward`) runs one sequence for every format: read the
body into the chat-shaped view the pruner knows, prune, write the decision back
in the format, reserve, forward, relay, account. What differs between formats
is data, described here::

    ingress = INGRESSES[WireFormat.MESSAGES]
    view = ingress.read(body, limits)           # ChatView, or InvalidRequest naming the field
    ingress.adapter.write(body, view, result)   # the pruned body, in the format
    ingress.tap()                               # the stream's usage tap (event_taps)
    ingress.error_body(exc)                     # Sieve's error in the format's shape
    ingress.unpruned_reason(body)               # why this body is forwarded as it came, if it is

The upstream endpoint of a format is the router's business
(:meth:`gateway.upstream.router.ModelRouter.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson

from gateway.errors import SieveError
from gateway.wire.chat import WireLimits
from gateway.wire.error_shapes import anthropic_error_body, openai_error_body
from gateway.wire.event_taps import AnthropicEventTap, ResponsesEventTap
from gateway.wire.formats import ChatView, FormatAdapter, WireFormat, adapter_for
from gateway.wire.sse import SSEUsageTap

PREVIOUS_RESPONSE = "previous_response_id: the history is kept at the provider"
CONVERSATION = "conversation: the history is kept at the provider"


@dataclass(frozen=True, slots=True)
class Ingress:
    """One wire format's part of the request path (module docstring)."""

    format: WireFormat
    tap: Callable[..., SSEUsageTap]
    error_body: Callable[[SieveError], dict[str, Any]]
    answer_chars: Callable[[Mapping[str, Any]], int]
    unpruned_reason: Callable[[Mapping[str, Any]], str | None] = lambda body: None
    asks_usage: bool = False  # a stream's usage must be asked for (Chat Completions' include_usage)

    @property
    def adapter(self) -> FormatAdapter:
        return adapter_for(self.format)

    def read(self, body: dict[str, Any], limits: WireLimits) -> ChatView:
        """The checked body's chat-shaped view (the adapter checks the body, within ``limits``)."""
        return self.adapter.read(body, limits)


def chat_answer_chars(payload: Mapping[str, Any]) -> int:
    """Characters of a chat completion's answer: contents, tool-call names and arguments."""
    chars = 0
    for choice in payload.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("content"), str):
            chars += len(message["content"])
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                chars += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    return chars


def messages_answer_chars(payload: Mapping[str, Any]) -> int:
    """Characters of an Anthropic message: text, thinking, tool names and inputs."""
    chars = 0
    for block in payload.get("content") or ():
        if not isinstance(block, dict):
            continue
        for name in ("text", "thinking", "name"):
            chars += len(block[name]) if isinstance(block.get(name), str) else 0
        if block.get("input") is not None:
            chars += len(orjson.dumps(block["input"]))
    return chars


def responses_answer_chars(payload: Mapping[str, Any]) -> int:
    """Characters of a Responses answer: output text, reasoning summaries, call names and arguments."""
    chars = 0
    for item in payload.get("output") or ():
        if not isinstance(item, dict):
            continue
        for name in ("name", "arguments", "input"):
            chars += len(item[name]) if isinstance(item.get(name), str) else 0
        for part in _listed(item.get("content")) + _listed(item.get("summary")):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                chars += len(part["text"])
    return chars


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def responses_unpruned_reason(body: Mapping[str, Any]) -> str | None:
    """A request continuing a response the provider stored sends only the new items: its
    history is at the provider, out of Sieve's reach, and pruning the new items alone
    would drop what the model was asked to answer."""
    if body.get("previous_response_id"):
        return PREVIOUS_RESPONSE
    if body.get("conversation"):
        return CONVERSATION
    return None


INGRESSES = {
    WireFormat.CHAT: Ingress(WireFormat.CHAT, SSEUsageTap, openai_error_body, chat_answer_chars,
                             asks_usage=True),
    WireFormat.MESSAGES: Ingress(WireFormat.MESSAGES, AnthropicEventTap, anthropic_error_body,
                                 messages_answer_chars),
    WireFormat.RESPONSES: Ingress(WireFormat.RESPONSES, ResponsesEventTap, openai_error_body,
                                  responses_answer_chars, responses_unpruned_reason),
}
