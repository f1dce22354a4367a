"""The most one request can be billed, in tokens: what a budget reserves before forwarding it.

A pure function of the body as forwarded (no I/O): settling charges what the
provider reports, so a reservation below what the provider can bill lets
concurrent requests spend past the budget. Everything billed is counted:

* **input**: every message (its text, the JSON of its other fields: name, tool
  calls and their ids; images by ``gateway.billing.image_tokens``; audio and file parts
  as the tokens of their JSON), the system prompt (a message, or ``system`` /
  ``instructions``), tool and function schemas, ``response_format`` /
  ``text.format`` schemas, ``tool_choice``;
* **output**: ``n`` x the output cap (``max_completion_tokens`` / ``max_tokens`` /
  ``max_output_tokens``), or ``n`` x ``default_output_tokens`` (the model's own
  output limit, see ``BudgetGuard``) when the body sets none; predicted outputs
  (``prediction``) on top, as rejected prediction tokens are billed as output.

::

    estimate = estimate_reservation(WireFormat.CHAT, body, counter.count_text, default_output_tokens=16_384)
    estimate.tokens            # input_tokens + output_tokens

Text is counted with OpenAI's encodings under the target rule (the larger of
o200k_base and cl100k_base, ``gateway.pruning.tokens``), a margin above what
OpenAI bills for text. Schemas are counted as compact JSON, more tokens than
the TypeScript-like form OpenAI renders them in (names and types without
quotes and braces), plus a fixed overhead per tool for that rendering's frame.
Claude's tokenizer is not public: Anthropic Messages text counts x
``CLAUDE_TEXT_MARGIN``, and a request with tools adds Anthropic's tool-use
system prompt. Other providers' tokenizers may count more than these: for them
the estimate is a margin, not a promise.

What the body does not show cannot be counted, so it is reserved at a floor (the
policy's ``reference_floor_tokens``) each: a file or document referenced by id or URL
(Chat ``file`` parts with a ``file_id``, Responses ``input_file`` with a ``file_id`` or
``file_url``, Messages ``document`` blocks whose source is a URL or a file, a stored
prompt), and a built-in tool the provider runs (Responses tools other than
functions, Anthropic's server tools and MCP servers, Chat's ``web_search_options``).
A continuation's stored history (``previous_response_id``, ``conversation``) is
added by the caller, from the sizes Sieve learned relaying those responses
(``gateway.exchange.stored_responses``). Every request is charged its real usage at settle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson

from gateway.billing.budgets import MAX_TOKENS
from gateway.errors import InvalidRequest
from gateway.billing.image_tokens import data_url_size, image_tokens
from gateway.wire import WireFormat

__all__ = ["OUTPUT_CAPS", "ReservationEstimate", "estimate_reservation", "output_cap"]

CountText = Callable[[str], int]

# OpenAI's chat format: about 3 tokens frame each message, 1 its role, 3 prime the reply.
PER_MESSAGE_TOKENS = 4
REPLY_PRIMING_TOKENS = 3
# The frame of the tool rendering: "namespace functions {", "type name = (_: {", "}) => any;".
PER_TOOL_TOKENS = 16
TOOLS_FRAME_TOKENS = 32
# Anthropic's tool-use system prompt, added to requests with tools (its docs: 313-346 on
# current models; rounded up).
CLAUDE_TOOLS_SYSTEM_TOKENS = 400
CLAUDE_TEXT_MARGIN = 1.35
# The fields that cap a format's output, the one Sieve would set itself last.
OUTPUT_CAPS = {WireFormat.CHAT: ("max_completion_tokens", "max_tokens"), WireFormat.RESPONSES: ("max_output_tokens",),
               WireFormat.MESSAGES: ("max_tokens",)}


@dataclass(frozen=True, slots=True)
class ReservationEstimate:
    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        """What to reserve (bounded: a figure past ``MAX_TOKENS`` exceeds every budget anyway)."""
        return min(self.input_tokens + self.output_tokens, MAX_TOKENS)


def estimate_reservation(fmt: WireFormat, body: Mapping[str, Any], count_text: CountText,
                         default_output_tokens: int, reference_floor: int = 0) -> ReservationEstimate:
    """The most ``body`` (as forwarded, in format ``fmt``) can be billed, each reference to content
    the body does not hold counted as ``reference_floor``; ``InvalidRequest`` for an output cap or
    ``n`` that is not a positive integer (the provider would refuse it too)."""
    counter = _Counter(count_text, str(body.get("model") or ""), floor=reference_floor)
    return _ESTIMATORS[fmt](body, counter, default_output_tokens)


def output_cap(body: Mapping[str, Any], fields: tuple[str, ...], default: int) -> int:
    """The first of ``fields`` the body sets (JSON's 100.0 is the integer 100), else ``default``."""
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequest(f"'{name}' must be a non-negative integer, got {value!r}", param=name)
        return value
    return default


class _Counter:
    """Counts the pieces of one body: text, JSON of structured fields, images."""

    def __init__(self, count_text: CountText, model: str, margin: float = 1.0, floor: int = 0) -> None:
        self._count = count_text
        self.model = model
        self.margin = margin
        self.floor = floor  # a file, document or tool result the body only names

    def referenced(self, part: Any) -> int:
        """A part that names content the provider adds (by id or URL): its JSON and the floor."""
        return self.json(part) + self.floor

    def text(self, text: Any) -> int:
        if not isinstance(text, str) or not text:
            return 0
        n = self._count(text)
        return n if self.margin == 1.0 else math.ceil(n * self.margin)

    def json(self, value: Any) -> int:
        if value is None:
            return 0
        try:
            return self.text(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode())
        except TypeError:
            return self.text(str(value))

    def image(self, url: Any, detail: Any) -> int:
        size = data_url_size(url) if isinstance(url, str) else None
        return image_tokens(self.model, detail if isinstance(detail, str) else None, size)

    def schemas(self, tools: Any) -> int:
        """Tool or function schemas: their JSON, plus the rendering's frame."""
        if not isinstance(tools, list) or not tools:
            return self.json(tools) if tools else 0
        return TOOLS_FRAME_TOKENS + sum(self.json(t) + PER_TOOL_TOKENS for t in tools)


# -- OpenAI Chat Completions ------------------------------------------------------------------

def _chat(body: Mapping[str, Any], count: _Counter, default_output: int) -> ReservationEstimate:
    messages = body.get("messages")
    prompt = REPLY_PRIMING_TOKENS
    for message in messages if isinstance(messages, list) else ():
        prompt += _chat_message(message, count)
    prompt += count.schemas(body.get("tools")) + count.schemas(body.get("functions"))
    prompt += count.json(body.get("response_format")) + count.json(body.get("tool_choice"))
    prompt += count.json(body.get("function_call"))
    prompt += count.referenced(body["web_search_options"]) if body.get("web_search_options") is not None else 0
    output = _choices(body) * output_cap(body, OUTPUT_CAPS[WireFormat.CHAT], default_output)
    return ReservationEstimate(prompt, output + count.json(body.get("prediction")))


def _chat_message(message: Any, count: _Counter) -> int:
    if not isinstance(message, dict):
        return count.json(message)
    tokens = PER_MESSAGE_TOKENS + _chat_content(message.get("content"), count)
    rest = {k: v for k, v in message.items() if k not in ("role", "content")}
    return tokens + (count.json(rest) if rest else 0)


def _chat_content(content: Any, count: _Counter) -> int:
    if isinstance(content, str):
        return count.text(content)
    if not isinstance(content, list):
        return count.json(content)
    tokens = 0
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            image = image if isinstance(image, dict) else {"url": image}
            tokens += count.image(image.get("url"), image.get("detail"))
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and len(part) <= 2:
            tokens += count.text(part["text"])  # {"type": "text", "text": ...}
        elif isinstance(part, dict) and part.get("type") == "file" and _names_file(part.get("file")):
            tokens += count.referenced(part)
        else:
            tokens += count.json(part)  # audio, inline files, refusals, anything new: their JSON
    return tokens


def _choices(body: Mapping[str, Any]) -> int:
    n = body.get("n")
    if n is None:
        return 1
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidRequest(f"'n' must be a positive integer, got {n!r}", param="n")
    return n


# -- OpenAI Responses -------------------------------------------------------------------------

def _responses(body: Mapping[str, Any], count: _Counter, default_output: int) -> ReservationEstimate:
    prompt = REPLY_PRIMING_TOKENS + count.text(body.get("instructions"))
    items = body.get("input")
    if isinstance(items, str):
        prompt += PER_MESSAGE_TOKENS + count.text(items)
    elif isinstance(items, list):
        prompt += sum(_responses_item(item, count) for item in items)
    prompt += count.schemas(body.get("tools")) + count.json(body.get("tool_choice"))
    prompt += count.floor * sum(1 for tool in _listed(body.get("tools")) if _responses_builtin(tool))
    prompt += count.referenced(body["prompt"]) if isinstance(body.get("prompt"), dict) else 0  # a stored prompt
    text = body.get("text")
    prompt += count.json(text.get("format")) if isinstance(text, dict) else 0
    output = output_cap(body, OUTPUT_CAPS[WireFormat.RESPONSES], default_output)
    return ReservationEstimate(prompt, output)


def _responses_item(item: Any, count: _Counter) -> int:
    if not isinstance(item, dict):
        return count.json(item)
    content = item.get("content")
    if not isinstance(content, (list, str)):
        return PER_MESSAGE_TOKENS + count.json(item)  # function calls, their outputs, reasoning
    tokens = PER_MESSAGE_TOKENS + (count.text(content) if isinstance(content, str) else 0)
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "input_image":
            tokens += count.image(part.get("image_url"), part.get("detail"))
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and len(part) <= 2:
            tokens += count.text(part["text"])
        elif isinstance(part, dict) and part.get("type") == "input_file" and _names_file(part):
            tokens += count.referenced(part)
        else:
            tokens += count.json(part)
    rest = {k: v for k, v in item.items() if k not in ("role", "content", "type")}
    return tokens + (count.json(rest) if rest else 0)


# -- Anthropic Messages -----------------------------------------------------------------------

def _messages(body: Mapping[str, Any], count: _Counter, default_output: int) -> ReservationEstimate:
    claude = _Counter(count._count, count.model, CLAUDE_TEXT_MARGIN, count.floor)
    system = body.get("system")
    prompt = REPLY_PRIMING_TOKENS + (claude.text(system) if isinstance(system, str) else
                                     _anthropic_blocks(system, claude))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else message
        prompt += PER_MESSAGE_TOKENS + (claude.text(content) if isinstance(content, str) else
                                        _anthropic_blocks(content, claude))
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        prompt += CLAUDE_TOOLS_SYSTEM_TOKENS + claude.schemas(tools)
        prompt += claude.floor * sum(1 for tool in tools if _anthropic_server_tool(tool))
    prompt += claude.json(body.get("tool_choice"))
    prompt += sum(claude.referenced(server) for server in _listed(body.get("mcp_servers")))
    return ReservationEstimate(prompt, output_cap(body, OUTPUT_CAPS[WireFormat.MESSAGES], default_output))


def _anthropic_blocks(blocks: Any, count: _Counter) -> int:
    if not isinstance(blocks, list):
        return count.json(blocks)
    tokens = 0
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "image":
            source = block.get("source")
            source = source if isinstance(source, dict) else {}
            url = source.get("url") if source.get("type") == "url" else \
                f"data:{source.get('media_type')};base64,{str(source.get('data') or '')[:65536]}"
            tokens += count.image(url, None)
        elif isinstance(block, dict) and isinstance(block.get("text"), str) and \
                set(block) <= {"type", "text", "cache_control"}:
            tokens += count.text(block["text"])
        elif isinstance(block, dict) and block.get("type") in ("document", "container_upload") and \
                _anthropic_reference(block):
            tokens += count.referenced(block)
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            rest = {k: v for k, v in block.items() if k != "content"}
            tokens += count.json(rest) + (count.text(content) if isinstance(content, str) else
                                          _anthropic_blocks(content, count))
        else:
            tokens += count.json(block)  # tool_use, documents, thinking: their JSON
    return tokens


# -- what only names content -------------------------------------------------------------------

# Responses tools that are the client's own (it runs them and sends their output back, counted then).
_CLIENT_TOOL_TYPES = ("function", "custom")
# Anthropic's tools that the provider runs, adding what they fetch or compute to the prompt.
_ANTHROPIC_SERVER_TOOLS = ("web_search", "web_fetch", "code_execution")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _names_file(part: Any) -> bool:
    """A Chat ``file`` or a Responses ``input_file`` that names its file (id, URL) instead of holding it."""
    return isinstance(part, dict) and not part.get("file_data") and bool(part.get("file_id") or part.get("file_url"))


def _responses_builtin(tool: Any) -> bool:
    kind = tool.get("type") if isinstance(tool, dict) else None
    return isinstance(kind, str) and kind not in _CLIENT_TOOL_TYPES


def _anthropic_server_tool(tool: Any) -> bool:
    kind = tool.get("type") if isinstance(tool, dict) else None
    return isinstance(kind, str) and kind.startswith(_ANTHROPIC_SERVER_TOOLS)


def _anthropic_reference(block: dict[str, Any]) -> bool:
    """A document (or container upload) whose content the provider fetches: by URL or file id."""
    source = block.get("source")
    if block.get("type") == "container_upload":
        return True
    return isinstance(source, dict) and source.get("type") in ("url", "file")


_ESTIMATORS: dict[WireFormat, Callable[[Mapping[str, Any], _Counter, int], ReservationEstimate]] = {
    WireFormat.CHAT: _chat,
    WireFormat.RESPONSES: _responses,
    WireFormat.MESSAGES: _messages,
}
