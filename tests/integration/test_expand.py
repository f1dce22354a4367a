"""Reversible pruning through the real gateway: the model calls ``sieve_expand`` with a ref from a
marker, Sieve answers it from the client's history and asks the fake provider again; the client
gets the final answer only, budgets and savings count every round, and the exchange stays pinned
in the conversation's later requests.

The fake provider is a real aiohttp server (tests.support.fake_providers) scripted with the tool call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import anthropic
import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.expand import NOT_AVAILABLE, TOOL_NAME
from gateway.pruning import ref_of, span_ref
from gateway.pruning.messages import fingerprint
from gateway.telemetry.pricing import PriceBook, load_litellm_model_cost, price_usage
from gateway.telemetry.usage import usage_from_provider
from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.formats import chat_to_messages, chat_to_responses
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, admin_headers, org_counter
from tests.integration.conftest import format_settings
from tests.support import openai_client, read_jsonl

MODEL = "gpt-4o-mini"
PRUNING = "strategy: window\nmin_prompt_tokens: 0\nmin_messages: 0\ntarget_tokens: 1500\n"
KEYS = ({"key": "sk-expand", "org": "expand"}, {"key": "sk-plain", "org": "plain"},
        {"key": "sk-lean", "org": "lean"})
LEAN_DAY = 5_500  # one round of the requests below fits (reserved ~4,600), two do not
BUDGETS = {"orgs": {"expand": {"day": 10_000_000}, "plain": {"day": 10_000_000}, "lean": {"day": LEAN_DAY}}}
ROUND_1 = {"prompt_tokens": 1500, "completion_tokens": 20, "total_tokens": 1520}
ROUND_2 = {"prompt_tokens": 2600, "completion_tokens": 40, "total_tokens": 2640}
ROUND_3 = {"prompt_tokens": 3100, "completion_tokens": 30, "total_tokens": 3130}
REF = re.compile(r"ref ([0-9a-f]{8})")


@pytest.fixture(scope="module")
def gateway(providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    folder = tmp_path_factory.mktemp("policies")
    (folder / "default.yaml").write_text(PRUNING + "expand_tool: false\n")  # org "plain": the tool off
    (folder / "expand.yaml").write_text(PRUNING + "expand_tool: true\nexpand_max_rounds: 2\n")
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    settings = format_settings(providers_server, policies_dir=folder, org_policies={"expand": "expand", "lean": "expand"},
                               admin_key=ADMIN_KEY, budgets=BUDGETS, virtual_keys=KEYS, audit_log=str(audit))
    with GatewayServer(settings) as gw:
        gw.audit_path = audit
        yield gw


def metric(gw: GatewayServer, name: str, **labels: str) -> float:
    gw.wait_idle()
    text = httpx.get(gw.base_url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def day_used(gw: GatewayServer, org: str) -> int:
    gw.wait_idle()
    response = gw.get(f"/admin/usage/{org}", headers=admin_headers())
    assert response.status_code == 200, response.text
    return int(org_counter(response.json()["counters"], f"org:{org}:day")["used"])


def expand_call(ref: str, call_id: str = "call_sieve_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"refs": [ref]})}}


def omission_ref(forwarded: dict[str, Any], history: list[dict[str, Any]]) -> tuple[str, list[dict]]:
    """The ref an omission marker of the forwarded body names, and the original message it starts at."""
    for m in forwarded["messages"]:
        content = m.get("content")
        if isinstance(content, str) and content.startswith("[sieve: some earlier messages omitted"):
            ref = REF.search(content).group(1)
            return ref, [h for j, h in enumerate(history) if span_ref(fingerprint(h), j) == ref]
    raise AssertionError("no omission marker forwarded")


def first_round(gw: GatewayServer, providers: FakeProviders, conversation: str,
                history: list[dict[str, Any]]) -> tuple[str, dict]:
    """A pruned request (plain answer); the ref of its omission marker and the original it starts at."""
    providers.enqueue(Reply(content="ok"))
    openai_client(gw, "sk-expand", headers={"x-sieve-conversation-id": conversation}).chat.completions.create(
        model=MODEL, messages=history)
    forwarded = providers.requests[-1].json
    assert forwarded["tools"][-1]["function"]["name"] == TOOL_NAME
    ref, originals = omission_ref(forwarded, history)
    assert len(originals) == 1
    return ref, originals[0]


def continued(history: list[dict[str, Any]], *turns: str) -> list[dict[str, Any]]:
    out = list(history)
    for answer in turns:
        out += [{"role": "assistant", "content": answer}, {"role": "user", "content": "and then?"}]
    return out


def test_chat_expand_rounds_answer_from_the_history_and_the_client_sees_the_final_answer(gateway, providers):
    """The marker's ref names a span too long to show whole: its unit list comes back, the model
    asks for one unit by the ref the list names, and gets its original messages."""
    history = agent_history(12)
    ref, original = first_round(gateway, providers, "chat-json", history)
    assert original["role"] == "assistant" and original["tool_calls"]  # the span starts at a call
    unit = ref_of(fingerprint(original))
    used_before, expanded_before = day_used(gateway, "expand"), metric(gateway, "sieve_expand_total",
                                                                        outcome="expanded")
    n_before = len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call(ref)], usage=ROUND_1),
                      Reply(tool_calls=[expand_call(unit, "call_sieve_2")], usage=ROUND_2),
                      Reply(content="The lamp is sku 700001.", usage=ROUND_3))
    second = continued(history, "ok")
    answer = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-json"}) \
        .chat.completions.create(model=MODEL, messages=second)
    assert answer.choices[0].message.content == "The lamp is sku 700001."
    assert not answer.choices[0].message.tool_calls and answer.choices[0].finish_reason == "stop"
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 3
    assert asked[2]["messages"][:-2] == asked[1]["messages"] and asked[1]["messages"][:-2] == asked[0]["messages"]
    listing, result = asked[1]["messages"][-1], asked[2]["messages"][-1]
    assert asked[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == TOOL_NAME
    assert f"ref {unit}:" in listing["content"] and "notes lorem ipsum" not in listing["content"]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_sieve_2"
    # The original content of the unit: the call that started the span and its output.
    order_id = json.loads(original["tool_calls"][0]["function"]["arguments"])["order_id"]
    assert order_id in result["content"] and "notes lorem ipsum" in result["content"]
    lines = [line for line in result["content"].splitlines() if line.startswith("item ")]
    assert lines and not any(line in orjson.dumps(asked[0]).decode() for line in lines)  # left out, now back
    spent = ROUND_1["total_tokens"] + ROUND_2["total_tokens"] + ROUND_3["total_tokens"]
    assert day_used(gateway, "expand") - used_before == spent
    assert metric(gateway, "sieve_expand_total", outcome="expanded") == expanded_before + 2
    line = read_jsonl(gateway.audit_path)[-1]
    assert line["expand"] == {"refs": [ref, unit], "rounds": 2}
    price = PriceBook(load_litellm_model_cost()).lookup(MODEL)
    every = sum(price_usage(price, usage_from_provider(u)).total_usd for u in (ROUND_1, ROUND_2, ROUND_3))
    assert line["cost"]["actual_usd"] == pytest.approx(every, rel=1e-9)
    # The counterfactual is one unpruned request: the first round's prompt plus what was
    # removed, less Sieve's tool (the unpruned request would not carry it), with the final
    # answer's completion; the rounds' cost is netted out.
    # (its cached part is the conversation's previous request's prefix, as for any request).
    removed = line["tokens"]["original"] - line["tokens"]["forwarded"]
    cost = line["cost"]
    assert 90 < cost["sieve_tool_tokens"] < 130
    assert cost["counterfactual_prompt_tokens"] == ROUND_1["prompt_tokens"] + removed - cost["sieve_tool_tokens"]
    once = {"prompt_tokens": cost["counterfactual_prompt_tokens"], "completion_tokens": ROUND_3["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": cost["counterfactual_cached_tokens"]}}
    assert cost["counterfactual_usd"] == pytest.approx(price_usage(price, usage_from_provider(once)).total_usd,
                                                       rel=1e-9)
    assert cost["net_usd"] == pytest.approx(cost["counterfactual_usd"] - every, rel=1e-9)

    # Pinned, under the target: these exchanges (about 3,100 tokens of restored content) are
    # more than the room an epoch frees at this target (1,500 - 750), so the next request
    # leaves them out and holds its target (test_pinned_exchanges_go_back_within_the_target:
    # where they fit, they go back).
    providers.enqueue(Reply(content="done"))
    third = continued(history, "ok", "The lamp is sku 700001.")
    raw = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-json"}) \
        .chat.completions.with_raw_response.create(model=MODEL, messages=third)
    raw.parse()
    forwarded = providers.requests[-1].json["messages"]
    assert not any(m in forwarded for m in asked[2]["messages"][-4:])
    assert int(raw.headers["x-sieve-forwarded-tokens"]) == sum(gateway_counter().model_tokens(m) for m in forwarded)
    assert int(raw.headers["x-sieve-forwarded-tokens"]) <= 1_500


def test_unknown_ref_gets_not_available_and_a_policy_without_the_tool_forwards_none(gateway, providers):
    history = agent_history(12)
    first_round(gateway, providers, "chat-unknown", history)
    before = metric(gateway, "sieve_expand_total", outcome="not_available")
    n_before = len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call("deadbeef")]), Reply(content="fine"))
    answer = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-unknown"}) \
        .chat.completions.create(model=MODEL, messages=continued(history, "ok"))
    assert answer.choices[0].message.content == "fine"
    assert NOT_AVAILABLE in providers.requests[-1].json["messages"][-1]["content"]
    assert len(providers.requests) - n_before == 2
    assert metric(gateway, "sieve_expand_total", outcome="not_available") == before + 1

    providers.enqueue(Reply(content="ok"))
    openai_client(gateway, "sk-plain").chat.completions.create(model=MODEL, messages=history)
    plain = providers.requests[-1].json
    assert "tools" not in plain
    markers = [m["content"] for m in plain["messages"] if str(m.get("content")).startswith("[sieve: some")]
    assert markers and all("ref " not in m for m in markers)  # marker text as without the tool


def test_rounds_are_bounded_and_the_last_call_is_removed_from_the_answer(gateway, providers):
    history = agent_history(12)
    ref, _ = first_round(gateway, providers, "chat-limit", history)
    before = metric(gateway, "sieve_expand_total", outcome="limit")
    n_before = len(providers.requests)
    client_call = {"id": "call_client", "type": "function",
                   "function": {"name": "get_order_details", "arguments": "{}"}}
    providers.enqueue(*(Reply(tool_calls=[expand_call(ref, f"call_s{i}")]) for i in range(2)),
                      Reply(tool_calls=[expand_call(ref, "call_s9"), client_call]))
    answer = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-limit"}) \
        .chat.completions.create(model=MODEL, messages=continued(history, "ok"))
    assert len(providers.requests) - n_before == 3  # the first answer and two more rounds
    calls = answer.choices[0].message.tool_calls
    assert [c.id for c in calls] == ["call_client"] and answer.choices[0].finish_reason == "tool_calls"
    assert metric(gateway, "sieve_expand_total", outcome="limit") == before + 1


def test_no_budget_for_another_round_returns_the_answer_without_the_call(gateway, providers):
    history = agent_history(12)
    ref, _ = first_round(gateway, providers, "chat-budget", history)
    before = metric(gateway, "sieve_expand_total", outcome="budget")
    n_before = len(providers.requests)
    providers.enqueue(Reply(content="Checking.", tool_calls=[expand_call(ref)], usage=ROUND_1))
    answer = openai_client(gateway, "sk-lean", headers={"x-sieve-conversation-id": "chat-budget-lean"}) \
        .chat.completions.create(model=MODEL, messages=continued(history, "ok"), max_tokens=3000)
    assert answer.choices[0].message.content == "Checking." and not answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "stop"
    assert len(providers.requests) - n_before == 1
    assert metric(gateway, "sieve_expand_total", outcome="budget") == before + 1
    assert day_used(gateway, "lean") == ROUND_1["total_tokens"]  # the round answered, charged once


def test_a_round_without_usage_is_settled_at_its_estimate_not_as_junk(gateway, providers):
    history = agent_history(12)
    ref, _ = first_round(gateway, providers, "chat-no-usage", history)
    round_1 = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": MODEL, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [expand_call(ref)]},
         "finish_reason": "tool_calls"}]}
    junk_before = metric(gateway, "sieve_usage_anomalies_total", reason="junk")
    used_before = day_used(gateway, "expand")
    providers.enqueue(Reply(json_body=round_1), Reply(content="fine", usage=ROUND_2))
    raw = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-no-usage"}) \
        .chat.completions.with_raw_response.create(model=MODEL, messages=continued(history, "ok"))
    assert raw.parse().choices[0].message.content == "fine"
    estimate = int(raw.headers["x-sieve-forwarded-tokens"]) + len(orjson.dumps(round_1)) // 4
    assert day_used(gateway, "expand") - used_before == estimate + ROUND_2["total_tokens"]
    assert metric(gateway, "sieve_usage_anomalies_total", reason="junk") == junk_before


def test_chat_stream_holds_the_expand_round_and_relays_the_final_one(gateway, providers):
    history = agent_history(12)
    ref, original = first_round(gateway, providers, "chat-stream", history)
    used_before = day_used(gateway, "expand")
    n_before = len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call(ref)], usage=ROUND_1),
                      Reply(content="streamed final", chunks=["streamed ", "final"], usage=ROUND_2))
    client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-stream"})
    chunks = list(client.chat.completions.create(model=MODEL, messages=continued(history, "ok"), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed final"
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 2 and asked[1]["stream"] is True
    assert f"ref {ref_of(fingerprint(original))}:" in asked[1]["messages"][-1]["content"]  # the span's list
    assert day_used(gateway, "expand") - used_before == ROUND_1["total_tokens"] + ROUND_2["total_tokens"]
    assert read_jsonl(gateway.audit_path)[-1]["expand"] == {"refs": [ref], "rounds": 1}


def test_chat_stream_without_the_tool_call_is_relayed_as_it_came(gateway, providers):
    history = agent_history(12)
    first_round(gateway, providers, "chat-stream-plain", history)
    client_call = {"id": "call_client", "type": "function",
                   "function": {"name": "get_order_details", "arguments": "{\"order_id\": \"#W1\"}"}}
    providers.enqueue(Reply(tool_calls=[client_call]))
    client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-stream-plain"})
    n_before = len(providers.requests)
    chunks = list(client.chat.completions.create(model=MODEL, messages=continued(history, "ok"), stream=True))
    names = [tc.function.name for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()
             if tc.function and tc.function.name]
    assert names == ["get_order_details"] and len(providers.requests) - n_before == 1


# -- Anthropic Messages and OpenAI Responses ----------------------------------------------------------

CLAUDE = "claude-sonnet-4-5"
OMITTED_REF = re.compile(r"some earlier messages omitted, ref ([0-9a-f]{8})")
OMITTED_MARKER = re.compile(r"some earlier messages omitted, ref ([0-9a-f]{8})[^;\]]*; ids: ([^\]]+)\]")
MESSAGES_USAGE = ({"input_tokens": 1500, "output_tokens": 20, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0},
                  {"input_tokens": 2600, "output_tokens": 40, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0})
RESPONSES_USAGE = tuple({"input_tokens": u["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": u["total_tokens"]} for u in (ROUND_1, ROUND_2))


def claude_answer(gw: GatewayServer, body: dict[str, Any], conversation: str, stream: bool,
                  target: int | None = None) -> str:
    headers = {"x-sieve-conversation-id": conversation}
    if target is not None:
        headers["x-sieve-target-tokens"] = str(target)
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="sk-expand", max_retries=0, timeout=30,
                                 default_headers=headers)
    if stream:
        with client.messages.stream(**body) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**body)
    assert not any(b.type == "tool_use" for b in message.content)
    return "".join(b.text for b in message.content if b.type == "text")


def responses_answer(gw: GatewayServer, body: dict[str, Any], conversation: str, stream: bool,
                     target: int | None = None) -> str:
    headers = {"x-sieve-conversation-id": conversation}
    if target is not None:
        headers["x-sieve-target-tokens"] = str(target)
    client = openai_client(gw, "sk-expand", headers=headers)
    if stream:
        events = list(client.responses.create(**body, stream=True))
        assert not any(e.type == "response.output_item.added" and e.item.type == "function_call" for e in events)
        response = next(e.response for e in events if e.type == "response.completed")
    else:
        response = client.responses.create(**body)
    assert not any(item.type == "function_call" for item in response.output)
    assert not any(getattr(t, "name", None) == TOOL_NAME for t in response.tools)  # the echo too
    return response.output_text


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fmt", ["messages", "responses"])
def test_expand_round_in_messages_and_responses(gateway, providers, fmt, stream):
    chat = {"model": CLAUDE if fmt == "messages" else MODEL, "messages": agent_history(12)}
    body = chat_to_messages(chat) if fmt == "messages" else chat_to_responses(chat)
    if fmt == "messages":
        body["max_tokens"] = 500
    ask = claude_answer if fmt == "messages" else responses_answer
    conversation = f"{fmt}-{stream}"
    providers.enqueue(Reply(content="ok"))
    ask(gateway, body, conversation, stream)
    first = providers.requests[-1].json
    tool = first["tools"][-1]
    assert tool["name"] == TOOL_NAME
    marker = OMITTED_MARKER.search(orjson.dumps(first).decode())
    ref = marker.group(2).split()[0]  # an id the marker lists: the omitted units holding it come back
    used_before, n_before = day_used(gateway, "expand"), len(providers.requests)
    usages = MESSAGES_USAGE if fmt == "messages" else RESPONSES_USAGE
    providers.enqueue(Reply(tool_calls=[expand_call(ref)], usage=usages[0]),
                      Reply(content="final", chunks=["fi", "nal"], usage=usages[1]))
    assert ask(gateway, body, conversation, stream) == "final"
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 2
    restored = _last_tool_result(asked[1], fmt)
    assert f"ref {ref}:" in restored
    # Content the first forward left out is back, word for word.
    lines = [line for line in restored.splitlines() if line.startswith("item ")]
    assert lines and not any(line in orjson.dumps(first).decode() for line in lines)
    assert day_used(gateway, "expand") - used_before == ROUND_1["total_tokens"] + ROUND_2["total_tokens"]
    assert read_jsonl(gateway.audit_path)[-1]["expand"] == {"refs": [ref], "rounds": 1}

    # Pinned: the next request carries the exchange where it was made, before the final answer
    # (at a target whose epoch leaves it room: a new target, so a new decision).
    key = "messages" if fmt == "messages" else "input"
    exchange = asked[1][key][len(asked[0][key]):]
    answer = {"role": "assistant", "content": [{"type": "text", "text": "final"}]} if fmt == "messages" else \
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "final"}]}
    third = {**body, key: [*body[key], answer, {"role": "user", "content": "and then?"}]}
    providers.enqueue(Reply(content="done"))
    ask(gateway, third, conversation, stream, target=8_000)
    forwarded = providers.requests[-1].json[key]
    at = forwarded.index(answer)
    assert forwarded[at - len(exchange):at] == exchange and len(exchange) == 2
    # (A new decision rewrites what follows the frozen prefix, so only the exchange's place is
    # checked here; test_pinned_exchanges_go_back_within_the_target checks a frozen replay.)


def _last_tool_result(body: dict[str, Any], fmt: str) -> str:
    if fmt == "messages":
        block = body["messages"][-1]["content"][-1]
        assert block["type"] == "tool_result"
        return block["content"]
    item = body["input"][-1]
    assert item["type"] == "function_call_output"
    return item["output"]


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
def test_with_the_rounds_used_up_a_call_after_text_is_taken_out_of_the_stream(gateway, providers, fmt):
    """Text went out first and no round is left: the call is taken out of the relayed events."""
    chat = {"model": CLAUDE if fmt == "messages" else MODEL, "messages": agent_history(12)}
    body = chat if fmt == "chat" else chat_to_messages(chat) if fmt == "messages" else chat_to_responses(chat)
    if fmt == "messages":
        body["max_tokens"] = 500
    conversation = f"text-first-{fmt}"
    providers.enqueue(Reply(content="ok"))
    openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": conversation}).chat.completions.create(
        **chat) if fmt == "chat" else (claude_answer if fmt == "messages" else responses_answer)(
        gateway, body, conversation, False)
    ref = OMITTED_REF.search(orjson.dumps(providers.requests[-1].json).decode()).group(1)
    before, n_before = metric(gateway, "sieve_expand_total", outcome="unhandled"), len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call(ref, "call_s1")]), Reply(tool_calls=[expand_call(ref, "call_s2")]),
                      Reply(content="Let me look that up.", tool_calls=[expand_call(ref, "call_s3")]))
    if fmt == "chat":
        client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": conversation})
        chunks = list(client.chat.completions.create(**chat, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    else:
        text = (claude_answer if fmt == "messages" else responses_answer)(gateway, body, conversation, True)
    assert text == "Let me look that up."
    assert len(providers.requests) - n_before == 3  # the answer and the two rounds the policy allows
    assert metric(gateway, "sieve_expand_total", outcome="unhandled") == before + 1


def test_a_messages_stream_naming_the_tool_after_text_goes_on_with_the_next_round(gateway, providers):
    """Claude's habit: text, then the tool. The text went out; at the call Sieve reads the round
    to its end, answers it, and the next round's blocks follow in the same message."""
    body = chat_to_messages({"model": CLAUDE, "messages": agent_history(12)})
    body["max_tokens"] = 500
    providers.enqueue(Reply(content="ok"))
    claude_answer(gateway, body, "splice", False)
    marker = OMITTED_MARKER.search(orjson.dumps(providers.requests[-1].json).decode())
    some_id = marker.group(2).split()[0]
    used_before, n_before = day_used(gateway, "expand"), len(providers.requests)
    unhandled = metric(gateway, "sieve_expand_total", outcome="unhandled")
    providers.enqueue(Reply(content="Let me look that up. ", tool_calls=[expand_call(some_id)],
                            usage=MESSAGES_USAGE[0]),
                      Reply(content="It is sku 700001.", usage=MESSAGES_USAGE[1]))
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key="sk-expand", max_retries=0, timeout=30,
                                 default_headers={"x-sieve-conversation-id": "splice"})
    with client.messages.stream(**body) as events:
        message = events.get_final_message()
    assert [b.type for b in message.content] == ["text", "text"]
    assert "".join(b.text for b in message.content) == "Let me look that up. It is sku 700001."
    assert message.stop_reason == "end_turn"
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 2
    assert some_id in _last_tool_result(asked[1], "messages")
    assert day_used(gateway, "expand") - used_before == ROUND_1["total_tokens"] + ROUND_2["total_tokens"]
    assert metric(gateway, "sieve_expand_total", outcome="unhandled") == unhandled
    assert read_jsonl(gateway.audit_path)[-1]["expand"] == {"refs": [some_id], "rounds": 1}

    # Pinned like a round held back: the next request carries the exchange before the answer
    # the client got (a new target: a new decision, with room for it).
    exchange = asked[1]["messages"][len(asked[0]["messages"]):]
    answer = {"role": "assistant", "content": [{"type": "text", "text": b.text} for b in message.content]}
    third = {**body, "messages": [*body["messages"], answer, {"role": "user", "content": "and then?"}]}
    providers.enqueue(Reply(content="done"))
    claude_answer(gateway, third, "splice", False, target=8_000)
    forwarded = providers.requests[-1].json["messages"]
    # As the provider made them: the round's turn (its text, then the call), the result, then the
    # rest of the answer the client got in one message (a thinking block after it keeps its prefix).
    rest = {**answer, "content": answer["content"][1:]}
    at = forwarded.index(rest)
    assert forwarded[at - 2:at] == exchange and exchange[0]["content"][0]["text"] == "Let me look that up. "


