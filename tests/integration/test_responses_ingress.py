"""OpenAI Responses through Sieve, end to end: the official ``openai`` SDK -> Sieve under uvicorn -> a fake
OpenAI provider (real HTTP, recording what it receives).

Every assertion is on what the provider actually got, or on what the client saw.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import openai
import pytest

from gateway.pruning.tokens import TokenCounters
from gateway.expand import RESPONSES_TOOL
from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.formats import chat_to_responses, responses_problems
from tests.support.gateway_server import GatewayServer
from tests.integration.conftest import format_settings
from tests.support import metric_value, openai_client, read_jsonl

MODEL = "gpt-5"
KEY = "sk-openai-client-key"


@pytest.fixture(scope="module")
def gateway(providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    with GatewayServer(format_settings(providers_server, audit_log=str(audit))) as gw:
        gw.audit_path = audit
        yield gw


def client(gw: GatewayServer, headers: dict[str, str] | None = None) -> openai.OpenAI:
    return openai_client(gw, KEY, headers=headers)


def history(steps: int) -> dict[str, Any]:
    """A Codex-like loop: instructions, then items; a reasoning item (encrypted, never to be edited)
    before each step's function calls."""
    body = chat_to_responses({"model": MODEL, "messages": agent_history(steps)})
    items: list[dict[str, Any]] = []
    for item in body["input"]:
        if item["type"] == "function_call" and (not items or items[-1]["type"] != "function_call"):
            n = len(items)
            items.append({"type": "reasoning", "id": f"rs_{n}", "summary": [],
                          "encrypted_content": f"gAAAA{n}" + "Q" * 60})
        items.append(item)
    body["input"] = items
    body.update(prompt_cache_key="codex-session-1", store=False, include=["reasoning.encrypted_content"],
                reasoning={"effort": "medium", "summary": "auto"})
    return body


def tokens_of(body: dict[str, Any]) -> int:
    return TokenCounters().for_model("gpt-4o").count_text(json.dumps(body["input"]))


def reasoning_items(body: dict[str, Any]) -> list[str]:
    return [json.dumps(i, sort_keys=True) for i in body["input"] if i.get("type") == "reasoning"]


# -- the route and its fields ----------------------------------------------------------------------

def test_create_passes_fields_and_the_session_header_through(gateway, providers):
    response = client(gateway).responses.with_raw_response.create(
        model=MODEL, input="hello", instructions="Be brief.", prompt_cache_key="k-1", store=False,
        include=["reasoning.encrypted_content"], reasoning={"effort": "low"},
        extra_body={"vendor_field": {"x": 1}}, extra_headers={"session-id": "sess-42"})
    parsed = response.parse()
    assert parsed.output_text == "ok" and parsed.usage.output_tokens >= 1
    sent = providers.requests[-1]
    assert sent.path == "/v1/responses"
    # A conversation's first request that says more follow (a prompt_cache_key) carries Sieve's
    # sieve_expand tool from the start: tools stay the same for the conversation's whole life.
    assert sent.json == {"model": MODEL, "input": "hello", "instructions": "Be brief.", "prompt_cache_key": "k-1",
                         "store": False, "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "low"},
                         "vendor_field": {"x": 1}, "tools": [RESPONSES_TOOL]}
    assert sent.headers["session-id"] == "sess-42"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert not any(name.startswith("x-sieve") for name in sent.headers)
    assert int(response.headers["x-sieve-original-tokens"]) == int(response.headers["x-sieve-forwarded-tokens"]) > 0


def test_function_calls_come_back_to_the_client(gateway, providers):
    providers.enqueue(Reply(tool_calls=[{"id": "call_a", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}},
                                        {"id": "call_b", "function": {"name": "shell", "arguments": '{"cmd": "pwd"}'}}]))
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    response = client(gateway).responses.create(model=MODEL, input="list files", tools=tools)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.call_id, c.arguments) for c in calls] == [("call_a", '{"cmd": "ls"}'), ("call_b", '{"cmd": "pwd"}')]
    answered = client(gateway).responses.create(model=MODEL, tools=tools, input=[
        {"role": "user", "content": "list files"},
        *[{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls],
        *[{"type": "function_call_output", "call_id": c.call_id, "output": "a.txt"} for c in calls]])
    assert answered.output_text == "ok"
    assert [i.get("type") for i in providers.requests[-1].json["input"]][-2:] == ["function_call_output"] * 2


# -- pruning in the Responses shape -----------------------------------------------------------------

def test_over_target_the_provider_gets_fewer_tokens_and_whole_calls(gateway, providers):
    body = history(14)
    response = client(gateway, {"x-sieve-target-tokens": "3000"}).responses.with_raw_response.create(**body)
    assert int(response.headers["x-sieve-saved-tokens"]) > 0
    sent = providers.requests[-1].json
    assert tokens_of(sent) < tokens_of(body)
    assert responses_problems(sent) == []  # no function_call_output without its call, no call without output
    kept = reasoning_items(sent)
    assert kept and set(kept) <= set(reasoning_items(body))  # byte-identical, never edited
    for i, item in enumerate(sent["input"]):
        if item["type"] == "reasoning":  # kept with the call it precedes
            assert sent["input"][i + 1]["type"] == "function_call"
    for name in ("instructions", "prompt_cache_key", "store", "include", "reasoning"):
        assert sent[name] == body[name]


def test_previous_response_id_is_forwarded_unpruned(gateway, providers):
    body = history(14)
    body["previous_response_id"] = client(gateway).responses.create(model=MODEL, input="start").id  # relayed by Sieve
    response = client(gateway, {"x-sieve-target-tokens": "500"}).responses.with_raw_response.create(**body)
    assert providers.requests[-1].json == json.loads(json.dumps(body))
    assert response.headers["x-sieve-saved-tokens"] == "0"
    gateway.wait_idle()
    line = next(line for line in read_jsonl(gateway.audit_path)
                if line["request_id"] == response.headers["x-sieve-request-id"])
    assert line["outcome"] == "passthrough" and line["strategy"] == "none"
    assert {d["reason"] for d in line["decisions"]} == {"previous_response_id: the history is kept at the provider"}


def test_the_forwarded_prefix_is_stable_between_epochs(gateway, providers):
    body = history(12)
    steer = {"x-sieve-target-tokens": "4000", "x-sieve-conversation-id": "responses-prefix"}
    forwarded = []
    for step in range(3):
        client(gateway, steer).responses.create(**body)
        forwarded.append(providers.requests[-1].json["input"])
        body = {**body, "input": body["input"] + [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"done {step}"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"next {step}"}]}]}
    before, after = forwarded[1], forwarded[2]
    assert after[:len(before)] == before


