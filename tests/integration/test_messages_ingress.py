"""Anthropic Messages through Sieve, end to end: the official ``anthropic`` SDK -> Sieve under uvicorn
-> a fake Anthropic provider (real HTTP, recording what it receives).

Every assertion is on what the provider actually got, or on what the client saw.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterator

import anthropic
import httpx
import pytest

from gateway.pruning.tokens import TokenCounters
from gateway.wire.formats.anthropic_messages import MessagesAdapter
from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.formats import MAX_BREAKPOINTS, chat_to_messages, messages_problems
from tests.support.gateway_server import GatewayServer
from tests.integration.conftest import format_settings
from tests.support import metric_value, read_jsonl

MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-client-key"
TOOLS = [{"name": "get_order_details", "description": "An order.", "input_schema": {"type": "object"}},
         {"name": "get_product_details", "description": "A product.", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def gateway(providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    with GatewayServer(format_settings(providers_server, audit_log=str(audit))) as gw:
        gw.audit_path = audit
        yield gw


def client(gw: GatewayServer, key: str = KEY, headers: dict[str, str] | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30,
                               default_headers=headers)


def history(steps: int) -> dict[str, Any]:
    """An agent loop in Anthropic's shape: thinking before each tool use (signed, never to be edited),
    parallel tool uses, results answered in the next user turn, and Claude Code's breakpoints (the
    system prompt, the tools, the last turn)."""
    body = chat_to_messages({"model": MODEL, "messages": agent_history(steps)})
    for k, turn in enumerate(body["messages"]):
        if turn["role"] == "assistant" and isinstance(turn["content"], list):
            thinking = {"type": "thinking", "thinking": f"Step {k}: look the order up first.",
                        "signature": f"sig-{k}-" + "A" * 40}
            turn["content"].insert(0, thinking)
    body["system"] = [{"type": "text", "text": body["system"], "cache_control": {"type": "ephemeral"}}]
    body["tools"] = copy.deepcopy(TOOLS)
    body["tools"][-1]["cache_control"] = {"type": "ephemeral"}
    last = body["messages"][-1]
    last["content"] = [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]
    # Claude Code also marks the turn before the last one.
    before = body["messages"][-3]
    if isinstance(before["content"], list):
        before["content"][-1]["cache_control"] = {"type": "ephemeral"}
    body["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    return body


def thinking_blocks(body: dict[str, Any]) -> list[str]:
    return [json.dumps(b, sort_keys=True) for t in body["messages"] if isinstance(t["content"], list)
            for b in t["content"] if b.get("type") in ("thinking", "redacted_thinking")]


def forwarded_tokens(body: dict[str, Any]) -> int:
    return TokenCounters().for_model("gpt-4o").count_text(json.dumps(body["messages"]))


# -- the route and its headers ---------------------------------------------------------------------

def test_create_forwards_the_body_and_the_anthropic_headers(gateway, providers):
    response = client(gateway, headers={"anthropic-beta": "prompt-caching-2024-07-31,interleaved-thinking"}) \
        .messages.with_raw_response.create(model=MODEL, max_tokens=256, metadata={"user_id": "u-1"},
                                           messages=[{"role": "user", "content": "hello"}],
                                           extra_body={"temperature": 0.3, "vendor_field": {"x": 1}})
    message = response.parse()
    assert message.content[0].text == "ok" and message.usage.output_tokens >= 1
    sent = providers.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.json == {"model": MODEL, "max_tokens": 256, "metadata": {"user_id": "u-1"}, "temperature": 0.3,
                         "messages": [{"role": "user", "content": "hello"}], "vendor_field": {"x": 1}}
    assert sent.headers["anthropic-version"] == response.http_request.headers["anthropic-version"]
    assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31,interleaved-thinking"
    assert sent.headers["authorization"] == f"Bearer {KEY}"  # open mode: the client's own key, as it came
    assert not any(name.startswith("x-sieve") for name in sent.headers)
    assert response.headers["x-sieve-request-id"].startswith("req_")
    assert int(response.headers["x-sieve-original-tokens"]) == int(response.headers["x-sieve-forwarded-tokens"]) > 0


def test_a_client_key_in_x_api_key_is_forwarded_in_x_api_key(gateway, providers):
    answer = httpx.post(gateway.base_url + "/v1/messages", timeout=30, headers={
        "x-api-key": KEY, "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200, answer.text
    sent = providers.requests[-1].headers
    assert sent["x-api-key"] == KEY and "authorization" not in sent
    assert sent["anthropic-version"] == "2023-06-01"


def test_virtual_key_in_x_api_key_and_the_configured_anthropic_key(providers_server):
    providers_server.clear()
    settings = format_settings(providers_server, anthropic_api_key="sk-ant-provider",
                               virtual_keys=({"key": "sk-sieve-acme", "org": "acme"},))
    with GatewayServer(settings) as gw:
        for headers in ({"x-api-key": "sk-sieve-acme"}, {"authorization": "Bearer sk-sieve-acme"}):
            answer = httpx.post(gw.base_url + "/v1/messages", timeout=30, headers={
                **headers, "anthropic-version": "2023-06-01"},
                json={"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200, answer.text
            sent = providers_server.requests[-1].headers
            assert sent["x-api-key"] == "sk-ant-provider" and "authorization" not in sent
        refused = anthropic.Anthropic(base_url=gw.base_url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            refused.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert caught.value.body["type"] == "error"
        assert caught.value.body["error"]["type"] == "authentication_error"


def test_count_tokens_is_passed_through(gateway, providers):
    counted = client(gateway).messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    assert counted.input_tokens > 0
    sent = providers.requests[-1]
    assert sent.path == "/v1/messages/count_tokens" and sent.json["messages"][0]["content"] == "hello"


# -- pruning in Anthropic's own shape --------------------------------------------------------------

def test_over_target_the_provider_gets_fewer_tokens_and_valid_turns(gateway, providers):
    body = history(14)
    original_thinking = thinking_blocks(body)
    message = client(gateway, headers={"x-sieve-target-tokens": "3000"}).messages.with_raw_response.create(**body)
    assert int(message.headers["x-sieve-saved-tokens"]) > 0
    sent = providers.requests[-1].json
    assert forwarded_tokens(sent) < forwarded_tokens(body)
    assert messages_problems(sent) == []  # no orphan tool_result, no unanswered tool_use, roles alternate
    kept = thinking_blocks(sent)
    assert kept and set(kept) <= set(original_thinking)  # byte-identical where kept, never edited
    assert sent["system"] == body["system"] and sent["thinking"] == body["thinking"]
    # The client's tools as sent, the default policy's sieve_expand after them.
    assert sent["tools"][:-1] == body["tools"] and sent["tools"][-1]["name"] == "sieve_expand"
    marks = json.dumps(sent).count('"cache_control"')
    assert 1 <= marks <= MAX_BREAKPOINTS
    assert sent["messages"][-1] == body["messages"][-1]  # the turn being answered, with its breakpoint


def test_parallel_tool_uses_and_their_results_stay_together(gateway, providers):
    body = history(10)  # the newest step (9) has parallel uses
    # Its breakpoints say the conversation goes on: the first decision goes to the low-water mark.
    client(gateway, headers={"x-sieve-target-tokens": "3000"}).messages.create(**body)
    sent = providers.requests[-1].json
    assert forwarded_tokens(sent) < forwarded_tokens(body)
    uses = {b["id"] for t in sent["messages"] if t["role"] == "assistant" and isinstance(t["content"], list)
            for b in t["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for t in sent["messages"] if isinstance(t["content"], list)
               for b in t["content"] if b["type"] == "tool_result"}
    assert uses == results and any(u.endswith("_1") for u in uses)  # parallel uses (call_k_1) kept with results


def test_the_forwarded_prefix_is_stable_between_epochs(gateway, providers):
    """Between two epochs, each turn (the last one, its answer and a new question) forwards the previous
    turn's pruned prefix byte for byte, its breakpoints where the client moved them."""
    body = history(12)
    steer = {"x-sieve-target-tokens": "4000", "x-sieve-conversation-id": "stable-prefix"}
    forwarded = []
    for step in range(3):
        client(gateway, headers=steer).messages.create(**body)
        forwarded.append(providers.requests[-1].json)
        assert messages_problems(forwarded[-1]) == []
        body = _next_turn(body, step)
    # The first turn over the target may start an epoch of its own; the two after it share its prefix.
    before, after = forwarded[1]["messages"], forwarded[2]["messages"]
    unmarked = [_without_breakpoints(t) for t in before[:-1]]
    assert [_without_breakpoints(t) for t in after[:len(before) - 1]] == unmarked
    assert after[:len(before) - 2] == before[:-2]  # the breakpoint on the turn before the last moved on