def test_a_chat_stream_naming_the_tool_after_text_goes_on_with_the_next_round(gateway, providers):
    """Chat models served through the chat route (Claude's among them) write text before a call too."""
    history = agent_history(12)
    ref, original = first_round(gateway, providers, "chat-splice", history)
    used_before, n_before = day_used(gateway, "expand"), len(providers.requests)
    providers.enqueue(Reply(content="Let me look that up. ", tool_calls=[expand_call(ref)], usage=ROUND_1),
                      Reply(content="It is sku 700001.", chunks=["It is ", "sku 700001."], usage=ROUND_2))
    client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-splice"})
    chunks = list(client.chat.completions.create(model=MODEL, messages=continued(history, "ok"), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me look that up. It is sku 700001."
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 2 and asked[1]["messages"][-2]["content"] == "Let me look that up. "
    assert f"ref {ref_of(fingerprint(original))}:" in asked[1]["messages"][-1]["content"]  # the span's list
    assert day_used(gateway, "expand") - used_before == ROUND_1["total_tokens"] + ROUND_2["total_tokens"]

    # Pinned like a round held back: the next request carries the exchange before the answer.
    providers.enqueue(Reply(content="done"))
    client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "chat-splice",
                                                          "x-sieve-target-tokens": "8000"})
    client.chat.completions.create(model=MODEL, messages=continued(history, "ok", text))
    forwarded = providers.requests[-1].json["messages"]
    at = next(i for i, m in enumerate(forwarded) if m.get("content") == text)
    assert forwarded[at - 2:at] == asked[1]["messages"][-2:]


