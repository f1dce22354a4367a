"""Every ``sieve_expand`` round is billed, so every round counts: settled against the budget in a
real redis-server, and in the token and cost metrics a Prometheus scrape of ``/metrics`` reads
(``sieve_completion_tokens_total``, ``sieve_cohort_prompt_tokens_total{kind="billed"}``,
``sieve_cost_usd_total{kind="actual"}``), whether the rounds were held back, answered
mid-stream, or followed by an answer that reports no usage.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

import anthropic
import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.expand import TOOL_NAME
from gateway.telemetry.pricing import PriceBook, load_litellm_model_cost, price_usage
from gateway.telemetry.usage import usage_from_provider
from tests.support.conversations import agent_history
from tests.support.fake_providers import FakeProviders, Reply
from tests.support.formats import chat_to_messages, chat_to_responses
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, admin_headers, org_counter
from tests.integration.conftest import format_settings
from tests.support.redis_server import RedisServer
from tests.support import openai_client

pytestmark = [pytest.mark.redis]

GPT, CLAUDE = "gpt-4o-mini", "claude-sonnet-4-5"
ORG, KEY = "rounds", "sk-rounds"
POLICY = "strategy: window\nmin_prompt_tokens: 0\nmin_messages: 0\ntarget_tokens: 1500\n" \
         "expand_tool: true\nexpand_max_rounds: 2\n"
ROUNDS = ({"prompt_tokens": 1500, "completion_tokens": 20, "total_tokens": 1520},
          {"prompt_tokens": 2600, "completion_tokens": 40, "total_tokens": 2640},
          {"prompt_tokens": 3100, "completion_tokens": 30, "total_tokens": 3130})
CLAUDE_ROUNDS = tuple({"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"],
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0} for u in ROUNDS)
RESPONSES_ROUND = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1520}
REF = re.compile(r"some earlier messages omitted, ref ([0-9a-f]{8})")


@pytest.fixture(scope="module")
def gateway(redis: RedisServer, providers_server: FakeProviders, tmp_path_factory) -> Iterator[GatewayServer]:
    folder = tmp_path_factory.mktemp("policies")
    (folder / "default.yaml").write_text(POLICY)
    settings = format_settings(providers_server, policies_dir=folder, redis_url=redis.url, admin_key=ADMIN_KEY,
                               budgets={"orgs": {ORG: {"day": 10_000_000}}},
                               virtual_keys=({"key": KEY, "org": ORG},))
    with GatewayServer(settings) as gw:
        yield gw


def figures(gw: GatewayServer, model: str) -> dict[str, float]:
    """The org's budget used (Redis) and its token and cost counters (a scrape of /metrics)."""
    gw.wait_idle()
    wanted = {("sieve_completion_tokens_total", (("model", model), ("org", ORG))): "completion",
              ("sieve_cohort_prompt_tokens_total", (("cohort", "pruned"), ("kind", "billed"), ("org", ORG))): "billed",
              ("sieve_cost_usd_total", (("kind", "actual"), ("model", model), ("org", ORG))): "actual_usd"}
    out = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(httpx.get(gw.base_url + "/metrics", timeout=10).text):
        for s in family.samples:
            name = wanted.get((s.name, tuple(sorted(s.labels.items()))))
            if name is not None:
                out[name] = s.value
    response = gw.get(f"/admin/usage/{ORG}", headers=admin_headers())
    assert response.status_code == 200, response.text
    out["budget_used"] = int(org_counter(response.json()["counters"], f"org:{ORG}:day")["used"])
    return out


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def priced(model: str, *usages: dict[str, Any]) -> float:
    price = PriceBook(load_litellm_model_cost()).lookup(model)
    return sum(price_usage(price, usage_from_provider(u)).total_usd for u in usages)


def expand_call(ref: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"refs": [ref]})}}


def chat_ref(gw: GatewayServer, providers: FakeProviders, conversation: str) -> tuple[list[dict[str, Any]], str]:
    """A pruned first request of a chat conversation (plain answer) and a ref its marker names."""
    history = agent_history(12)
    history[1] = {**history[1], "content": f"{history[1]['content']} ({conversation})"}
    providers.enqueue(Reply(content="ok"))
    openai_client(gw, KEY, headers={"x-sieve-conversation-id": conversation}).chat.completions.create(
        model=GPT, messages=history)
    sent = providers.requests[-1].json
    assert sent["tools"][-1]["function"]["name"] == TOOL_NAME
    return [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}], \
        REF.search(orjson.dumps(sent).decode()).group(1)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "held-stream"])
