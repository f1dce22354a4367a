"""A framework over the Responses API, pointed at Sieve, as its users run it: LangChain's
``ChatOpenAI(use_responses_api=True)`` with a tool, against the fake provider (real HTTP)."""

from __future__ import annotations

from typing import Iterator

import langchain_openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from tests.fake_providers import FakeProviders, Reply
from tests.gateway_server import GatewayServer
from tests.integration.conftest import format_settings

MODEL = "gpt-5"


@pytest.fixture(scope="module")
def gateway(providers_server: FakeProviders) -> Iterator[GatewayServer]:
    with GatewayServer(format_settings(providers_server)) as gw:
        yield gw


@tool
def order_status(order_id: str) -> str:
    """The status of an order."""
    return f"order {order_id}: delivered"


def chat_model(gw: GatewayServer, **kwargs) -> langchain_openai.ChatOpenAI:
    return langchain_openai.ChatOpenAI(model=MODEL, base_url=gw.base_url + "/v1", api_key="sk-lc", max_retries=0,
                                       use_responses_api=True, timeout=30, **kwargs)


def test_langchain_tool_loop_over_the_responses_api(gateway, providers):
    providers.enqueue(Reply(tool_calls=[{"id": "call_1", "function": {"name": "order_status",
                                                                      "arguments": '{"order_id": "W1"}'}}]),
                      Reply(content="Order W1 was delivered."))
    llm = chat_model(gateway).bind_tools([order_status])
    history = [HumanMessage("Where is order W1?")]
    first = llm.invoke(history)
    assert first.tool_calls[0]["name"] == "order_status" and first.tool_calls[0]["args"] == {"order_id": "W1"}
    history += [first, ToolMessage(order_status.invoke(first.tool_calls[0]["args"]), tool_call_id="call_1")]
    final = llm.invoke(history)
    assert final.text == "Order W1 was delivered."
    sent = [r for r in providers.requests if r.path == "/v1/responses"]
    assert len(sent) == 2
    items = sent[-1].json["input"]
    calls = [i for i in items if i.get("type") == "function_call"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs] == ["call_1"]
    assert outputs[0]["output"] == "order W1: delivered"


def test_langchain_streams_over_the_responses_api(gateway, providers):
    providers.enqueue(Reply(chunks=["Deliv", "ered."]))
    pieces = list(chat_model(gateway, streaming=True).stream("status?"))
    assert "".join(p.text for p in pieces) == "Delivered."
    assert providers.requests[-1].json["stream"] is True