def test_a_responses_stream_naming_the_tool_after_text_goes_on_with_the_next_round(gateway, providers):
    body = chat_to_responses({"model": MODEL, "messages": agent_history(12)})
    providers.enqueue(Reply(content="ok"))
    responses_answer(gateway, body, "responses-splice", False)
    marker = OMITTED_MARKER.search(orjson.dumps(providers.requests[-1].json).decode())
    some_id = marker.group(2).split()[0]
    used_before, n_before = day_used(gateway, "expand"), len(providers.requests)
    providers.enqueue(Reply(content="Let me look that up. ", tool_calls=[expand_call(some_id)],
                            usage=RESPONSES_USAGE[0]),
                      Reply(content="It is sku 700001.", usage=RESPONSES_USAGE[1]))
    client = openai_client(gateway, "sk-expand", headers={"x-sieve-conversation-id": "responses-splice"})
    events = list(client.responses.create(**body, stream=True))
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(numbers)))  # one stream, numbered on
    response = next(e.response for e in events if e.type == "response.completed")
    assert response.output_text == "Let me look that up. It is sku 700001."
    assert [item.type for item in response.output] == ["message", "message"]
    asked = [r.json for r in providers.requests[n_before:]]
    assert len(asked) == 2 and some_id in _last_tool_result(asked[1], "responses")
    assert day_used(gateway, "expand") - used_before == ROUND_1["total_tokens"] + ROUND_2["total_tokens"]


