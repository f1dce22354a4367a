"""A request body off the wire: read within its limits, parsed as one JSON object.

The transport hands over the body's chunks (an ASGI receive loop, a test's
list); nothing here knows the web framework::

    raw = await read_body(request.stream(), request.headers.get("content-length"), limit, timeout_s)
    body = parse_body(raw, max_depth=64)     # dict, or InvalidRequest naming the problem
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterable

import orjson

from gateway.errors import BodyTooLarge, InvalidRequest, RequestTimeout


async def read_body(chunks: AsyncIterable[bytes], declared_length: str | None, limit: int,
                    timeout_s: float = 60.0) -> bytes:
    """The whole body, or 413 past ``limit`` bytes (declared or counted), or 408 when it
    does not arrive within ``timeout_s``."""
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        raise BodyTooLarge(f"request body is {declared_length} bytes; the limit is {limit} bytes")
    parts, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
                parts.append(chunk)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout_s:g} s "
                             f"({size} bytes received)") from None
    return b"".join(parts)


def parse_body(raw: bytes, max_depth: int = 64) -> dict[str, Any]:
    if not raw:
        raise InvalidRequest("request body is empty; expected a JSON object with 'model' and 'messages'")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(_json_problem(raw, exc)) from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {type(body).__name__}")
    depth = nesting_depth(body, max_depth)
    if depth > max_depth:
        raise InvalidRequest(f"request body is nested too deeply: more than {max_depth} levels")
    return body


def _json_problem(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    if "UTF-8" in str(exc) or "surrogate" in str(exc):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return f"request body is not valid UTF-8 (byte {bad.start}); send JSON encoded as UTF-8"
        return f"request body has an invalid unicode escape: {exc}"
    if "depth limit" in str(exc):
        return "request body is nested too deeply to parse"
    return f"request body is not valid JSON: {exc}"


def nesting_depth(value: Any, stop_after: int) -> int:
    """Depth of nested arrays and objects (a scalar is 0), not walking past ``stop_after``.

    Needed beyond the parser's own limit (1024): orjson serializes at most 254
    levels, so a deeper body would parse, then fail on its way upstream. Walks
    level by level, and only into containers (≈0.2 µs per container)."""
    if type(value) is not dict and type(value) is not list:
        return 0
    depth, level = 0, [value]
    while level:
        depth += 1
        if depth > stop_after:
            break
        level = [child for c in level for child in (c.values() if type(c) is dict else c)
                 if type(child) is dict or type(child) is list]
    return depth