def test_every_round_is_settled_and_counted_in_the_token_and_cost_metrics(gateway, providers, stream):
    history, ref = chat_ref(gateway, providers, f"rounds-{stream}")
    before = figures(gateway, GPT)
    providers.enqueue(Reply(tool_calls=[expand_call(ref, "call_s1")], usage=ROUNDS[0]),
                      Reply(tool_calls=[expand_call(ref, "call_s2")], usage=ROUNDS[1]),
                      Reply(content="final", chunks=["fi", "nal"], usage=ROUNDS[2]))
    client = openai_client(gateway, KEY, headers={"x-sieve-conversation-id": f"rounds-{stream}"})
    if stream:
        chunks = list(client.chat.completions.create(model=GPT, messages=history, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "final"
    else:
        assert client.chat.completions.create(model=GPT, messages=history).choices[0].message.content == "final"
    delta = moved(before, figures(gateway, GPT))
    assert delta["budget_used"] == sum(u["total_tokens"] for u in ROUNDS)
    assert delta["completion"] == sum(u["completion_tokens"] for u in ROUNDS)
    assert delta["billed"] == sum(u["prompt_tokens"] for u in ROUNDS)
    assert delta["actual_usd"] == pytest.approx(priced(GPT, *ROUNDS), rel=1e-9)


def test_a_round_answered_mid_stream_is_counted_once_with_the_next(gateway, providers):
    """Claude's text, then the call: the round is answered at the call and the next one relayed
    in the same message; both rounds' input and output are in the metrics, each once."""
    body = chat_to_messages({"model": CLAUDE, "messages": agent_history(12)})
    body["max_tokens"] = 500
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=30,
                                 default_headers={"x-sieve-conversation-id": "rounds-splice"})
    providers.enqueue(Reply(content="ok"))
    client.messages.create(**body)
    ref = REF.search(orjson.dumps(providers.requests[-1].json).decode()).group(1)
    before = figures(gateway, CLAUDE)
    providers.enqueue(Reply(content="Let me look. ", tool_calls=[expand_call(ref, "toolu_s1")], usage=CLAUDE_ROUNDS[0]),
                      Reply(content="It is sku 700001.", usage=CLAUDE_ROUNDS[1]))
    with client.messages.stream(**body) as events:
        message = events.get_final_message()
    assert "".join(b.text for b in message.content if b.type == "text") == "Let me look. It is sku 700001."
    delta = moved(before, figures(gateway, CLAUDE))
    two = ROUNDS[:2]
    assert delta["budget_used"] == sum(u["total_tokens"] for u in two)
    assert delta["completion"] == sum(u["completion_tokens"] for u in two)
    assert delta["billed"] == sum(u["prompt_tokens"] for u in two)
    assert delta["actual_usd"] == pytest.approx(priced(CLAUDE, *CLAUDE_ROUNDS[:2]), rel=1e-9)


@pytest.mark.parametrize("fmt", ["chat", "messages", "responses"])
def test_a_spliced_round_the_provider_refuses_ends_the_stream_and_the_round_counts_once(gateway, providers, fmt):
    """Text, then the call; the next round is refused: the stream closes with the answered
    round's usage, the refused round's reservation is released, the round counts once."""
    model = CLAUDE if fmt == "messages" else GPT
    chat = {"model": model, "messages": agent_history(12)}
    chat["messages"][1] = {**chat["messages"][1], "content": f"{chat['messages'][1]['content']} (refused {fmt})"}
    headers = {"x-sieve-conversation-id": f"rounds-refused-{fmt}"}
    if fmt == "messages":
        client = anthropic.Anthropic(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=30,
                                     default_headers=headers)
        body = {**chat_to_messages(chat), "max_tokens": 500}
        ask = client.messages.create
    else:
        client = openai_client(gateway, KEY, headers=headers)
        body = chat if fmt == "chat" else chat_to_responses(chat)
        ask = client.chat.completions.create if fmt == "chat" else client.responses.create
    providers.enqueue(Reply(content="ok"))
    ask(**body)
    ref = REF.search(orjson.dumps(providers.requests[-1].json).decode()).group(1)
    before = figures(gateway, model)
    usage = {"chat": ROUNDS[0], "messages": CLAUDE_ROUNDS[0], "responses": RESPONSES_ROUND}[fmt]
    refused = {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}} \
        if fmt == "messages" else {"error": {"message": "overloaded", "type": "server_error"}}
    providers.enqueue(Reply(content="Let me look. ", tool_calls=[expand_call(ref, "call_s1")], usage=usage),
                      Reply(status=529 if fmt == "messages" else 503, json_body=refused))
    if fmt == "messages":
        with client.messages.stream(**body) as events:
            assert [b.text for b in events.get_final_message().content] == ["Let me look. "]
    else:
        assert list(ask(**body, stream=True))
    delta = moved(before, figures(gateway, model))
    assert delta["budget_used"] == ROUNDS[0]["total_tokens"]  # the refused round's reservation released
    assert delta["completion"] == ROUNDS[0]["completion_tokens"]
    assert delta["billed"] == ROUNDS[0]["prompt_tokens"]
    assert delta["actual_usd"] == pytest.approx(priced(model, usage), rel=1e-9)


def test_rounds_before_an_answer_without_usage_are_still_cost(gateway, providers):
    history, ref = chat_ref(gateway, providers, "rounds-no-usage")
    before = figures(gateway, GPT)
    final = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": GPT, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "final"}, "finish_reason": "stop"}]}
    providers.enqueue(Reply(tool_calls=[expand_call(ref, "call_s1")], usage=ROUNDS[0]), Reply(json_body=final))
    raw = openai_client(gateway, KEY, headers={"x-sieve-conversation-id": "rounds-no-usage"}) \
        .chat.completions.with_raw_response.create(model=GPT, messages=history)
    assert raw.parse().choices[0].message.content == "final"
    delta = moved(before, figures(gateway, GPT))
    assert delta["completion"] == ROUNDS[0]["completion_tokens"]
    assert delta["billed"] == ROUNDS[0]["prompt_tokens"]
    assert delta["actual_usd"] == pytest.approx(priced(GPT, ROUNDS[0]), rel=1e-9)
    assert delta["budget_used"] > ROUNDS[0]["total_tokens"]  # and the last answer at its estimate
