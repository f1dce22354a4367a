"""The second transport behind the Upstream seam: a model routed through litellm.

A model configured with ``kind: litellm`` goes through ``litellm.acompletion``
(here as ``openai/<model>`` to the fake provider, a real HTTP server), and its
answer comes back re-encoded as OpenAI JSON or SSE: the client cannot tell the
transports apart, and budgets and savings read the usage the same way.
"""

from __future__ import annotations

import openai
import pytest

from gateway.pruning.normalize import structural_problems
from gateway.config.settings import ModelRoute, RouteKind
from tests.support.conversations import agent_history
from tests.support.fake_upstream import Reply
from tests.support import openai_client

ROUTED = "house-llm"


@pytest.fixture
def gateway(start_gateway, upstream):
    route = ModelRoute(name=ROUTED, kind=RouteKind.LITELLM, litellm_model="openai/gpt-4o-mini",
                       api_base=upstream.base_url, api_key="sk-routed-key")
    return start_gateway(models={ROUTED: route}, budgets={"orgs": {"anonymous": {"day": 10**9}}})


def test_a_pruned_request_goes_through_litellm_and_back_as_openai_json(gateway, upstream):
    history = agent_history(30)
    resp = openai_client(gateway, "sk-client").chat.completions.with_raw_response.create(
        model=ROUTED, messages=history, extra_headers={"x-sieve-target-tokens": "6000"})
    completion = resp.parse()
    assert completion.choices[0].message.content == "ok"
    sent = upstream.requests[-1]
    assert sent.path == "/v1/chat/completions" and sent.json["model"] == "gpt-4o-mini"
    assert sent.headers["authorization"] == "Bearer sk-routed-key"  # the route's key, not the client's
    assert structural_problems(sent.json["messages"]) == []
    assert sent.json["messages"][-1] == history[-1]
    assert int(resp.headers["x-sieve-forwarded-tokens"]) <= 6000 < int(resp.headers["x-sieve-original-tokens"])
    gateway.wait_idle()
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    metrics = gateway.get("/metrics").text
    assert f'sieve_requests_total{{model="{ROUTED}",org="anonymous",outcome="pruned"}} 1.0' in metrics


def test_a_stream_through_litellm_is_relayed_as_openai_sse(gateway, upstream):
    upstream.enqueue(Reply(chunks=["Hel", "lo"]))
    chunks = list(openai_client(gateway, "sk-client").chat.completions.create(
        model=ROUTED, messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert upstream.requests[-1].json["stream"] is True


def test_a_provider_error_through_litellm_keeps_its_status(gateway, upstream):
    upstream.enqueue(Reply(status=429, json_body={"error": {"message": "slow down", "type": "rate_limit"}}))
    with pytest.raises(openai.RateLimitError) as caught:
        openai_client(gateway, "sk-client").chat.completions.create(model=ROUTED, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 429
    assert "sk-routed-key" not in str(caught.value.body)


def test_an_answer_over_the_upstream_body_limit_is_not_relayed(start_gateway, upstream):
    route = ModelRoute(name=ROUTED, kind=RouteKind.LITELLM, litellm_model="openai/gpt-4o-mini",
                       api_base=upstream.base_url, api_key="sk-routed-key")
    gateway = start_gateway(models={ROUTED: route}, max_upstream_body_bytes=100_000)
    upstream.enqueue(Reply(content="x" * 200_000), Reply(content="y" * 50_000))
    client = openai_client(gateway, "sk-client")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=ROUTED, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    error = caught.value.body
    assert error["code"] == "upstream_response_too_large", error
    assert "over the limit of 100000 bytes (SIEVE_MAX_UPSTREAM_BODY_BYTES)" in error["message"]
    under = client.chat.completions.create(model=ROUTED, messages=[{"role": "user", "content": "hi"}])
    assert under.choices[0].message.content == "y" * 50_000