def _next_turn(body: dict[str, Any], step: int) -> dict[str, Any]:
    """What Claude Code sends next: the answer and a new question, its last breakpoint moved onto it."""
    following = copy.deepcopy(body)
    for turn in following["messages"]:
        if isinstance(turn["content"], list):
            for block in turn["content"]:
                block.pop("cache_control", None)
    following["messages"] += [{"role": "assistant", "content": f"Order {step} checked."},
                              {"role": "user", "content": [{"type": "text", "text": f"And order {step + 1}?",
                                                            "cache_control": {"type": "ephemeral"}}]}]
    return following


def _without_breakpoints(turn: dict[str, Any]) -> str:
    if isinstance(turn["content"], list):
        turn = {**turn, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in turn["content"]]}
    return json.dumps(turn, sort_keys=True)


def test_tool_use_answer_comes_back_to_the_client(gateway, providers):
    providers.enqueue(Reply(tool_calls=[{"id": "call_a", "function": {"name": "get_order_details",
                                                                      "arguments": '{"order_id": "#W1"}'}},
                                        {"id": "call_b", "function": {"name": "get_product_details",
                                                                      "arguments": '{"id": 7}'}}]))
    message = client(gateway).messages.create(model=MODEL, max_tokens=128, tools=TOOLS,
                                              messages=[{"role": "user", "content": "look up #W1"}])
    assert [b.type for b in message.content] == ["tool_use", "tool_use"]
    assert message.content[0].input == {"order_id": "#W1"} and message.stop_reason == "tool_use"


