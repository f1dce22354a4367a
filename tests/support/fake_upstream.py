"""A fake OpenAI-compatible provider: a real aiohttp server on 127.0.0.1.

It runs in a background thread with its own loop, so sync and async tests can
both use it; scripted replies are consumed in order, then ``default`` answers::

    with FakeUpstream() as up:
        up.enqueue(Reply(status=500), Reply(content="hi", usage={...}))
        tests.support.openai_client(up).chat.completions.create(...)
        assert up.requests[-1].json["model"] == "m"

Fault modes (``Reply`` fields), for the dependency-fault tests::

    Reply(delay_s=5)                                    # hang before the status line
    Reply(stall_mid_body_s=5)                           # non-stream: half a body, then nothing
    Reply(status=429, headers={"retry-after": "7"})     # an error with its headers
    Reply(status=503, raw_body=b"<html>...")            # a non-JSON error page
    Reply(chunks=[...], drop_after=3)                   # stream: connection dropped after 3 frames
    Reply(sse_frames=[b"garbage\n\n", ...])             # stream these bytes verbatim
    Reply(sse_frames=[...], eof_framing=True)           # no chunked framing: the end is a clean EOF
    Reply(compress=True)                                # gzip when the request's Accept-Encoding allows
    Reply(content="x" * 50_000_000, chunked=True)       # non-stream: a huge answer with no Content-Length

Usage as a provider would bill the request (tools, images, ``n``)::

    FakeUpstream(usage_for=tests.support.provider_billing.openai_usage)

As a process, for benchmarks (recording off)::

    python -m tests.support.fake_upstream --port 9100 --latency-ms 20 --chunks 8

Opt-in prefill time (off by default; benchmarks only): a real provider spends time per
prompt token before its first byte, which this fake otherwise does not. With it on, each
chat request waits ``prefill_us_per_token`` µs per prompt token (``estimate_prompt_tokens``,
chars // 4) before answering, so a benchmark can show what sending fewer tokens saves::

    python -m tests.support.fake_upstream --prefill-us-per-token 1.0   # 100k tokens: +100 ms

Opt-in prompt-cache simulation (``PromptCache``): computed usage then reports
cached reads (and, Anthropic-style, cache writes) for the longest prefix, in
whole messages, that an earlier request already sent::

    up = FakeUpstream(prompt_cache=PromptCache("openai"))      # or "anthropic"
    python -m tests.support.fake_upstream --prompt-cache openai
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import hashlib
import itertools
import threading
import time
from typing import Any, Callable, Mapping

import orjson
from aiohttp import web

from tests.support.threaded_server import ThreadedServer

__all__ = ["FakeUpstream", "PromptCache", "RecordedRequest", "Reply", "MODELS", "estimate_prompt_tokens"]

MODELS = ("gpt-4o-mini", "gpt-4o", "fake-model")
_SSE_DONE = b"data: [DONE]\n\n"
_MODELS_BODY = orjson.dumps(
    {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in MODELS],
    }
)


@dataclasses.dataclass
class Reply:
    """One scripted behaviour of the fake provider."""

    status: int = 200
    json_body: dict | None = None  # returned verbatim (errors, custom completions)
    content: str | None = None  # None: "ok", or null beside tool_calls
    tool_calls: list | None = None  # OpenAI shape; missing id/type are filled in
    usage: dict | None = None  # returned verbatim instead of the computed usage
    delay_s: float = 0.0  # before any byte of the response
    chunk_delay_s: float = 0.0  # between streamed chunks
    chunks: list[str] | None = None  # content pieces when streaming
    drop_connection: bool = False  # close mid-stream (or before answering, non-stream)
    finish_reason: str | None = None  # default: "tool_calls" if tool_calls else "stop"
    # Fault modes (see FAULTS in the module docstring).
    headers: dict[str, str] | None = None  # extra response headers, e.g. {"retry-after": "7"}
    raw_body: bytes | None = None  # sent verbatim with ``status`` and ``content_type`` (HTML 503, garbage)
    content_type: str = "text/html; charset=utf-8"  # of a raw_body
    stall_mid_body_s: float = 0.0  # non-stream: headers and half the body, then this long before the rest
    sse_frames: list[bytes] | None = None  # stream these bytes verbatim (malformed SSE), one write each
    drop_after: int | None = None  # stream: close the connection after this many frames
    eof_framing: bool = False  # stream without chunked framing: the end is a clean close, not an error
    compress: bool = False  # gzip/deflate the answer when the request's Accept-Encoding allows, as providers do
    chunked: bool = False  # non-stream: chunked framing, no Content-Length (its size known only at the end)


@dataclasses.dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any  # parsed body, or None


def estimate_prompt_tokens(messages: Any) -> int:
    """Cheap deterministic estimate: chars of contents // 4 + 4 per message."""
    if not isinstance(messages, list):
        return 0
    chars = 0
    for m in messages:
        if not isinstance(m, dict):
            continue
        c = m.get("content")
        if isinstance(c, str):
            chars += len(c)
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    chars += len(part["text"])
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                chars += len(str(fn.get("name", ""))) + len(str(fn.get("arguments", "")))
    return chars // 4 + 4 * len(messages)