# -- the target holds with the tool on -----------------------------------------------------------------

def forward_at(gw: GatewayServer, providers: FakeProviders, key: str, conversation: str | None, target: int,
               strategy: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """``x-sieve-forwarded-tokens`` of one chat request at ``target``, and the body the provider got.
    Without a ``conversation`` id the first decision fills the target (none goes to the low-water mark)."""
    providers.enqueue(Reply(content="ok"))
    headers = {"x-sieve-strategy": strategy, "x-sieve-target-tokens": str(target)}
    if conversation is not None:
        headers["x-sieve-conversation-id"] = conversation
    raw = openai_client(gw, key, headers=headers) \
        .chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    raw.parse()
    return int(raw.headers["x-sieve-forwarded-tokens"]), providers.requests[-1].json


@pytest.mark.parametrize("strategy", ["window", "relevance"])
@pytest.mark.parametrize("target", [2_000, 4_000, 8_000])
def test_with_the_tool_on_the_forward_stays_within_the_target(gateway, providers, target, strategy):
    """The markers' refs are held under the target and the tool definition is a tool schema
    (not counted, like the client's): wherever the request without the tool meets its
    target, the one with it does too: on a first decision that fills the target (a
    request naming no conversation), and on a named conversation's frozen replay (its
    forwarded prefix byte for byte the first step's)."""
    history = agent_history(16)
    name = f"target-{target}-{strategy}"
    history[1] = {**history[1], "content": f"{history[1]['content']} ({name})"}  # a conversation of its own
    plain, _ = forward_at(gateway, providers, "sk-plain", None, target, strategy, history)
    assert plain <= target  # (the pins fit: the contract applies)
    tokens, first = forward_at(gateway, providers, "sk-expand", None, target, strategy, history)
    assert first["tools"][-1]["function"]["name"] == TOOL_NAME
    assert REF.search(orjson.dumps(first["messages"]).decode()) and tokens <= target
    # The count is the messages' alone (the tool apart), the refs the markers name included.
    assert tokens == sum(gateway_counter().model_tokens(m) for m in first["messages"])

    for step in (history, continued(history, "ok"), continued(history, "ok", "fine")):
        tokens, then = forward_at(gateway, providers, "sk-expand", name, target, strategy, step)
        assert tokens <= target and then["tools"][-1]["function"]["name"] == TOOL_NAME
        if step is not history:
            assert then["messages"][:len(before)] == before  # frozen: the provider's cache holds
        before = then["messages"]


def gateway_counter() -> Any:
    from gateway.pruning.tokens import TokenCounters
    return TokenCounters().for_model(MODEL)


def test_with_the_tool_on_and_the_target_held_a_marker_ref_still_resolves(gateway, providers):
    history = agent_history(16)
    tokens, first = forward_at(gateway, providers, "sk-expand", "target-resolves", 4_000, "relevance", history)
    assert tokens <= 4_000
    ref = OMITTED_REF.findall(orjson.dumps(first).decode())[0]
    n_before = len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call(ref)], usage=ROUND_1), Reply(content="back", usage=ROUND_2))
    answer = openai_client(gateway, "sk-expand", headers={
        "x-sieve-conversation-id": "target-resolves", "x-sieve-target-tokens": "4000"}) \
        .chat.completions.create(model=MODEL, messages=continued(history, "ok"))
    assert answer.choices[0].message.content == "back"
    result = providers.requests[n_before + 1].json["messages"][-1]
    assert result["role"] == "tool" and f"ref {ref}:" in result["content"] and NOT_AVAILABLE not in result["content"]


