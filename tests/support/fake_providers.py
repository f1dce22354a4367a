"""The fake provider, speaking Anthropic's Messages API and OpenAI's Responses API as well.

A :class:`tests.support.fake_upstream.FakeUpstream` (real aiohttp server on 127.0.0.1,
recording every request) with the routes of the two other formats, answered
from the same scripted ``Reply`` queue::

    with FakeProviders() as up:
        gateway settings: upstream_base_url=up.base_url, anthropic_base_url=up.anthropic_base_url
        up.enqueue(Reply(content="hi"), Reply(tool_calls=[{"function": {"name": "ls", "arguments": "{}"}}]))
        up.requests[-1].json        # what Sieve forwarded, in the client's format

Routes: ``POST /v1/messages`` (stream and not), ``/v1/messages/count_tokens``,
``POST /v1/responses`` (stream and not), ``/v1/responses/compact`` (scripted like
``/v1/responses``: a reply's ``usage`` and faults apply),
``/v1/responses/input_tokens``, ``GET``/``DELETE /v1/responses/{id}``,
``POST /v1/responses/{id}/cancel``, ``GET /v1/responses/{id}/input_items``,
besides the Chat Completions routes. A reply's ``tool_calls`` (OpenAI shape)
become ``tool_use`` blocks / ``function_call`` items; ``usage`` is returned
verbatim (in the format's own shape), else computed from the request's size
(characters // 4). Faults: ``status`` + ``json_body`` (an error), ``status`` + ``raw_body`` (an HTML or
plain-text error page, sent as it is), ``drop_after``
(a stream cut after that many events), ``sse_frames`` (these bytes verbatim).
With ``prompt_cache=PromptCache("anthropic")``, ``/v1/messages`` reports Anthropic's cache
reads and writes from the body's own breakpoints (``PromptCache.messages_usage``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.support.fake_upstream import FakeUpstream, Reply, _norm_tool_calls, fault_response, send_frames

__all__ = ["FakeProviders", "Reply"]


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _size_tokens(*parts: Any) -> int:
    return max(1, sum(len(orjson.dumps(p)) for p in parts if p is not None) // 4)


def _not_an_object(anthropic: bool) -> web.Response:
    """The provider's 400 for a body that is not a JSON object, in its own error shape."""
    message = "the request body must be a JSON object"
    body = ({"type": "error", "error": {"type": "invalid_request_error", "message": message}} if anthropic else
            {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}})
    return web.json_response(body, status=400)


