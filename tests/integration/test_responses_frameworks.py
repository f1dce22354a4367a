"""Frameworks over the Responses API, pointed at Sieve, as their users run them: LangChain's
``ChatOpenAI(use_responses_api=True)`` with a tool, and openai-agents' ``Agent`` + ``Runner``
(Responses is its default model), against the fake provider (real HTTP)."""

from __future__ import annotations

from typing import Iterator

import langchain_openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from tests.support.fake_providers import FakeProviders, Reply
from tests.support.gateway_server import GatewayServer
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


# -- openai-agents: Agent + Runner over the Responses API (its default model) ----------------------

def test_openai_agents_runs_a_tool_loop_through_sieve_and_sieve_prunes(gateway, providers):
    """An openai-agents app as its users write it (an ``Agent`` with a function tool, ``Runner``),
    its client pointed at Sieve with a target: the run finishes, every tool call reaches the tool
    and its output the model, and the later requests reach the provider pruned."""
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install -e '.[test]')")
    from openai import AsyncOpenAI

    calls: list[int] = []
    outputs: list[str] = []

    @agents.function_tool
    def read_log(part: int) -> str:
        """One part of the failing build's log."""
        calls.append(part)
        outputs.append(f"log part {part}: job-{4100 + part} failed\n" + f"step {part} compiling module m{part}\n" * 60)
        return outputs[-1]

    steps = 6
    providers.enqueue(*[Reply(tool_calls=[{"id": f"call_{k}", "function": {
        "name": "read_log", "arguments": f'{{"part": {k}}}'}}]) for k in range(steps)],
        Reply(content="The build fails in job-4105."))
    client = AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key="sk-agents", max_retries=0, timeout=30,
                         default_headers={"x-sieve-target-tokens": "1200"})
    agent = agents.Agent(name="triage", instructions="Find why the build fails. Read the log part by part.",
                         tools=[read_log], model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client))
    result = agents.Runner.run_sync(agent, "Why does the build fail?", max_turns=steps + 2,
                                    run_config=agents.RunConfig(tracing_disabled=True))
    assert result.final_output == "The build fails in job-4105."
    assert calls == list(range(steps))
    sent = [r.json for r in providers.requests if r.path == "/v1/responses"]
    assert len(sent) == steps + 1
    last = sent[-1]["input"]
    called = {i["call_id"] for i in last if i.get("type") == "function_call"}
    answered = {i["call_id"] for i in last if i.get("type") == "function_call_output"}
    assert called == answered and f"call_{steps - 1}" in answered  # no orphan; the newest result kept
    returned = sum(len(o) for o in outputs)
    assert len(str(last)) < returned / 2  # the history reached the provider pruned, not whole
    assert "[sieve:" in str(last)  # a masked output or an omission marker stands for what went
