"""A fake scorer model: the fake OpenAI server, answering each scoring batch by a function.

Concurrent batches arrive in any order, so a queue of scripted replies cannot
say which batch gets which answer; a responder sees the batch's unit ids
(parsed from the prompt) and how often this exact batch was asked before::

    def respond(ids, attempt, request_json):
        return Reply(content=answer({i: 5 if i == 7 else 1 for i in ids}))

    with ScorerModel(respond) as model:
        ...policy scorer_api_base = model.base_url...
        model.batches()    # [[3, 4, 5], [6, 7, 8]]: ids of every scoring request received
"""

from __future__ import annotations

import asyncio
import collections
import re
from typing import Any, Callable

import orjson
from aiohttp import web

from tests.support.fake_upstream import FakeUpstream, Reply, estimate_prompt_tokens, fault_response

Responder = Callable[[list[int], int, dict], Reply]
_UNIT_LINE = re.compile(r"^\[(\d+)\] \(", re.MULTILINE)


def batch_ids(request_json: Any) -> list[int]:
    """Unit ids of a scoring request, in prompt order."""
    if not isinstance(request_json, dict):
        return []
    user = next((m.get("content") for m in request_json.get("messages") or ()
                 if isinstance(m, dict) and m.get("role") == "user"), "") or ""
    _, _, listed = user.partition("MESSAGES TO SCORE:\n")
    return [int(x) for x in _UNIT_LINE.findall(listed)]


def answer(scores: dict[int, Any], reason: str = "fake") -> str:
    """The documented output shape: {"scores": [{"id", "score", "reason"}, ...]}."""
    return orjson.dumps({"scores": [{"id": i, "score": s, "reason": reason} for i, s in scores.items()]}).decode()


class ScorerModel(FakeUpstream):
    def __init__(self, responder: Responder | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.responder = responder
        self._attempts: collections.Counter = collections.Counter()

    def clear(self) -> None:
        super().clear()
        with self._lock:
            self._attempts.clear()

    def batches(self) -> list[list[int]]:
        with self._lock:
            return [batch_ids(r.json) for r in self.requests if r.path.endswith("/chat/completions")]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.responder is None:
            return await super()._chat(request)
        _, req = await self._record(request)
        ids = batch_ids(req)
        with self._lock:
            attempt = self._attempts[tuple(ids)]
            self._attempts[tuple(ids)] += 1
        reply = self.responder(ids, attempt, req)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.drop_connection:
            request.transport.close()  # type: ignore[union-attr]
            return web.Response(status=500)  # never reaches the gateway
        faulty = await fault_response(request, reply)  # raw bodies: garbage, HTML, a stalled answer
        if faulty is not None:
            return faulty
        if reply.status != 200 or reply.json_body is not None:
            body = reply.json_body or {"error": {"message": "fake scorer error", "type": "server_error",
                                                 "param": None, "code": None}}
            return web.Response(status=reply.status, body=orjson.dumps(body), content_type="application/json")
        content = reply.content or ""
        pt = estimate_prompt_tokens(req.get("messages"))
        ct = max(1, len(content) // 4)
        body = {"id": "chatcmpl-scorer", "object": "chat.completion", "created": 0, "model": req.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": reply.usage or {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}
        return web.Response(body=orjson.dumps(body), content_type="application/json")
