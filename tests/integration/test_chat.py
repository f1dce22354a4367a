"""The gateway end to end: official openai client -> Sieve under uvicorn -> fake upstream (real HTTP)."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
import tiktoken

from gateway.pruning.messages import message_token_text
from gateway.pruning.normalize import structural_problems
from tests.support.conversations import GOAL, agent_history
from tests.support.fake_upstream import Reply
from tests.support import async_openai_client, openai_client

KEY = "sk-client-key"


def test_sync_completion_passes_fields_and_key_through(gateway, upstream):
    resp = openai_client(gateway, KEY).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}], temperature=0.2,
        extra_body={"vendor_flag": {"x": 1}}, extra_headers={"OpenAI-Beta": "assistants=v2"})
    completion = resp.parse()
    assert completion.choices[0].message.content == "ok"
    sent = upstream.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.json["temperature"] == 0.2 and sent.json["vendor_flag"] == {"x": 1}
    assert sent.json["messages"] == [{"role": "user", "content": "hello"}]
    assert sent.headers["authorization"] == "Bearer sk-client-key"
    assert sent.headers["openai-beta"] == "assistants=v2"
    assert not any(h.startswith("x-sieve") for h in sent.headers)
    assert resp.headers["x-sieve-request-id"].startswith("req_")
    assert resp.headers["x-sieve-saved-tokens"] == "0"
    assert int(resp.headers["x-sieve-original-tokens"]) == int(resp.headers["x-sieve-forwarded-tokens"]) > 0


def test_configured_key_replaces_client_key(start_gateway, upstream):
    gw = start_gateway(upstream_api_key="sk-provider")
    openai_client(gw, KEY).chat.completions.create(model="gpt-4o-mini",
                                                   messages=[{"role": "user", "content": "hi"}])
    assert upstream.requests[-1].headers["authorization"] == "Bearer sk-provider"


async def test_async_client(gateway, upstream):
    aclient = async_openai_client(gateway, "sk-a")
    results = await asyncio.gather(*[
        aclient.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": f"q{i}"}])
        for i in range(8)])
    assert [r.choices[0].message.content for r in results] == ["ok"] * 8
    assert sorted(r.json["messages"][0]["content"] for r in upstream.requests) == sorted(f"q{i}" for i in range(8))
    await aclient.close()


def test_stream_relays_chunks_and_hides_usage_it_asked_for(gateway, upstream):
    upstream.enqueue(Reply(chunks=["Hel", "lo", " world"]))
    chunks = list(openai_client(gateway, KEY).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello world"
    assert all(c.usage is None for c in chunks)
    assert upstream.requests[-1].json["stream_options"] == {"include_usage": True}


def test_stream_keeps_usage_when_client_asks(gateway, upstream):
    chunks = list(openai_client(gateway, KEY).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_tool_calls_come_back_to_the_client(gateway, upstream):
    calls = [{"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 1}'}},
             {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 2}'}}]
    upstream.enqueue(Reply(tool_calls=calls))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    out = openai_client(gateway, KEY).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "look up 1 and 2"}], tools=tools,
        parallel_tool_calls=True)
    assert [c.id for c in out.choices[0].message.tool_calls] == ["call_a", "call_b"]
    assert upstream.requests[-1].json["tools"] == tools
    assert upstream.requests[-1].json["parallel_tool_calls"] is True


def test_long_agent_history_arrives_trimmed_valid_with_goal(gateway, upstream):
    history = agent_history(30)
    tools = [{"type": "function", "function": {"name": "get_order_details", "parameters": {"type": "object"}}}]
    resp = openai_client(gateway, KEY).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=history, tools=tools, extra_headers={"x-sieve-target-tokens": "6000"})
    sent = upstream.requests[-1].json["messages"]
    original, forwarded = int(resp.headers["x-sieve-original-tokens"]), int(resp.headers["x-sieve-forwarded-tokens"])
    assert original > 20_000 and forwarded <= 6000
    assert int(resp.headers["x-sieve-saved-tokens"]) == original - forwarded
    assert structural_problems(sent) == []
    assert sent[0] == history[0] and {"role": "user", "content": GOAL} in sent
    assert sent[-1] == history[-1]
    # The default policy's sieve_expand tool goes after the client's own; the markers name refs.
    assert upstream.requests[-1].json["tools"][:-1] == tools
    assert upstream.requests[-1].json["tools"][-1]["function"]["name"] == "sieve_expand"
    assert any(str(m.get("content")).startswith("[sieve: some earlier messages omitted, ref ") for m in sent)


def test_prune_route_forwards_nothing(gateway, upstream):
    body = {"model": "gpt-4o-mini", "messages": agent_history(20), "user": "u-1"}
    r = gateway.post("/v1/prune", json=body, headers={"x-sieve-target-tokens": "3000"})
    assert r.status_code == 200
    out = r.json()
    assert upstream.requests == []
    assert out["request"]["user"] == "u-1"
    report = out["report"]
    assert report["forwarded_tokens"] <= 3000 < report["original_tokens"]
    assert len(report["messages"]) == len(body["messages"])
    actions = {m["action"] for m in report["messages"]}
    assert actions <= {"kept", "masked", "dropped"} and "kept" in actions and actions != {"kept"}
    assert all(isinstance(m["reason"], str) and m["reason"] for m in report["messages"])


def test_headers_count_in_the_models_encoding_and_the_cap_under_the_stricter_one(gateway, upstream):
    # Russian text: cl100k counts it well above o200k. The headers (and so the
    # savings) are in gpt-4o-mini's own o200k; the cap holds under the larger count.
    o200k, cl100k = (tiktoken.get_encoding(n) for n in ("o200k_base", "cl100k_base"))
    history = agent_history(12)
    history[2:2] = [{"role": "user", "content": f"Заказ #W{1000 + i}: лампа сломана, нужна замена на синюю."}
                    for i in range(40)]
    r = gateway.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history},
                     headers={"x-sieve-target-tokens": "3000"})
    report = r.json()["report"]
    resp = openai_client(gateway, KEY).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=history, extra_headers={"x-sieve-target-tokens": "3000"})
    # The messages as forwarded, which /v1/prune shows: under the default policy (sieve_expand
    # on) the omission markers name their refs.
    sent = upstream.requests[-1].json["messages"]
    assert r.json()["request"]["messages"] == sent
    assert any(str(m.get("content")).startswith("[sieve: some earlier messages omitted, ref ") for m in sent)

    def count(encoding, messages):
        return sum(len(encoding.encode_ordinary(message_token_text(m))) + 4 for m in messages)

    assert report["original_tokens"] == count(o200k, history) < count(cl100k, history)
    assert report["forwarded_tokens"] == count(o200k, sent)
    assert report["target_rule_tokens"] == sum(max(count(o200k, [m]), count(cl100k, [m])) for m in sent) <= 3000
    assert int(resp.headers["x-sieve-original-tokens"]) == report["original_tokens"]
    assert int(resp.headers["x-sieve-forwarded-tokens"]) == count(o200k, sent)


def test_strategy_none_forwards_unchanged(gateway, upstream):
    history = agent_history(20)
    openai_client(gateway, KEY).chat.completions.create(
        model="gpt-4o-mini", messages=history,
        extra_headers={"x-sieve-strategy": "none", "x-sieve-target-tokens": "2000"})
    assert upstream.requests[-1].json["messages"] == history


@pytest.mark.parametrize("body, status, fragment", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (json.dumps({"model": "gpt-4o-mini"}).encode(), 400, "'messages' is required"),
    (json.dumps({"model": "gpt-4o-mini", "messages": []}).encode(), 400, "non-empty array"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), 400, "'model' is required"),
    (json.dumps({"model": "m", "messages": [{"role": "bot", "content": "x"}]}).encode(), 400, "messages[0].role"),
    (json.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}).encode(), 400, "messages[0].content"),
    (json.dumps({"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]}).encode(),
     400, "arguments must be a string"),
    (json.dumps({"model": "m", "messages": [{"role": "tool", "content": "x"}]}).encode(), 400, "tool_call_id"),
    (json.dumps({"model": "m", "max_tokens": 16.5, "messages": [{"role": "user", "content": "x"}]}).encode(),
     400, "'max_tokens' must be a positive integer"),
    # Found by fuzzing: JSON nested 254+ levels deep parsed, but could not be serialized again (500).
    pytest.param(b'{"model": "m", "metadata": ' + b"[" * 300 + b"]" * 300 + b', "messages": [{"role": "user", '
                 b'"content": "x"}]}', 400, "nested too deeply", id="nested-300-deep"),
    # Found by fuzzing: a non-object stream_options crashed the streaming path (500).
    (json.dumps({"model": "m", "stream": True, "stream_options": [None], "messages": [{"role": "user", "content": "x"}]}
                ).encode(), 400, "'stream_options' must be an object"),
])
def test_bad_input_gets_a_clear_openai_error(gateway, upstream, body, status, fragment):
    r = gateway.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_whole_number_max_tokens_pass_through_as_sent(gateway, upstream):
    # Found by fuzzing: JSON's 16.0 is the integer 16 (JSON Schema says so too) but was refused.
    body = {"model": "m", "max_tokens": 16.0, "max_completion_tokens": 8.0, "messages": [{"role": "user", "content": "x"}]}
    r = gateway.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert b'"max_tokens":16.0' in upstream.requests[-1].body


@pytest.mark.parametrize("header, value", [("x-sieve-target-tokens", "lots"), ("x-sieve-target-tokens", "0"),
                                           ("x-sieve-target-tokens", "1_000"), ("x-sieve-target-tokens", "+5"),
                                           ("x-sieve-target-tokens", "-5"), ("x-sieve-strategy", "magic")])
def test_bad_sieve_headers(gateway, header, value):
    r = gateway.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                     headers={header: value})
    assert r.status_code == 400 and header in r.json()["error"]["message"]


def test_body_too_large(start_gateway):
    gw = start_gateway(max_body_bytes=1000)
    r = gw.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_unknown_model_without_default_upstream(start_gateway):
    gw = start_gateway(upstream_base_url=None)
    with pytest.raises(openai.NotFoundError) as err:
        openai_client(gw, KEY).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert "not routed" in str(err.value)


def test_upstream_error_passes_through(gateway, upstream):
    body = {"error": {"message": "model overloaded", "type": "server_error", "param": None, "code": "overloaded"}}
    upstream.enqueue(Reply(status=503, json_body=body))
    r = gateway.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503 and r.json() == body
    assert r.headers["x-sieve-request-id"]


def test_upstream_timeout_is_504(start_gateway, upstream):
    gw = start_gateway(upstream_timeout_s=0.3)
    upstream.enqueue(Reply(delay_s=2.0))
    r = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 504 and r.json()["error"]["type"] == "upstream_timeout"


def test_unreachable_upstream_is_502(start_gateway):
    gw = start_gateway(upstream_base_url="http://127.0.0.1:9/v1")
    r = gw.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"


def test_health_models_and_metrics(gateway, upstream):
    assert gateway.get("/healthz").json() == {"status": "ok"}
    assert gateway.get("/readyz").status_code == 200
    assert gateway.get("/v1/models").json()["object"] == "list"
    openai_client(gateway, KEY).chat.completions.create(model="gpt-4o-mini", messages=agent_history(20),
                                                        extra_headers={"x-sieve-target-tokens": "3000"})
    gateway.wait_idle()
    text = gateway.get("/metrics").text
    assert 'sieve_requests_total{model="gpt-4o-mini",org="anonymous",outcome="pruned"} 1.0' in text
    original = _metric(text, 'sieve_prompt_tokens_original_total{model="gpt-4o-mini",org="anonymous"}')
    forwarded = _metric(text, 'sieve_prompt_tokens_forwarded_total{model="gpt-4o-mini",org="anonymous"}')
    assert original > forwarded > 0
    assert _metric(text, 'sieve_units_total{action="dropped",org="anonymous"}') > 0


def _metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics")


def test_readyz_lists_no_problem_without_redis(gateway):
    r = httpx.get(gateway.base_url + "/readyz")
    assert r.status_code == 200


def test_models_lists_configured_and_upstream_models(start_gateway, upstream):
    from gateway.config.settings import ModelRoute
    gw = start_gateway(models={"house-model": ModelRoute(name="house-model", api_base=upstream.base_url)})
    ids = [m.id for m in openai_client(gw, KEY).models.list().data]
    assert "house-model" in ids and "gpt-4o-mini" in ids


def test_dashboard_queries_only_use_live_metrics(gateway, upstream):
    """Every metric the Grafana dashboard queries is in the live /metrics output."""
    import pathlib
    import re
    openai_client(gateway, KEY).chat.completions.create(model="gpt-4o-mini", messages=agent_history(10),
                                                        extra_headers={"x-sieve-target-tokens": "1500"})
    gateway.wait_idle()
    live = set(re.findall(r"^# TYPE (\w+)", gateway.get("/metrics").text, re.M))
    dashboard = json.loads(pathlib.Path("helm/sieve/dashboards/sieve-overview.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"\b(sieve_\w+)", e)}
    assert used and used <= live, used - live


def test_refused_requests_are_counted_by_outcome(gateway):
    gateway.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": []})
    gateway.post("/v1/chat/completions", content=b"{oops")
    text = gateway.get("/metrics").text
    assert 'sieve_requests_total{model="gpt-4o-mini",org="anonymous",outcome="client_error"} 1.0' in text
    assert 'sieve_requests_total{model="other",org="anonymous",outcome="client_error"} 1.0' in text


def test_unknown_route_and_method_are_openai_shaped(gateway):
    r = gateway.get("/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = gateway.get("/v1/chat/completions")
    assert r.status_code == 405 and "GET /v1/chat/completions" in r.json()["error"]["message"]