# -- streams ----------------------------------------------------------------------------------------

def test_stream_relays_events_and_usage_is_read_on_the_way(gateway, providers):
    usage = {"input_tokens": 40, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000,
             "output_tokens": 17}
    providers.enqueue(Reply(chunks=["Hel", "lo", " there"], usage=usage))
    gateway.wait_idle()  # earlier requests' accounting done first: a stable baseline
    before = metric_value(gateway.metrics, "sieve_completion_tokens_total", org="anonymous", model=MODEL)
    with client(gateway).messages.stream(model=MODEL, max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}]) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == "Hello there" and final.usage.output_tokens == 17
    assert events[0] == "message_start" and "content_block_delta" in events and events[-1] == "message_stop"
    gateway.wait_idle()
    after = metric_value(gateway.metrics, "sieve_completion_tokens_total", org="anonymous", model=MODEL)
    assert after - before == 17


def test_a_broken_stream_ends_with_an_anthropic_error_event(gateway, providers):
    providers.enqueue(Reply(chunks=["a", "b", "c", "d"], drop_after=5))
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client(gateway).messages.stream(model=MODEL, max_tokens=64,
                                             messages=[{"role": "user", "content": "hi"}]) as stream:
            for _ in stream:
                pass
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "api_error"
    providers.enqueue(Reply(chunks=["a", "b"], drop_after=4))
    with httpx.stream("POST", gateway.base_url + "/v1/messages", timeout=30, headers={"x-api-key": KEY},
                      json={"model": MODEL, "max_tokens": 8, "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}) as raw:
        text = raw.read().decode()
    last = text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    assert json.loads(last.split("data: ", 1)[1])["error"]["code"] == "upstream_unavailable"


def test_errors_before_the_stream_have_anthropics_shape(gateway, providers):
    answer = httpx.post(gateway.base_url + "/v1/messages", timeout=30, headers={"x-api-key": KEY},
                        json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "bot", "content": "hi"}]})
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in body["error"]["message"]
    missing = httpx.post(gateway.base_url + "/v1/messages/nothing", timeout=30, headers={"x-api-key": KEY}, json={})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    providers.enqueue(Reply(status=529, json_body={"type": "error", "error": {"type": "overloaded_error",
                                                                             "message": "Overloaded"}}))
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(gateway).messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 529 and caught.value.body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status,page,content_type,says", [
    (503, b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>",
     "text/html; charset=utf-8", "503 Service Temporarily Unavailable"),
    (500, b"upstream connect error or disconnect/reset before headers", "text/plain", "upstream connect error"),
])
def test_a_non_json_provider_error_reaches_the_sdk_in_anthropics_shape(gateway, providers, stream, status, page,
                                                                        content_type, says):
    """A proxy in front of the provider answers an HTML or plain-text page: the anthropic SDK (and
    Claude Code) parses only Anthropic's error shape, so the page is described in that shape,
    under the provider's status (which decides whether the client retries) and its retry-after."""
    providers.enqueue(Reply(status=status, raw_body=page, content_type=content_type, headers={"retry-after": "30"}))
    gateway.wait_idle()  # earlier requests' accounting done first: a stable baseline
    seen = metric_value(gateway.metrics, "sieve_requests_total", org="anonymous", model=MODEL,
                        outcome="upstream_error")
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.APIStatusError) as caught:
        if stream:
            with client(gateway).messages.stream(model=MODEL, max_tokens=8, messages=messages) as events:
                for _ in events:
                    pass
        else:
            client(gateway).messages.create(model=MODEL, max_tokens=8, messages=messages)
    error = caught.value
    assert isinstance(error, anthropic.InternalServerError) and error.status_code == status
    assert error.response.headers["retry-after"] == "30"
    assert error.response.headers["content-type"].startswith("application/json")
    assert error.body["type"] == "error" and error.body["error"]["type"] == "api_error"
    assert error.body["error"]["code"] == "upstream_error_body"
    assert f"upstream answered {status} with a non-JSON body ({content_type}" in error.body["error"]["message"]
    assert says in error.body["error"]["message"]
    gateway.wait_idle()
    assert metric_value(gateway.metrics, "sieve_requests_total", org="anonymous", model=MODEL,
                        outcome="upstream_error") == seen + 1


