"""Stored Responses belong to the org that made them (issue 28): the cross-org probe.

One provider account (the gateway's key), two orgs. The provider
(:class:`tests.support.billing_provider.BillingProvider`, a real server) keeps responses and
serves any of them to whoever holds the id, as a real one does. Through Sieve, org B
holding org A's ids gets 404 in OpenAI's shape on every id-bearing route and on
``previous_response_id`` / ``conversation``, the provider is never asked, and A's data
is intact. Before: each of these answered 200 (B read A's input items, continued,
compacted, cancelled and deleted A's response).
"""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest

from gateway.config.settings import Settings
from tests.support.billing_provider import BillingProvider
from tests.support.gateway_server import GatewayServer
from tests.support import openai_client

ACME, GLOBEX, INITECH = "sk-sieve-acme-0123456789abcdef", "sk-sieve-globex-0123456789abcdef", \
    "sk-sieve-initech-0123456789abcdef"
SECRET = "PLANTED-acme-merger-terms-7731"


@pytest.fixture(scope="module")
def provider() -> Iterator[BillingProvider]:
    with BillingProvider(long_output=20) as server:
        yield server


@pytest.fixture(scope="module")
def gw(provider: BillingProvider, tmp_path_factory) -> Iterator[GatewayServer]:
    policies = tmp_path_factory.mktemp("policies")
    # acme and globex may use ids Sieve never saw (conversations made elsewhere); never another org's.
    (policies / "open-ids.yaml").write_text("allow_unmanaged_response_ids: true\n")
    settings = Settings(upstream_base_url=provider.base_url, upstream_api_key="sk-gateway-shared-account",
                        policies_dir=policies, org_policies={"acme": "open-ids", "globex": "open-ids"},
                        virtual_keys=({"key": ACME, "org": "acme"}, {"key": GLOBEX, "org": "globex"},
                                      {"key": INITECH, "org": "initech"}))
    with GatewayServer(settings) as server:
        yield server


def client(gw: GatewayServer, key: str) -> openai.OpenAI:
    return openai_client(gw, key)


@pytest.fixture(scope="module")
def acme_ids(gw: GatewayServer) -> dict[str, str]:
    """What org A made through Sieve: a response, a streamed one, and a conversation."""
    llm = client(gw, ACME)
    made = llm.responses.create(model="gpt-5", input=f"Keep this private: {SECRET}")
    with llm.responses.stream(model="gpt-5", input=f"Streamed, and private: {SECRET}") as stream:
        streamed = stream.get_final_response()
    in_conversation = llm.responses.create(model="gpt-5", input="Open the file.", conversation="conv_acme_0001")
    return {"response": made.id, "streamed": streamed.id, "in_conversation": in_conversation.id,
            "conversation": "conv_acme_0001"}


def probes(ids: dict[str, str]) -> list[tuple[str, str, dict | None]]:
    """Every id-bearing request org B can make with org A's ids."""
    out: list[tuple[str, str, dict | None]] = []
    for rid in (ids["response"], ids["streamed"]):
        out += [("GET", f"/v1/responses/{rid}", None), ("GET", f"/v1/responses/{rid}/input_items", None),
                ("POST", f"/v1/responses/{rid}/cancel", None), ("DELETE", f"/v1/responses/{rid}", None),
                ("POST", "/v1/responses", {"model": "gpt-5", "previous_response_id": rid, "input": "go on"}),
                ("POST", "/v1/responses", {"model": "gpt-5", "previous_response_id": rid, "input": "go on",
                                           "stream": True}),
                ("POST", "/v1/responses/compact", {"model": "gpt-5", "previous_response_id": rid}),
                ("POST", "/v1/responses/input_tokens", {"model": "gpt-5", "previous_response_id": rid})]
    for conversation in (ids["conversation"], {"id": ids["conversation"]}):
        out += [("POST", "/v1/responses", {"model": "gpt-5", "conversation": conversation, "input": "hi"}),
                ("POST", "/v1/responses/input_tokens", {"model": "gpt-5", "conversation": conversation})]
    return out


@pytest.mark.parametrize("other", [GLOBEX, INITECH], ids=["opted-in", "default-policy"])
def test_another_org_gets_404_on_every_id_bearing_route(gw, provider, acme_ids, other: str) -> None:
    asked = len(provider.paths)
    with httpx.Client(base_url=gw.base_url, headers={"authorization": f"Bearer {other}"}, timeout=30) as http:
        for method, path, body in probes(acme_ids):
            answer = http.request(method, path, json=body)
            assert answer.status_code == 404, (method, path, body, answer.text[:300])
            error = answer.json()["error"]
            assert error["type"] == "invalid_request_error" and "not found" in error["message"], error
            assert SECRET not in answer.text
    assert len(provider.paths) == asked  # the provider was never asked
    # The SDK sees OpenAI's own 404.
    with pytest.raises(openai.NotFoundError):
        client(gw, other).responses.input_items.list(acme_ids["response"])


def test_the_owners_data_is_intact_and_still_its_own(gw, provider, acme_ids) -> None:
    for method, path, body in probes(acme_ids):  # another org tried everything first
        httpx.request(method, gw.base_url + path, json=body, headers={"authorization": f"Bearer {GLOBEX}"},
                      timeout=30)
    llm = client(gw, ACME)
    assert llm.responses.retrieve(acme_ids["response"]).id == acme_ids["response"]
    items = llm.responses.input_items.list(acme_ids["streamed"])
    assert SECRET in str(items.data[0])
    follow = llm.responses.create(model="gpt-5", previous_response_id=acme_ids["in_conversation"], input="more")
    assert follow.previous_response_id == acme_ids["in_conversation"]
    assert llm.responses.create(model="gpt-5", conversation=acme_ids["conversation"], input="more").id
    assert not any(stored.deleted for stored in provider.responses.values())


def test_an_id_sieve_never_issued_is_404_unless_the_policy_lets_it_through(gw, provider) -> None:
    provider.responses["resp_made_elsewhere"] = provider.responses[next(iter(provider.responses))]
    with pytest.raises(openai.NotFoundError) as refused:
        client(gw, INITECH).responses.retrieve("resp_made_elsewhere")
    assert refused.value.body["message"] == "Response with id 'resp_made_elsewhere' not found."
    # globex's policy opts in: an id no org holds goes through, and is globex's from then on.
    assert client(gw, GLOBEX).responses.create(model="gpt-5", previous_response_id="resp_made_elsewhere",
                                               input="go on").id


@pytest.mark.parametrize("path", [
    "/v1/responses/..", "/v1/responses/../input_items", "/v1/responses/%2e%2e", "/v1/responses/%2E%2E/input_items",
    "/v1/responses/..%2Fmodels", "/v1/responses/%2F..%2Fchat%2Fcompletions", "/v1/responses/resp_1%2F..%2F..",
    "/v1/responses/.", "/v1/responses/resp.1",
])
def test_a_response_id_is_one_segment_of_the_providers_alphabet(gw, provider, path: str) -> None:
    """Dot segments and encoded slashes once reached other upstream paths with the gateway's key."""
    asked = len(provider.paths)
    connection = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        connection.request("GET", path, headers={"authorization": f"Bearer {ACME}"})
        answer = connection.getresponse()
        status, body = answer.status, answer.read()
    finally:
        connection.close()
    assert status in (404, 405), (path, status, body[:200])
    assert b'"error"' in body
    assert len(provider.paths) == asked, provider.paths[asked:]