def estimate_tools_tokens(tools: Any) -> int:
    """Tool schemas, in the same cheap estimate: chars of their JSON // 4."""
    return len(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)) // 4 if tools else 0


CACHE_SHAPES = ("openai", "anthropic")


class PromptCache:
    """A provider's prompt cache, simulated over whole messages.

    What is modelled (the rest is simplified on purpose):

    - **Prompt tokens**: tool schemas first (``count_tools``, default
      ``estimate_tools_tokens``), then each message (``count_message``,
      default ``estimate_prompt_tokens([message])``; pass a real tokenizer's
      count for realistic figures); the prompt is their sum (so with the
      defaults it differs by rounding from the plain estimate).
      Completion tokens count the reply's tool-call names and arguments too
      (chars // 4), not only its text.
    - **What can hit**: the longest run of leading messages, with the same
      model and tools, whose bytes (JSON, sorted keys) equal those of an
      earlier request's leading messages, seen within ``ttl_s`` (a hit
      refreshes it). Granularity is whole messages: one changed byte in a
      message misses it and everything after it, as a real provider does.
      A prefix of zero messages never hits.
    - **OpenAI** (``shape="openai"``): automatic caching, writes are free.
      Only prompts of at least ``min_tokens`` (1,024) are cached, and a hit
      is the matched prefix rounded DOWN to ``min_tokens + k × block_tokens``
      (128): OpenAI's documented granularity. Reported as
      ``prompt_tokens_details.cached_tokens``, part of ``prompt_tokens``.
    - **Anthropic** (``shape="anthropic"``): the client is taken to put a
      ``cache_control`` breakpoint on the last message of every request (the
      usual agent-loop setup). A hit is token-exact, but only looked up within
      the last ``lookback_blocks`` (20) messages before the breakpoint, as
      Anthropic does; everything after the hit up to the breakpoint is WRITTEN
      (billed at the write price). Prompts under ``min_tokens`` are neither
      read nor written (1,024 is the Sonnet/Opus minimum; set it higher for
      models with a larger one). Reported as litellm's OpenAI-shaped usage
      does for Anthropic: ``prompt_tokens`` = uncached + read + write, with
      ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` beside
      ``prompt_tokens_details.cached_tokens`` / ``cache_creation_tokens``
      (the same tokens named twice).

    Not modelled: per-organisation cache scope (one cache for all keys),
    eviction under load, OpenAI's ``prompt_cache_key`` routing, Anthropic's
    1-hour TTL, and partial messages (a provider can hit inside a message; here
    only whole ones). Anthropic's explicit breakpoints are modelled for native
    Messages bodies (:meth:`messages_usage`), not for chat-shaped ones.
    """

    def __init__(self, shape: str = "openai", *, min_tokens: int = 1024, block_tokens: int | None = None,
                 ttl_s: float = 300.0, lookback_blocks: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 count_message: Callable[[Mapping[str, Any]], int] | None = None,
                 count_tools: Callable[[Any], int] | None = None) -> None:
        if shape not in CACHE_SHAPES:
            raise ValueError(f"shape must be one of {', '.join(CACHE_SHAPES)}, got {shape!r}")
        self.shape = shape
        self.min_tokens = min_tokens
        self.block_tokens = block_tokens if block_tokens is not None else (128 if shape == "openai" else 1)
        self.lookback_blocks = lookback_blocks if lookback_blocks is not None else (
            None if shape == "openai" else 20)
        self.ttl_s = ttl_s
        self._clock = clock
        self._count_message = count_message or (lambda m: estimate_prompt_tokens([m]))
        self._count_tools = count_tools or estimate_tools_tokens
        self._seen: dict[bytes, float] = {}  # prefix digest -> last used
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def usage(self, request: Mapping[str, Any], completion_tokens: int) -> dict[str, Any]:
        """Usage for ``request`` as this provider would bill it; remembers its prefixes."""
        messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
        tools = request.get("tools")
        per_message = [self._count_message(m) for m in messages]
        tools_tokens = self._count_tools(tools) if tools else 0
        prompt = tools_tokens + sum(per_message)
        digests = self._prefix_digests(request.get("model"), tools, messages)
        now = self._clock()
        with self._lock:
            first = 0 if self.lookback_blocks is None else max(len(digests) - self.lookback_blocks, 0)
            hit = 0
            for i in range(len(digests), first, -1):  # longest live prefix of i messages
                used = self._seen.get(digests[i - 1])
                if used is not None and now - used <= self.ttl_s:
                    hit = i
                    break
            if prompt >= self.min_tokens:
                for d in digests:
                    self._seen[d] = now
        matched = tools_tokens + sum(per_message[:hit]) if hit else 0
        read = self._granular(matched) if prompt >= self.min_tokens else 0
        if self.shape == "openai":
            return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                    "total_tokens": prompt + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": read}}
        write = prompt - read if prompt >= self.min_tokens else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": read, "cache_creation_tokens": write,
                                          "text_tokens": prompt - read - write},
                "cache_read_input_tokens": read, "cache_creation_input_tokens": write}

    def messages_usage(self, body: Mapping[str, Any], output_tokens: int) -> dict[str, Any]:
        """Usage for an Anthropic Messages ``body`` as Anthropic bills it, from the client's own
        ``cache_control`` breakpoints (``/v1/messages`` of :class:`tests.support.fake_providers.FakeProviders`).

        The prompt is its blocks in Anthropic's order (tools, system, then each message's
        content blocks; a string content is the one text block it stands for), each ``len(JSON) // 4`` tokens with
        the role and without ``cache_control`` (moving a breakpoint does not change what is
        cached). An entry is written at each breakpoint whose prefix has ``min_tokens``; each
        breakpoint looks back at most ``lookback_blocks`` block boundaries for a live entry,
        and the longest found is READ. Everything after it up to the last breakpoint is
        WRITTEN; the rest is plain input. Reported in Anthropic's shape: ``input_tokens``
        (neither read nor written), ``cache_read_input_tokens``, ``cache_creation_input_tokens``."""
        blocks = anthropic_blocks(body)
        h = hashlib.blake2b(orjson.dumps(body.get("model")), digest_size=16)
        digests, ends, total = [], [], 0
        for marked, block in blocks:
            h.update(orjson.dumps(block, option=orjson.OPT_SORT_KEYS))
            digests.append(h.copy().digest())
            total += max(1, len(orjson.dumps(block, option=orjson.OPT_SORT_KEYS)) // 4)
            ends.append(total)
        breakpoints = [i for i, (marked, _) in enumerate(blocks) if marked]
        lookback = self.lookback_blocks or len(blocks)
        now = self._clock()
        hit = -1
        with self._lock:
            for bp in breakpoints:
                for i in range(bp, max(bp - lookback, -1), -1):
                    used = self._seen.get(digests[i])
                    if used is not None and now - used <= self.ttl_s:
                        hit = max(hit, i)
                        break
            if hit >= 0:
                self._seen[digests[hit]] = now
            for bp in breakpoints:
                if ends[bp] >= self.min_tokens:
                    self._seen[digests[bp]] = now
        read = ends[hit] if hit >= 0 else 0
        last = breakpoints[-1] if breakpoints else -1
        written = ends[last] - read if last > hit and ends[last] >= self.min_tokens else 0
        return {"input_tokens": total - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written, "output_tokens": output_tokens}

    def _granular(self, matched: int) -> int:
        if matched < self.min_tokens:
            return 0
        return self.min_tokens + (matched - self.min_tokens) // self.block_tokens * self.block_tokens

    @staticmethod
    def _prefix_digests(model: Any, tools: Any, messages: list[dict]) -> list[bytes]:
        h = hashlib.blake2b(orjson.dumps([model, tools], option=orjson.OPT_SORT_KEYS), digest_size=16)
        out = []
        for m in messages:
            h.update(orjson.dumps(m, option=orjson.OPT_SORT_KEYS))
            out.append(h.copy().digest())
        return out


def anthropic_blocks(body: Mapping[str, Any]) -> list[tuple[bool, Any]]:
    """A Messages body's prompt as (has a breakpoint, the block as cached) in Anthropic's order."""
    out: list[tuple[bool, Any]] = []

    def add(role: str, block: Any) -> None:
        marked = isinstance(block, dict) and isinstance(block.get("cache_control"), dict)
        plain = {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
        out.append((marked, [role, plain]))

    def listed(content: Any) -> Any:  # a string content is shorthand for one text block
        return [{"type": "text", "text": content}] if isinstance(content, str) else content or ()

    for tool in body.get("tools") or ():
        add("tool", tool)
    for block in listed(body.get("system")):
        add("system", block)
    for turn in body.get("messages") or ():
        for block in listed(turn.get("content")):
            add(turn.get("role"), block)
    return out


def _norm_tool_calls(tool_calls: list) -> list[dict]:
    out = []
    for i, tc in enumerate(tool_calls):
        tc = dict(tc)
        tc.setdefault("id", f"call_fake_{i}")
        tc.setdefault("type", "function")
        fn = dict(tc.get("function") or {})
        fn.setdefault("name", "tool")
        args = fn.get("arguments", "{}")
        fn["arguments"] = args if isinstance(args, str) else orjson.dumps(args).decode()
        tc["function"] = fn
        out.append(tc)
    return out


class FakeUpstream(ThreadedServer):
    """Fake OpenAI provider (aiohttp) on 127.0.0.1, in a background thread."""

    thread_name = "fake-upstream"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        default: Reply | None = None,
        prompt_cache: PromptCache | None = None,
        usage_for: Callable[[dict], dict] | None = None,
        prefill_us_per_token: float = 0.0,
    ) -> None:
        super().__init__(host=host, port=port)
        self.prefill_us_per_token = prefill_us_per_token  # 0: no prefill time (the default)
        self.usage_for = usage_for  # computes the usage from the request (tests.support.provider_billing)
        self.prompt_cache = prompt_cache  # None: computed usage reports no caching
        self.record = record
        self.default = default or Reply()
        self.requests: list[RecordedRequest] = []
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- scripting -------------------------------------------------------
    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def clear(self) -> None:
        """Forget recorded requests, pending scripted replies and cached prefixes."""
        with self._lock:
            self.requests.clear()
            self._queue.clear()
        if self.prompt_cache is not None:
            self.prompt_cache.clear()

    def _next_reply(self) -> Reply:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle -------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    # -- handlers --------------------------------------------------------
    async def _record(self, request: web.Request) -> tuple[bytes, Any]:
        body = await request.read()
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        if self.record:
            rec = RecordedRequest(
                method=request.method,
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                json=parsed,
            )
            with self._lock:
                self.requests.append(rec)
        return body, parsed

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        resp = web.Response(body=_MODELS_BODY, content_type="application/json")
        resp.enable_compression()  # as real providers do, when the request accepts it
        return resp

    async def _not_found(self, request: web.Request) -> web.Response:
        await self._record(request)
        err = {"error": {"message": f"no route {request.path}", "type": "invalid_request_error",
                         "param": None, "code": "not_found"}}
        return web.Response(status=404, body=orjson.dumps(err), content_type="application/json")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        _, req = await self._record(request)
        reply = self._next_reply()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if self.prefill_us_per_token and isinstance(req, dict):
            await asyncio.sleep(estimate_prompt_tokens(req.get("messages")) * self.prefill_us_per_token / 1e6)
        if reply.drop_connection and not (isinstance(req, dict) and req.get("stream")):
            request.transport.close()  # type: ignore[union-attr]
            return web.Response(status=500)  # never reaches the client
        faulty = await fault_response(request, reply)
        if faulty is not None:
            return faulty
        if reply.json_body is not None or reply.status != 200 or not isinstance(req, dict):
            body = reply.json_body
            if body is None:
                body = {"error": {"message": "fake upstream error" if isinstance(req, dict)
                                  else "body is not JSON", "type": "server_error",
                                  "param": None, "code": None}}
            status = reply.status if isinstance(req, dict) else 400
            return web.Response(status=status, body=orjson.dumps(body),
                                content_type="application/json", headers=reply.headers)
        model = req.get("model", "fake-model")
        text = reply.content or ("" if reply.tool_calls else "ok")
        ct = max(1, len(text) // 4)
        simulated = None
        if self.prompt_cache is not None:  # sees every answered request, even one with scripted usage
            calls = _norm_tool_calls(reply.tool_calls) if reply.tool_calls else []
            ct = max(1, (len(text) + sum(len(c["function"]["name"]) + len(c["function"]["arguments"])
                                         for c in calls)) // 4)
            simulated = self.prompt_cache.usage(req, ct)
        usage = reply.usage if reply.usage is not None else simulated
        if usage is None and self.usage_for is not None:
            usage = self.usage_for(req)
        if usage is None:
            pt = estimate_prompt_tokens(req.get("messages"))
            usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
        tool_calls = _norm_tool_calls(reply.tool_calls) if reply.tool_calls else None
        content = reply.content if reply.content is not None or tool_calls else "ok"
        finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        cid = f"chatcmpl-fake-{next(self._ids)}"
        created = int(time.time())
        if req.get("stream"):
            include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, reply, content, cid, created, model,
                                      tool_calls, finish, usage if include_usage else None)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        body = {
            "id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage,
        }
        payload = orjson.dumps(body)
        if reply.stall_mid_body_s:
            return await _stalled(request, payload, reply.stall_mid_body_s)
        if reply.chunked:
            return await _chunked(request, payload)
        resp = web.Response(body=payload, content_type="application/json", headers=reply.headers)
        if reply.compress:
            resp.enable_compression()
        return resp

    async def _stream(self, request: web.Request, reply: Reply, content: str | None,
                      cid: str, created: int,
                      model: str, tool_calls: list | None, finish: str,
                      usage: dict | None) -> web.StreamResponse:
        head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}

        def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
            c = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish_reason}]}
            return b"data: " + orjson.dumps(c) + b"\n\n"

        frames = [chunk({"role": "assistant", "content": ""})]
        if reply.chunks is not None or content:
            pieces = reply.chunks if reply.chunks is not None else [content]
            frames.extend(chunk({"content": p}) for p in pieces)
        if tool_calls:
            for i, tc in enumerate(tool_calls):
                frames.append(chunk({"tool_calls": [{
                    "index": i, "id": tc["id"], "type": tc["type"],
                    "function": {"name": tc["function"]["name"], "arguments": ""}}]}))
                frames.append(chunk({"tool_calls": [{
                    "index": i, "function": {"arguments": tc["function"]["arguments"]}}]}))
        frames.append(chunk({}, finish))
        if usage is not None:
            frames.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage})
                          + b"\n\n")
        frames.append(_SSE_DONE)
        return await send_frames(request, reply, frames)