# -- streams ----------------------------------------------------------------------------------------

def test_stream_relays_events_and_usage_is_read_on_the_way(gateway, providers):
    usage = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 800}, "output_tokens": 23,
             "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 923}
    providers.enqueue(Reply(chunks=["Hel", "lo"], usage=usage))
    gateway.wait_idle()  # earlier requests' accounting done first: a stable baseline
    before = metric_value(gateway.metrics, "sieve_completion_tokens_total", org="anonymous", model=MODEL)
    events = list(client(gateway).responses.create(model=MODEL, input="hi", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    gateway.wait_idle()
    assert metric_value(gateway.metrics, "sieve_completion_tokens_total", org="anonymous", model=MODEL) - before == 23


def test_stream_helper_and_function_calls(gateway, providers):
    providers.enqueue(Reply(tool_calls=[{"id": "call_s", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}]))
    with client(gateway).responses.stream(model=MODEL, input="run ls",
                                          tools=[{"type": "function", "name": "shell",
                                                  "parameters": {"type": "object"}}]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output[0].type == "function_call" and final.output[0].arguments == '{"cmd": "ls"}'


def test_a_broken_stream_ends_with_response_failed(gateway, providers):
    providers.enqueue(Reply(chunks=["a", "b", "c", "d"], drop_after=6))
    events = list(client(gateway).responses.create(model=MODEL, input="hi", stream=True))
    last = events[-1]
    assert last.type == "response.failed" and last.response.status == "failed"
    assert last.response.error.code == "upstream_unavailable"
    assert last.sequence_number == events[-2].sequence_number + 1
    providers.enqueue(Reply(drop_after=0))  # broken before the response was announced
    with httpx.stream("POST", gateway.base_url + "/v1/responses", timeout=30, headers={"authorization": f"Bearer {KEY}"},
                      json={"model": MODEL, "input": "hi", "stream": True}) as raw:
        text = raw.read().decode()
    assert text.startswith("event: error\ndata: ")
    assert json.loads(text.split("data: ", 1)[1])["code"] == "upstream_unavailable"


def test_errors_before_the_stream_have_openais_shape(gateway, providers):
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway).responses.create(model=MODEL, input=[{"type": "function_call_output", "output": "x"}])
    assert caught.value.body["type"] == "invalid_request_error" and caught.value.body["param"]
    providers.enqueue(Reply(status=429, json_body={"error": {"message": "slow down", "type": "rate_limit",
                                                             "param": None, "code": None}}))
    with pytest.raises(openai.RateLimitError):
        client(gateway).responses.create(model=MODEL, input="hi")


# -- passed through ---------------------------------------------------------------------------------

def test_stored_responses_input_items_and_compact_are_passed_through(gateway, providers):
    llm = client(gateway)
    rid = llm.responses.create(model=MODEL, input="keep me").id  # a stored response Sieve relayed
    assert llm.responses.retrieve(rid).id == rid
    assert (providers.requests[-1].method, providers.requests[-1].path) == ("GET", f"/v1/responses/{rid}")
    items = llm.responses.input_items.list(rid, limit=5, order="asc")
    assert items.data[0].id == "msg_in"
    assert providers.requests[-1].path == f"/v1/responses/{rid}/input_items"
    listed = gateway.get(f"/v1/responses/{rid}/input_items?limit=5&order=asc", headers={"authorization": f"Bearer {KEY}"})
    assert listed.json()["query"] == "limit=5&order=asc"  # the query string as sent
    assert llm.responses.input_tokens.count(model=MODEL, input="count me").input_tokens > 0
    assert providers.requests[-1].path == "/v1/responses/input_tokens"
    assert llm.responses.cancel(rid).status == "cancelled"
    assert (providers.requests[-1].method, providers.requests[-1].path) == ("POST", f"/v1/responses/{rid}/cancel")
    llm.responses.delete(rid)
    assert (providers.requests[-1].method, providers.requests[-1].path) == ("DELETE", f"/v1/responses/{rid}")
    with pytest.raises(openai.NotFoundError):  # deleted by its owner: gone from the registry too
        llm.responses.retrieve(rid)
    compacted = gateway.post("/v1/responses/compact", headers={"authorization": f"Bearer {KEY}"},
                             json={"model": MODEL, "input": [{"role": "user", "content": "long"}]})
    assert compacted.status_code == 200 and compacted.json()["object"] == "response.compaction"
    assert compacted.headers["x-sieve-request-id"].startswith("req_")
    assert providers.requests[-1].path == "/v1/responses/compact"
    assert providers.requests[-1].headers["authorization"] == f"Bearer {KEY}"
