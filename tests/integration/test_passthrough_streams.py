"""A stream relayed on a pass-through route (a stored response read with ``stream=true``)
ends the way a forwarded one does: a provider stream that closes before the format's end
(``response.completed``) ends with Responses' own ``response.failed``, so the client
knows the answer is incomplete. Before: the pass-through relay had a loop of its own that
ended such a stream as if it were whole.

The provider is a real HTTP server (aiohttp, on 127.0.0.1) that streams a stored response
and closes the connection cleanly (chunked framing ended) after the first delta.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import orjson
import pytest
from aiohttp import web

from gateway.config.settings import Settings
from tests.support.gateway_server import GatewayServer
from tests.support.threaded_server import ThreadedServer

RESPONSE = {"id": "resp_elsewhere_01", "object": "response", "status": "in_progress", "model": "gpt-5", "output": []}


def event(kind: str, sequence: int, **fields) -> bytes:
    return f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, "sequence_number": sequence,
                                                                   **fields}) + b"\n\n"


CREATED = event("response.created", 0, response=RESPONSE)
DELTA = event("response.output_text.delta", 1, item_id="msg_1", output_index=0, content_index=0, delta="Hel")
COMPLETED = event("response.completed", 2, response={**RESPONSE, "status": "completed",
                                                     "usage": {"input_tokens": 5, "output_tokens": 1,
                                                               "total_tokens": 6}})


class StoredStreamProvider(ThreadedServer):
    """Serves ``GET /v1/responses/{id}?stream=true``: whole, or cut cleanly after a delta."""

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/responses/{rid}", self._stream)
        return app

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        frames = [CREATED, DELTA] + ([COMPLETED] if request.match_info["rid"].endswith("whole") else [])
        for frame in frames:
            await response.write(frame)
        await response.write_eof()  # a clean close: only the missing end event tells
        return response

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


@pytest.fixture(scope="module")
def gw(tmp_path_factory) -> Iterator[GatewayServer]:
    policies = tmp_path_factory.mktemp("policies")
    (policies / "default.yaml").write_text("allow_unmanaged_response_ids: true\n")
    with StoredStreamProvider() as provider, \
            GatewayServer(Settings(upstream_base_url=provider.base_url, upstream_api_key="sk-provider",
                                   policies_dir=policies)) as server:
        yield server


def events(raw: bytes) -> list[dict]:
    return [orjson.loads(e.split(b"data: ", 1)[1]) for e in raw.split(b"\n\n") if b"data: " in e]


def read_stream(gw: GatewayServer, rid: str) -> tuple[int, bytes]:
    with httpx.stream("GET", f"{gw.base_url}/v1/responses/{rid}", params={"stream": "true"},
                      headers={"authorization": "Bearer sk-client"}, timeout=10) as answer:
        return answer.status_code, answer.read()


def test_a_stored_stream_cut_before_its_end_ends_with_response_failed(gw) -> None:
    status, raw = read_stream(gw, "resp_elsewhere_cut")
    assert status == 200
    got = events(raw)
    assert [e["type"] for e in got] == ["response.created", "response.output_text.delta", "response.failed"]
    failed = got[-1]
    assert failed["sequence_number"] == 2 and failed["response"]["status"] == "failed"
    assert "incomplete" in failed["response"]["error"]["message"]


def test_a_whole_stored_stream_is_relayed_byte_for_byte(gw) -> None:
    status, raw = read_stream(gw, "resp_elsewhere_whole")
    assert status == 200 and raw == CREATED + DELTA + COMPLETED