async def send_frames(request: web.Request, reply: Reply, frames: list[bytes]) -> web.StreamResponse:
    """An event stream of ``frames`` (one write each), with the reply's stream faults: its own
    ``sse_frames`` instead, a drop after ``drop_after`` frames (or half of them with
    ``drop_connection``), no chunked framing, compression, a delay between frames."""
    if reply.sse_frames is not None:
        frames = list(reply.sse_frames)
    drop_at = len(frames) // 2 if reply.drop_connection else -1
    if reply.drop_after is not None:
        drop_at = reply.drop_after
    if reply.eof_framing:
        return await _stream_until_close(request, frames, reply)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       **(reply.headers or {})})
    if reply.compress:
        resp.enable_compression()
    await resp.prepare(request)
    for i, frame in enumerate(frames if drop_at < 0 else frames[:drop_at]):
        if i and reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
        await resp.write(frame)
    if drop_at >= 0:  # no terminating chunk: the client sees a broken transfer
        request.transport.close()  # type: ignore[union-attr]
        return resp
    await resp.write_eof()
    return resp


async def fault_response(request: web.Request, reply: Reply) -> web.StreamResponse | None:
    """The reply's raw body (any status, any bytes), or None for a regular answer."""
    if reply.raw_body is None:
        return None
    if reply.stall_mid_body_s:
        return await _stalled(request, reply.raw_body, reply.stall_mid_body_s, reply.status, reply.content_type)
    return web.Response(status=reply.status, body=reply.raw_body, headers={
        "Content-Type": reply.content_type, **(reply.headers or {})})