class FakeProviders(FakeUpstream):
    """Fake OpenAI (Chat Completions, Responses) and Anthropic (Messages) provider in one server."""

    @property
    def anthropic_base_url(self) -> str:
        """What ``SIEVE_ANTHROPIC_BASE_URL`` names: the root, below which Sieve appends ``/v1/messages``."""
        return f"http://{self.host}:{self.port}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/responses/compact", self._compact)
        app.router.add_post("/v1/responses/input_tokens", self._input_tokens)
        app.router.add_post("/v1/responses/{id}/cancel", self._cancelled)
        app.router.add_get("/v1/responses/{id}/input_items", self._input_items)
        app.router.add_get("/v1/responses/{id}", self._stored)
        app.router.add_delete("/v1/responses/{id}", self._deleted)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    # -- shared ----------------------------------------------------------------------------------
    async def _scripted(self, request: web.Request) -> tuple[Any, Reply, web.StreamResponse | None]:
        """The request, its reply, and the answer already decided by a fault or an error status."""
        _, req = await self._record(request)
        reply = self._next_reply()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        fault = await fault_response(request, reply)
        if fault is not None:
            return req, reply, fault
        anthropic = request.path.startswith("/v1/messages")
        if not isinstance(req, dict):
            return req, reply, _not_an_object(anthropic)
        if reply.status != 200:
            body = reply.json_body or (
                {"type": "error", "error": {"type": "api_error", "message": "fake error"}} if anthropic else
                {"error": {"message": "fake error", "type": "server_error", "param": None, "code": None}})
            return req, reply, web.json_response(body, status=reply.status, headers=reply.headers)
        if reply.json_body is not None and not req.get("stream"):
            return req, reply, web.json_response(reply.json_body, headers=reply.headers)
        return req, reply, None

    # -- Anthropic Messages ------------------------------------------------------------------------
    async def _messages(self, request: web.Request) -> web.StreamResponse:
        req, reply, decided = await self._scripted(request)
        if decided is not None:
            return decided
        text = reply.content if reply.content is not None else ("" if reply.tool_calls else "ok")
        calls = _norm_tool_calls(reply.tool_calls) if reply.tool_calls else []
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "id": c["id"].replace("call", "toolu"), "name": c["function"]["name"],
                    "input": orjson.loads(c["function"]["arguments"])} for c in calls]
        output = max(1, (len(text) + sum(len(c["function"]["arguments"]) for c in calls)) // 4)
        usage = reply.usage or (self.prompt_cache.messages_usage(req, output) if self.prompt_cache is not None else
                                {"input_tokens": _size_tokens(req.get("system"), req.get("messages")),
                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                                 "output_tokens": output})
        stop = reply.finish_reason or ("tool_use" if calls else "end_turn")
        message = {"id": f"msg_fake_{next(self._ids)}", "type": "message", "role": "assistant",
                   "model": req.get("model"), "content": blocks, "stop_reason": stop, "stop_sequence": None,
                   "usage": usage}
        if not req.get("stream"):
            return web.json_response(message, headers=reply.headers)
        return await send_frames(request, reply, _message_events(message, reply.chunks))

    async def _count_tokens(self, request: web.Request) -> web.Response:
        _, req = await self._record(request)
        if not isinstance(req, dict):
            return _not_an_object(anthropic=True)
        return web.json_response({"input_tokens": _size_tokens(req.get("system"), req.get("messages"))})

    # -- OpenAI Responses --------------------------------------------------------------------------
    async def _responses(self, request: web.Request) -> web.StreamResponse:
        req, reply, decided = await self._scripted(request)
        if decided is not None:
            return decided
        n = next(self._ids)
        text = reply.content if reply.content is not None else ("" if reply.tool_calls else "ok")
        calls = _norm_tool_calls(reply.tool_calls) if reply.tool_calls else []
        output: list[dict[str, Any]] = []
        if text:
            output.append({"id": f"msg_fake_{n}", "type": "message", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        output += [{"id": f"fc_fake_{n}_{i}", "type": "function_call", "status": "completed", "call_id": c["id"],
                    "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                   for i, c in enumerate(calls)]
        out_tokens = max(1, (len(text) + sum(len(c["function"]["arguments"]) for c in calls)) // 4)
        in_tokens = _size_tokens(req.get("instructions"), req.get("input"))
        usage = reply.usage or {"input_tokens": in_tokens, "input_tokens_details": {"cached_tokens": 0},
                                "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                                "total_tokens": in_tokens + out_tokens}
        response = {"id": f"resp_fake_{n}", "object": "response", "created_at": 0, "status": "completed",
                    "model": req.get("model"), "output": output, "usage": usage, "error": None,
                    "incomplete_details": None, "instructions": req.get("instructions"), "metadata": {},
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": req.get("tools") or [],
                    "previous_response_id": req.get("previous_response_id"), "store": req.get("store", True)}
        if not req.get("stream"):
            return web.json_response(response, headers=reply.headers)
        return await send_frames(request, reply, _response_events(response, reply.chunks))

    async def _compact(self, request: web.Request) -> web.StreamResponse:
        req, reply, decided = await self._scripted(request)
        if decided is not None:
            return decided
        usage = reply.usage or {"input_tokens": _size_tokens(req.get("input")), "output_tokens": 1}
        return web.json_response({"id": "cmp_fake", "object": "response.compaction", "created_at": 0,
                                  "output": [{"type": "compaction", "encrypted_content": "opaque"}],
                                  "usage": usage}, headers=reply.headers)

    async def _input_tokens(self, request: web.Request) -> web.Response:
        _, req = await self._record(request)
        if not isinstance(req, dict):
            return _not_an_object(anthropic=False)
        return web.json_response({"object": "response.input_tokens",
                                  "input_tokens": _size_tokens(req.get("instructions"), req.get("input"))})

    async def _cancelled(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"id": request.match_info["id"], "object": "response", "status": "cancelled",
                                  "output": []})

    async def _stored(self, request: web.Request) -> web.Response:
        await self._record(request)
        rid = request.match_info["id"]
        return web.json_response({"id": rid, "object": "response", "status": "completed", "output": [],
                                  "query": request.query_string})

    async def _deleted(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"id": request.match_info["id"], "object": "response.deleted", "deleted": True})

    async def _input_items(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"object": "list", "data": [{"id": "msg_in", "type": "message", "role": "user",
                                                              "content": [{"type": "input_text", "text": "hi"}]}],
                                  "first_id": "msg_in", "last_id": "msg_in", "has_more": False,
                                  "query": request.query_string})


def _message_events(message: dict[str, Any], pieces: list[str] | None) -> list[bytes]:
    """An Anthropic message as its stream of events."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    frames = [_event("message_start", {"type": "message_start", "message": start}), _event("ping", {"type": "ping"})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            frames.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                         "content_block": {"type": "text", "text": ""}}))
            for piece in pieces if pieces is not None else [block["text"]]:
                frames.append(_event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                             "delta": {"type": "text_delta", "text": piece}}))
        else:
            frames.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                         "content_block": {**block, "input": {}}}))
            frames.append(_event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}}))
        frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    frames.append(_event("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
    frames.append(_event("message_stop", {"type": "message_stop"}))
    return frames


def _response_events(response: dict[str, Any], pieces: list[str] | None) -> list[bytes]:
    """A response as the Responses API streams it, every event numbered in sequence."""
    events: list[tuple[str, dict[str, Any]]] = []
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events += [("response.created", {"response": pending}), ("response.in_progress", {"response": pending})]
    for i, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_item.added", {"output_index": i, "item": {
                **item, "status": "in_progress", "content": []}}))
            events.append(("response.content_part.added", {**where, "content_index": 0, "part": {
                "type": "output_text", "text": "", "annotations": []}}))
            for piece in pieces if pieces is not None else [text]:
                events.append(("response.output_text.delta", {**where, "content_index": 0, "delta": piece,
                                                              "logprobs": []}))
            events.append(("response.output_text.done", {**where, "content_index": 0, "text": text,
                                                          "logprobs": []}))
            events.append(("response.content_part.done", {**where, "content_index": 0,
                                                           "part": item["content"][0]}))
        else:
            events.append(("response.output_item.added", {"output_index": i, "item": {
                **item, "status": "in_progress", "arguments": ""}}))
            events.append(("response.function_call_arguments.delta", {**where, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done", {**where, "arguments": item["arguments"]}))
        events.append(("response.output_item.done", {"output_index": i, "item": item}))
    events.append(("response.completed", {"response": response}))
    return [_event(name, {"type": name, "sequence_number": n, **payload}) for n, (name, payload) in enumerate(events)]