@pytest.mark.parametrize("fmt", ["messages", "responses"])
def test_with_the_tool_on_messages_and_responses_stay_within_the_target(gateway, providers, fmt):
    chat = {"model": CLAUDE if fmt == "messages" else MODEL, "messages": agent_history(16)}
    body = chat_to_messages(chat) if fmt == "messages" else chat_to_responses(chat)
    headers = {"x-sieve-target-tokens": "4000"}  # no conversation named: the first decision fills the target
    providers.enqueue(Reply(content="ok"))
    if fmt == "messages":
        client = anthropic.Anthropic(base_url=gateway.base_url, api_key="sk-expand", max_retries=0, timeout=30,
                                     default_headers=headers)
        raw = client.messages.with_raw_response.create(**{**body, "max_tokens": 500})
    else:
        raw = openai_client(gateway, "sk-expand", headers=headers).responses.with_raw_response.create(**body)
    raw.parse()
    sent = providers.requests[-1].json
    assert sent["tools"][-1]["name"] == TOOL_NAME and OMITTED_REF.search(orjson.dumps(sent).decode())
    assert int(raw.headers["x-sieve-forwarded-tokens"]) <= 4_000


# -- pinned exchanges are held under the target --------------------------------------------------------

def _is_expand_call(message: dict[str, Any]) -> bool:
    return any(c["function"]["name"] == TOOL_NAME for c in message.get("tool_calls") or ())