async def _stalled(request: web.Request, body: bytes, stall_s: float, status: int = 200,
                   content_type: str = "application/json") -> web.StreamResponse:
    """Headers and a Content-Length, half the body, a stall, then the rest (if anyone still listens)."""
    resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
    resp.content_length = len(body)
    await resp.prepare(request)
    half = len(body) // 2
    await resp.write(body[:half])
    await asyncio.sleep(stall_s)
    try:
        await resp.write(body[half:])
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client gave up first
    return resp


async def _chunked(request: web.Request, body: bytes, piece: int = 1 << 20) -> web.StreamResponse:
    """A JSON answer in chunked framing, a megabyte per write (if anyone still listens)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        for start in range(0, len(body), piece):
            await resp.write(body[start:start + piece])
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading
    return resp


async def _stream_until_close(request: web.Request, frames: list[bytes], reply: Reply) -> web.StreamResponse:
    """An event stream without Content-Length or chunked framing: its end is the connection's close,
    so a cut stream looks like a finished one (HTTP/1.0-style servers, some proxies)."""
    transport = request.transport
    assert transport is not None
    extra = "".join(f"{k}: {v}\r\n" for k, v in (reply.headers or {}).items())
    transport.write(("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                     f"connection: close\r\n{extra}\r\n").encode())
    for i, frame in enumerate(frames if reply.drop_after is None else frames[:reply.drop_after]):
        if i and reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
        transport.write(frame)
    transport.close()
    return web.Response(status=500)  # never reaches the client: the transport is closed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Fake OpenAI-compatible upstream (benchmarks).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9100)
    p.add_argument("--latency-ms", type=float, default=0.0, help="fixed delay before answering")
    p.add_argument("--chunks", type=int, default=4, help="content pieces when streaming")
    p.add_argument("--chunk-delay-ms", type=float, default=0.0)
    p.add_argument("--record", action="store_true", help="keep every request (grows memory)")
    p.add_argument("--prompt-cache", choices=CACHE_SHAPES, default=None,
                   help="simulate a provider prompt cache in the reported usage (see PromptCache)")
    p.add_argument("--prefill-us-per-token", type=float, default=0.0,
                   help="wait this many µs per prompt token before answering a chat (off: 0)")
    a = p.parse_args(argv)
    try:
        import uvloop  # optional: faster loop for benchmarks

        run = uvloop.run
    except (ImportError, AttributeError):
        run = asyncio.run
    pieces = [f"tok{i} " for i in range(a.chunks)]
    up = FakeUpstream(host=a.host, port=a.port, record=a.record, default=Reply(
        content="".join(pieces), chunks=pieces, delay_s=a.latency_ms / 1000,
        chunk_delay_s=a.chunk_delay_ms / 1000),
        prompt_cache=PromptCache(a.prompt_cache) if a.prompt_cache else None,
        prefill_us_per_token=a.prefill_us_per_token)

    async def serve() -> None:
        await up.start_async()
        print(f"fake upstream listening on {up.base_url}", flush=True)
        await asyncio.Event().wait()

    try:
        run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
