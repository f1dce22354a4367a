"""A provider that bills real token counts and keeps Responses server-side: what Sieve's budgets face.

A real aiohttp server on 127.0.0.1 speaking OpenAI Chat Completions and Responses and
Anthropic Messages, as an adversarial run of issue 28 met them. It bills what a real
provider bills, whatever the request body shows:

* text in o200k_base, 4 tokens a message;
* ``DOCUMENT_TOKENS`` for each file or document the body only names (Chat ``file``
  parts by ``file_id``, Responses ``input_file`` by id or URL, Messages ``document``
  blocks by URL or file) and for each built-in tool it runs (Responses tools other
  than functions, Anthropic's server tools);
* a Responses continuation (``previous_response_id``, ``conversation``) bills the whole
  stored chain again: the earlier input and output, as OpenAI does;
* the output: the body's cap, else ``long_output`` tokens (a model that talks long),
  each token the text " hello" (one o200k token), so what a stream shows is countable.

Responses are stored per id with their input (input items readable back, compacted,
cancelled, deleted), and anyone holding an id may use it: the provider has one account,
the gateway's. Every bill is added to ``billed[org]``, the org read from the
``x-stainless-billing-org`` request header (the SDKs' ``x-stainless-*`` headers pass
Sieve with its own key), so a test sees what each org cost::

    with BillingProvider() as provider:
        settings: upstream_base_url=provider.base_url, anthropic_base_url=provider.anthropic_base_url
        provider.billed["acme"]

Faults, per request, from the ``x-stainless-fault`` header: ``cut:N`` (the stream's
connection closed after N output deltas), ``slow:MS`` (a pause after each delta),
``no-usage`` (a stream that ends without its usage), ``huge:N`` (a whole answer padded
to N bytes). A cut stream bills its prompt and
what it streamed.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from gateway.pruning.tokens import default_engine, text_counter
from tests.support.threaded_server import ThreadedServer

__all__ = ["BillingProvider", "DOCUMENT_TOKENS", "TOKEN"]

DOCUMENT_TOKENS = 60_000
TOKEN = " hello"  # one o200k token
_count = text_counter("o200k_base", default_engine())


@dataclass
class Stored:
    org: str
    input: list[Any]
    output_text: str
    chain: int  # what continuing it bills again: its input (earlier turns included) and output
    deleted: bool = False


@dataclass
class Bill:
    input: int
    output: int
    fault: str = ""
    org: str = "unknown"
    meta: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> int:
    return _count(value) if isinstance(value, str) and value else 0


def _named_file(part: dict[str, Any]) -> bool:
    return not part.get("file_data") and bool(part.get("file_id") or part.get("file_url"))


class BillingProvider(ThreadedServer):
    thread_name = "billing-provider"

    def __init__(self, *, long_output: int = 240_000) -> None:
        super().__init__()
        self.long_output = long_output
        self.billed: dict[str, int] = defaultdict(int)
        self.bills: list[Bill] = []
        self.responses: dict[str, Stored] = {}
        self.conversations: dict[str, int] = {}
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/responses/compact", self._compact)
        app.router.add_post("/v1/responses/input_tokens", self._input_tokens)
        app.router.add_get("/v1/responses/{id}", self._get)
        app.router.add_delete("/v1/responses/{id}", self._delete)
        app.router.add_post("/v1/responses/{id}/cancel", self._cancel)
        app.router.add_get("/v1/responses/{id}/input_items", self._input_items)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)
        return app

    # -- billing ----------------------------------------------------------------------------
    def _bill(self, request: web.Request, input_tokens: int, output_tokens: int) -> Bill:
        bill = Bill(input_tokens, output_tokens, request.headers.get("x-stainless-fault", ""),
                    request.headers.get("x-stainless-billing-org", "unknown"))
        with self._lock:
            self.bills.append(bill)
            self.billed[bill.org] += input_tokens + output_tokens
        return bill

    def _charge_more(self, bill: Bill, tokens: int) -> None:
        with self._lock:
            self.billed[bill.org] += tokens

    def _output(self, body: dict[str, Any], *caps: str) -> int:
        cap = next((body[name] for name in caps if isinstance(body.get(name), int)), None)
        return self.long_output if cap is None else min(cap, self.long_output)

    async def _json(self, request: web.Request) -> dict[str, Any]:
        with self._lock:
            self.paths.append(f"{request.method} {request.path}")
        try:
            body = orjson.loads(await request.read() or b"{}")
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text='{"error": {"message": "not an object", "type": "invalid_request_error"}}',
                                     content_type="application/json")
        return body

    # -- Chat Completions -------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._json(request)
        prompt = 3 + sum(self._chat_message(m) for m in body.get("messages") or ())
        prompt += DOCUMENT_TOKENS if body.get("web_search_options") is not None else 0
        bill = self._bill(request, prompt, self._output(body, "max_completion_tokens", "max_tokens"))
        if not body.get("stream"):
            return self._whole(bill, {"id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion",
                                      "model": body.get("model"), "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": TOKEN * bill.output}}],
                                      "usage": {"prompt_tokens": prompt, "completion_tokens": bill.output,
                                                "total_tokens": prompt + bill.output}})
        head = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": body.get("model")}

        def delta(n: int) -> bytes:
            return _data({**head, "choices": [{"index": 0, "delta": {"content": TOKEN * n}, "finish_reason": None}]})

        usage = {"prompt_tokens": prompt, "completion_tokens": bill.output, "total_tokens": prompt + bill.output}
        tail = [_data({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})]
        if (body.get("stream_options") or {}).get("include_usage") and bill.fault != "no-usage":
            tail.append(_data({**head, "choices": [], "usage": usage}))
        return await self._stream(request, bill, delta, tail + [b"data: [DONE]\n\n"])

    def _chat_message(self, message: Any) -> int:
        if not isinstance(message, dict):
            return 0
        content, tokens = message.get("content"), 4
        if isinstance(content, str):
            return tokens + _text(content)
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "file" and _named_file(part.get("file") or {}):
                tokens += DOCUMENT_TOKENS
            elif isinstance(part, dict):
                tokens += _text(part.get("text"))
        return tokens

    # -- Anthropic Messages ---------------------------------------------------------------
    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._json(request)
        prompt = 3 + _text(body.get("system")) if isinstance(body.get("system"), str) else 3
        for message in body.get("messages") or ():
            content = message.get("content") if isinstance(message, dict) else None
            prompt += 4 + (_text(content) if isinstance(content, str) else sum(
                DOCUMENT_TOKENS if isinstance(b, dict) and b.get("type") == "document" and
                (b.get("source") or {}).get("type") in ("url", "file") else _text((b or {}).get("text"))
                for b in content or () if isinstance(b, dict)))
        prompt += DOCUMENT_TOKENS * sum(1 for t in body.get("tools") or () if isinstance(t, dict) and
                                        str(t.get("type", "")).startswith(("web_search", "web_fetch")))
        bill = self._bill(request, prompt, self._output(body, "max_tokens"))
        message = {"id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "stop_reason": "end_turn", "stop_sequence": None}
        if not body.get("stream"):
            return self._whole(bill, {**message, "content": [{"type": "text", "text": TOKEN * bill.output}],
                                      "usage": {"input_tokens": prompt, "output_tokens": bill.output}})
        start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}
        head = [_event("message_start", {"type": "message_start", "message": start}),
                _event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})]

        def delta(n: int) -> bytes:
            return _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": TOKEN * n}})

        end = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        if bill.fault != "no-usage":
            end["usage"] = {"output_tokens": bill.output}
        tail = [_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                _event("message_delta", end), _event("message_stop", {"type": "message_stop"})]
        return await self._stream(request, bill, delta, tail, head)

    # -- Responses ------------------------------------------------------------------------
    def _responses_prompt(self, body: dict[str, Any]) -> tuple[int, str | None]:
        """Its input as billed, with the stored chain it continues; an error message for an unknown id."""
        prompt = 3 + _text(body.get("instructions"))
        previous = body.get("previous_response_id")
        if previous is not None:
            stored = self.responses.get(previous)
            if stored is None or stored.deleted:
                return 0, f"Previous response with id '{previous}' not found."
            prompt += stored.chain
        conversation = body.get("conversation")
        conversation = conversation.get("id") if isinstance(conversation, dict) else conversation
        if isinstance(conversation, str):
            prompt += self.conversations.get(conversation, 0)
        items = body.get("input")
        if isinstance(items, str):
            prompt += 4 + _text(items)
        for item in items if isinstance(items, list) else ():
            content = item.get("content") if isinstance(item, dict) else None
            prompt += 4 + (_text(content) if isinstance(content, str) else sum(
                DOCUMENT_TOKENS if isinstance(p, dict) and p.get("type") == "input_file" and _named_file(p)
                else _text((p or {}).get("text")) for p in content or () if isinstance(p, dict)))
        prompt += DOCUMENT_TOKENS * sum(1 for t in body.get("tools") or ()
                                        if isinstance(t, dict) and t.get("type") not in ("function", "custom"))
        return prompt, None

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._json(request)
        prompt, missing = self._responses_prompt(body)
        if missing is not None:
            return _openai_error(400, missing, "previous_response_id")
        bill = self._bill(request, prompt, self._output(body, "max_output_tokens"))
        rid = f"resp_{next(self._ids):08d}"
        conversation = body.get("conversation")
        conversation = conversation.get("id") if isinstance(conversation, dict) else conversation
        if body.get("store") is not False:
            items = body["input"] if isinstance(body.get("input"), list) else [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": body.get("input")}]}]
            self.responses[rid] = Stored(bill.org, items, TOKEN * bill.output, prompt + bill.output)
            if isinstance(conversation, str):
                self.conversations[conversation] = prompt + bill.output
        response = {"id": rid, "object": "response", "status": "completed", "model": body.get("model"),
                    "previous_response_id": body.get("previous_response_id"),
                    "conversation": {"id": conversation} if isinstance(conversation, str) else None}
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": bill.output, "total_tokens": prompt + bill.output}
        item = {"id": f"msg_{rid}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": TOKEN * bill.output, "annotations": []}]}
        if not body.get("stream"):
            return self._whole(bill, {**response, "output": [item], "usage": usage})
        seq = itertools.count()
        created = {**response, "status": "in_progress", "output": [], "usage": None}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": "", "annotations": []}
        head = [_event(kind, {"type": kind, "sequence_number": next(seq), **fields}) for kind, fields in (
            ("response.created", {"response": created}),
            ("response.output_item.added", {"output_index": 0, "item": {**item, "status": "in_progress",
                                                                         "content": []}}),
            ("response.content_part.added", {**where, "part": part}))]

        def delta(n: int) -> bytes:
            return _event("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                         "output_index": 0, "content_index": 0,
                                                         "delta": TOKEN * n, "sequence_number": next(seq)})

        done = {**response, "output": [item], "usage": None if bill.fault == "no-usage" else usage}
        tail = [_event(kind, {"type": kind, "sequence_number": 10**6 + n, **fields}) for n, (kind, fields) in enumerate((
            ("response.output_text.done", {**where, "text": item["content"][0]["text"]}),
            ("response.content_part.done", {**where, "part": item["content"][0]}),
            ("response.output_item.done", {"output_index": 0, "item": item}),
            ("response.completed", {"response": done})))]
        return await self._stream(request, bill, delta, tail, head)

    async def _compact(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        prompt, missing = self._responses_prompt(body)
        if missing is not None:
            return _openai_error(400, missing, "previous_response_id")
        bill = self._bill(request, prompt, 200)
        return web.json_response({"id": f"cmp_{next(self._ids)}", "object": "response.compaction",
                                  "output": [{"type": "compaction", "encrypted_content": "opaque"}],
                                  "usage": {"input_tokens": bill.input, "output_tokens": bill.output}})

    async def _input_tokens(self, request: web.Request) -> web.Response:
        prompt, missing = self._responses_prompt(await self._json(request))
        if missing is not None:
            return _openai_error(400, missing, "previous_response_id")
        return web.json_response({"object": "response.input_tokens", "input_tokens": prompt})

    def _stored(self, request: web.Request) -> Stored | None:
        with self._lock:
            self.paths.append(f"{request.method} {request.path}")
        stored = self.responses.get(request.match_info["id"])
        return None if stored is None or stored.deleted else stored

    async def _get(self, request: web.Request) -> web.Response:
        stored = self._stored(request)
        if stored is None:
            return _openai_error(404, f"Response with id '{request.match_info['id']}' not found.")
        return web.json_response({"id": request.match_info["id"], "object": "response", "status": "completed",
                                  "output": [{"type": "message", "role": "assistant", "content": [
                                      {"type": "output_text", "text": stored.output_text[:200]}]}]})

    async def _delete(self, request: web.Request) -> web.Response:
        stored = self._stored(request)
        if stored is None:
            return _openai_error(404, f"Response with id '{request.match_info['id']}' not found.")
        stored.deleted = True
        return web.json_response({"id": request.match_info["id"], "object": "response.deleted", "deleted": True})

    async def _cancel(self, request: web.Request) -> web.Response:
        if self._stored(request) is None:
            return _openai_error(404, f"Response with id '{request.match_info['id']}' not found.")
        return web.json_response({"id": request.match_info["id"], "object": "response", "status": "cancelled"})

    async def _input_items(self, request: web.Request) -> web.Response:
        stored = self._stored(request)
        if stored is None:
            return _openai_error(404, f"Response with id '{request.match_info['id']}' not found.")
        return web.json_response({"object": "list", "data": stored.input, "has_more": False})

    async def _elsewhere(self, request: web.Request) -> web.Response:
        with self._lock:
            self.paths.append(f"{request.method} {request.path}")
        return _openai_error(404, f"no route {request.path}")

    # -- answers ----------------------------------------------------------------------------
    def _whole(self, bill: Bill, payload: dict[str, Any]) -> web.Response:
        raw = orjson.dumps(payload)
        if bill.fault.startswith("huge:"):  # padded past what a gateway holds, usage and all
            raw = raw[:-1] + b', "padding": "' + b"x" * int(bill.fault[5:]) + b'"}'
        return web.Response(body=raw, content_type="application/json")

    async def _stream(self, request: web.Request, bill: Bill, delta: Any, tail: list[bytes],
                      head: tuple[bytes, ...] | list[bytes] = ()) -> web.StreamResponse:
        """The answer's deltas (a handful of tokens each); ``cut:N`` closes after N of them, and
        the provider's bill is then the prompt and the tokens it streamed."""
        cut = int(bill.fault[4:]) if bill.fault.startswith("cut:") else None
        pause = float(bill.fault[5:]) / 1000 if bill.fault.startswith("slow:") else 0.0
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in head:
            await resp.write(frame)
        sent, step, n = 0, 7, 0
        try:
            while sent < bill.output:
                if cut is not None and n >= cut:
                    self._charge_more(bill, sent - bill.output)  # billed what it generated, no more
                    request.transport.close()  # type: ignore[union-attr]
                    return resp
                size = min(step, bill.output - sent)
                await resp.write(delta(size))
                if pause:
                    await asyncio.sleep(pause)
                sent, n = sent + size, n + 1
            for frame in tail:
                await resp.write(frame)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):  # the client (Sieve) left: generation stopped there
            self._charge_more(bill, sent - bill.output)
        return resp


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _openai_error(status: int, message: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                        "code": None}}, status=status)
