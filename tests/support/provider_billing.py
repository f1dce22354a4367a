"""Usage as OpenAI bills a chat completion, worked out independently of Sieve's estimate.

The fake upstream reports this (``FakeUpstream(usage_for=openai_usage)``) so the
budget tests hold the reservation against what a provider would charge, not
against Sieve's own arithmetic:

* text in o200k_base (gpt-4o's encoding); 3 tokens per message, 1 for its role,
  1 more and the name's tokens for a ``name``; 3 priming the reply;
* tools rendered as OpenAI renders them for the model, a TypeScript namespace
  (``namespace functions { // description\\n type name = (_: { ... }) => any; }``);
* ``response_format`` json schemas likewise as their JSON;
* images by the gpt-4o tile rule (85 + 170 per 512 px tile, after fitting in
  2048 x 2048 and scaling the short side down to 768), their size read from a
  PNG data URL or, for an http URL, from its ``w`` and ``h`` query parameters
  (the "download"); ``detail: low`` is 85;
* completion: the worst case, every one of ``n`` choices running to ``max_tokens``.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any, Mapping
from urllib.parse import parse_qs, urlparse

import orjson

from gateway.pruning.tokens import default_engine, text_counter

_count = text_counter("o200k_base", default_engine())


def png_data_url(width: int, height: int) -> str:
    """A PNG's signature and IHDR chunk (all a reader needs for its size) as a data URL."""
    ihdr = struct.pack(">II", width, height) + bytes([8, 2, 0, 0, 0])
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\x00\x00\x00\x00"
    return "data:image/png;base64," + base64.b64encode(png).decode()


def openai_usage(body: Mapping[str, Any]) -> dict[str, int]:
    prompt = 3 + sum(_message(m) for m in body.get("messages") or ())
    prompt += _tools(body.get("tools") or [])
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        prompt += 8 + _count(orjson.dumps(response_format["json_schema"]).decode())
    cap = next((body[f] for f in ("max_completion_tokens", "max_tokens") if body.get(f) is not None), 16_384)
    completion = int(body.get("n") or 1) * int(cap)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _message(message: Mapping[str, Any]) -> int:
    tokens = 4
    if message.get("name"):
        tokens += 1 + _count(message["name"])
    content = message.get("content")
    if isinstance(content, str):
        return tokens + _count(content)
    for part in content or ():
        if part.get("type") == "text":
            tokens += _count(part["text"])
        elif part.get("type") == "image_url":
            tokens += _image(part["image_url"])
    for call in message.get("tool_calls") or ():
        tokens += _count(call["function"]["name"]) + _count(call["function"]["arguments"]) + 3
    return tokens


def _image(image: Mapping[str, Any]) -> int:
    if image.get("detail") == "low":
        return 85
    url = image["url"]
    if url.startswith("data:"):
        raw = base64.b64decode(url.split(",", 1)[1])
        width, height = struct.unpack(">II", raw[16:24])
    else:
        query = parse_qs(urlparse(url).query)
        width, height = int(query["w"][0]), int(query["h"][0])
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def _tools(tools: list[Mapping[str, Any]]) -> int:
    if not tools:
        return 0
    lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        function = tool["function"]
        if function.get("description"):
            lines += [f"// {line}" for line in function["description"].splitlines()]
        lines.append(f"type {function['name']} = (_: {{")
        parameters = function.get("parameters") or {}
        required = set(parameters.get("required") or ())
        for name, schema in (parameters.get("properties") or {}).items():
            if schema.get("description"):
                lines += [f"// {line}" for line in schema["description"].splitlines()]
            optional = "" if name in required else "?"
            lines.append(f"{name}{optional}: {_ts_type(schema)},")
        lines += ["}) => any;", ""]
    lines.append("} // namespace functions")
    return _count("\n".join(lines))


def _ts_type(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(orjson.dumps(v).decode() for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return _ts_type(schema.get("items") or {}) + "[]"
    if kind == "object":
        fields = ", ".join(f"{k}: {_ts_type(v)}" for k, v in (schema.get("properties") or {}).items())
        return "{ " + fields + " }"
    return {"integer": "number"}.get(kind, kind or "any")
