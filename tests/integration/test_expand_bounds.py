"""What Sieve holds back of its own sieve_expand round is bounded (issue 28: a hostile upstream
streaming sieve_expand arguments for 45 s held about 93 MB in one replica).

A round whose first telling event names Sieve's tool is read to its end, never relayed; past
1 MiB (``gateway.expand.MAX_HELD_BYTES``) it is cut: the client gets a 502 that
says so, no further round is asked, and the provider's connection is closed.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import orjson
import pytest

from gateway.expand import MAX_HELD_BYTES, TOOL_NAME
from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.conftest import format_settings
from tests.support import openai_client

MODEL = "gpt-4o-mini"
PRUNING = "strategy: window\nmin_prompt_tokens: 0\nmin_messages: 0\ntarget_tokens: 1500\nexpand_tool: true\n"


@pytest.fixture(scope="module")
def gateway(providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    folder = tmp_path_factory.mktemp("policies")
    (folder / "default.yaml").write_text(PRUNING)
    with GatewayServer(format_settings(providers_server, policies_dir=folder)) as gw:
        yield gw


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def hostile_round(megabytes: int) -> list[bytes]:
    """Sieve's tool named first, then its arguments streamed on and on."""
    start = chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_h", "type": "function",
                                                        "function": {"name": TOOL_NAME, "arguments": ""}}]})
    piece = chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x" * 64_000}}]})
    return [start, *[piece] * (megabytes * 16), chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def test_a_hostile_expand_round_is_cut_past_the_bound(gateway, providers) -> None:
    history = agent_history(12)
    providers.enqueue(Reply(content="ok"))
    openai_client(gateway, "sk-test", headers={"x-sieve-conversation-id": "hostile"}).chat.completions.create(
        model=MODEL, messages=history)
    assert providers.requests[-1].json["tools"][-1]["function"]["name"] == TOOL_NAME  # the tool is on
    asked = len(providers.requests)
    providers.enqueue(Reply(sse_frames=hostile_round(8)), Reply(content="a second round"))
    body = {"model": MODEL, "messages": [*history, {"role": "assistant", "content": "ok"},
                                         {"role": "user", "content": "and then?"}], "stream": True}
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"authorization": "Bearer sk-test", "x-sieve-conversation-id": "hostile"}) as answer:
        raw = answer.read()
    assert answer.status_code == 502, raw[:300]
    error = json.loads(raw)["error"]
    assert error["type"] == "upstream_error" and f"over {MAX_HELD_BYTES} bytes" in error["message"]
    assert len(providers.requests) == asked + 1  # no second round was asked with the junk