@pytest.mark.parametrize(("target", "fits"), [(2_000, True), (4_000, True), (8_000, False)])
def test_pinned_exchanges_go_back_within_the_target(gateway, providers, target, fits):
    """After an expand round is pinned, the conversation's later requests at a tight target
    carry the exchange where it fits the room an epoch frees, and the forward, pins included,
    stays within the target; ``x-sieve-forwarded-tokens`` is the upstream body's own count.
    (At 8,000 the marker's span is short enough to come back whole, about 10,000 tokens:
    more than that room, so it stays out.)"""
    history = agent_history(16)
    name = f"pins-{target}"
    history[1] = {**history[1], "content": f"{history[1]['content']} ({name})"}
    _, first = forward_at(gateway, providers, "sk-expand", name, target, "window", history)
    ref = OMITTED_REF.findall(orjson.dumps(first).decode())[0]
    n_before = len(providers.requests)
    providers.enqueue(Reply(tool_calls=[expand_call(ref)], usage=ROUND_1),
                      Reply(content="It is sku 700001.", usage=ROUND_2))
    headers = {"x-sieve-conversation-id": name, "x-sieve-target-tokens": str(target), "x-sieve-strategy": "window"}
    openai_client(gateway, "sk-expand", headers=headers).chat.completions.create(
        model=MODEL, messages=continued(history, "ok"))
    asked = providers.requests[-1].json["messages"]
    assert len(providers.requests) - n_before == 2 and _is_expand_call(asked[-2])
    exchange = asked[-2:]
    room = sum(gateway_counter().count_message(m) for m in exchange)
    assert (room <= target // 2) == fits  # the room an epoch frees (low_water_ratio 0.5)

    previous = asked
    for step in (continued(history, "ok", "It is sku 700001."),
                 continued(history, "ok", "It is sku 700001.", "fine"),
                 continued(history, "ok", "It is sku 700001.", "fine", "and more")):
        tokens, sent = forward_at(gateway, providers, "sk-expand", name, target, "window", step)
        messages = sent["messages"]
        assert tokens <= target
        assert tokens == sum(gateway_counter().model_tokens(m) for m in messages)
        at = next(i for i, m in enumerate(messages) if m.get("content") == "It is sku 700001.")
        if fits:
            assert messages[at - 2:at] == exchange  # back after the client turn it followed
        else:
            assert not any(_is_expand_call(m) for m in messages)
        if fits and previous is not asked:
            # Nothing changes between epochs: the request after the round opens a turn, where an
            # epoch may come (the conversation's largest turn, its agent loop, would cross the
            # target: gateway.pruning.turns); from there on the forward only grows.
            assert messages[:len(previous)] == previous
        previous = messages


@pytest.mark.parametrize("fmt", ["messages", "responses"])
def test_pinned_exchanges_in_messages_and_responses_stay_within_the_target(gateway, providers, fmt):
    """The pin's place and size in the client's own format: its client turns (a Messages turn
    or Responses items, several view messages) and its messages as the view counts them
    (about 2,600 tokens here: within the room an epoch frees at 6,000)."""
    chat = {"model": CLAUDE if fmt == "messages" else MODEL, "messages": agent_history(16)}
    chat["messages"][1] = {**chat["messages"][1], "content": f"{chat['messages'][1]['content']} (pins-{fmt})"}
    body = chat_to_messages(chat) if fmt == "messages" else chat_to_responses(chat)
    if fmt == "messages":
        body["max_tokens"] = 500
    ask, key, conversation = (claude_answer if fmt == "messages" else responses_answer), \
        ("messages" if fmt == "messages" else "input"), f"pins-{fmt}"
    providers.enqueue(Reply(content="ok"))
    ask(gateway, body, conversation, False, target=6_000)
    some_id = OMITTED_MARKER.search(orjson.dumps(providers.requests[-1].json).decode()).group(2).split()[0]
    usages = MESSAGES_USAGE if fmt == "messages" else RESPONSES_USAGE
    providers.enqueue(Reply(tool_calls=[expand_call(some_id)], usage=usages[0]),
                      Reply(content="It is sku 700001.", usage=usages[1]))
    assert ask(gateway, body, conversation, False, target=6_000) == "It is sku 700001."
    asked = [r.json for r in providers.requests[-2:]]
    exchange = asked[1][key][len(asked[0][key]):]
    answer = {"role": "assistant", "content": [{"type": "text", "text": "It is sku 700001."}]} if fmt == "messages" \
        else {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sku 700001."}]}
    steps = ([answer, {"role": "user", "content": "and then?"}],
             [answer, {"role": "user", "content": "and then?"}, answer, {"role": "user", "content": "more?"}])
    for step in steps:
        later = {**body, key: [*body[key], *step]}
        providers.enqueue(Reply(content="done"))
        headers = {"x-sieve-conversation-id": conversation, "x-sieve-target-tokens": "6000"}
        if fmt == "messages":
            raw = anthropic.Anthropic(base_url=gateway.base_url, api_key="sk-expand", max_retries=0, timeout=30,
                                      default_headers=headers).messages.with_raw_response.create(**later)
        else:
            raw = openai_client(gateway, "sk-expand", headers=headers).responses.with_raw_response.create(**later)
        raw.parse()
        forwarded = providers.requests[-1].json[key]
        assert int(raw.headers["x-sieve-forwarded-tokens"]) <= 6_000
        at = forwarded.index(answer)
        assert forwarded[at - len(exchange):at] == exchange and len(exchange) == 2


def test_a_pinned_exchange_stays_when_the_client_moves_its_cache_breakpoint(gateway, providers):
    """Claude Code marks its newest turn with ``cache_control`` and moves the mark on the next
    request: the turn a pin follows is the same turn without it. (The target leaves the third
    request the room its turn will take: it replays the decision, where a tighter one would
    open an epoch at its turn boundary, gateway.pruning.turns, and decide the pin anew.)"""
    chat = {"model": CLAUDE, "messages": agent_history(16)}
    chat["messages"][1] = {**chat["messages"][1], "content": f"{chat['messages'][1]['content']} (breakpoints)"}
    body = {**chat_to_messages(chat), "max_tokens": 500}
    marked = {"type": "text", "text": "and the lamp?", "cache_control": {"type": "ephemeral"}}
    turns = [*body["messages"], {"role": "assistant", "content": "ok"}, {"role": "user", "content": [marked]}]
    providers.enqueue(Reply(content="ok"))
    claude_answer(gateway, body, "breakpoints", False, target=9_000)
    some_id = OMITTED_MARKER.search(orjson.dumps(providers.requests[-1].json).decode()).group(2).split()[0]
    providers.enqueue(Reply(tool_calls=[expand_call(some_id)], usage=MESSAGES_USAGE[0]),
                      Reply(content="It is sku 700001.", usage=MESSAGES_USAGE[1]))
    assert claude_answer(gateway, {**body, "messages": turns}, "breakpoints", False, target=9_000) == \
        "It is sku 700001."
    exchange = providers.requests[-1].json["messages"][-2:]
    assert exchange[0]["content"][-1]["name"] == TOOL_NAME
    moved = [*turns[:-1], {"role": "user", "content": [{"type": "text", "text": "and the lamp?"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "It is sku 700001."}]},
             {"role": "user", "content": [{**marked, "text": "thanks"}]}]
    providers.enqueue(Reply(content="done"))
    claude_answer(gateway, {**body, "messages": moved}, "breakpoints", False, target=9_000)
    forwarded = providers.requests[-1].json["messages"]
    at = next(i for i, m in enumerate(forwarded) if m["role"] == "assistant" and m["content"] == moved[-2]["content"])
    assert forwarded[at - 2:at] == exchange