def test_the_audit_line_names_the_request(gateway, providers):
    response = client(gateway).messages.with_raw_response.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "audited"}])
    gateway.wait_idle()
    lines = [line for line in read_jsonl(gateway.audit_path)
             if line["request_id"] == response.headers["x-sieve-request-id"]]
    assert len(lines) == 1 and lines[0]["model"] == MODEL and lines[0]["outcome"] == "passthrough"


def test_a_bug_writing_the_pruned_body_back_forwards_it_as_sent(gateway, providers, monkeypatch):
    """Fail-open: the adapter's write raising (a bug, injected here) costs the pruning, not the request."""
    def broken(self, body, view, result):
        raise RuntimeError("injected bug")

    monkeypatch.setattr(MessagesAdapter, "write", broken)
    body = history(10)
    gateway.wait_idle()  # earlier requests' accounting done first: a stable baseline
    before = metric_value(gateway.metrics, "sieve_fail_open_total", reason="pruning_error")
    response = client(gateway, headers={"x-sieve-target-tokens": "2000"}).messages.with_raw_response.create(**body)
    assert response.parse().content[0].text == "ok"
    assert providers.requests[-1].json == json.loads(json.dumps(body))
    assert response.headers["x-sieve-saved-tokens"] == "0"
    assert metric_value(gateway.metrics, "sieve_fail_open_total", reason="pruning_error") == before + 1
