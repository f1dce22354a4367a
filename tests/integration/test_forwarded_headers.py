"""Which client headers reach the provider.

With the gateway's provider key, a tenant must not choose which provider org or
project is billed, nor pass its network's headers on: only an allowlist goes
(gateway.upstream.openai_compat.FORWARDED_WITH_GATEWAY_KEY). With the client's
own provider key (passthrough, an open gateway) its own org and project headers
go with it. Callers are the official openai client; the provider is the recording
fake upstream.
"""

from __future__ import annotations

import hashlib

from tests.support import openai_client

UPSTREAM_KEY = "sk-upstream-PLANTED-0123456789abcdef"
ACME = "sk-sieve-acme-0123456789abcdef"
PROVIDER_KEY = "sk-proj-client-own-0123456789abcdef"
STEERING = {"x-forwarded-for": "203.0.113.7", "forwarded": "for=203.0.113.7", "x-real-ip": "203.0.113.7",
            "cookie": "session=abc", "x-custom-tenant-header": "anything"}
ALLOWED = {"idempotency-key": "retry-42", "openai-beta": "assistants=v2", "x-client-request-id": "cli-1"}


def ask(gw, key: str) -> None:
    client = openai_client(gw, key, headers={**STEERING, **ALLOWED})
    client.organization, client.project = "org-victim", "proj-victim"
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])


def test_with_the_gateways_key_only_the_allowlist_is_forwarded(start_gateway, upstream) -> None:
    gw = start_gateway(virtual_keys=({"key": ACME, "org": "acme"},), upstream_api_key=UPSTREAM_KEY)
    ask(gw, ACME)
    sent = upstream.requests[-1].headers
    assert sent["authorization"] == f"Bearer {UPSTREAM_KEY}"
    for name in ("openai-organization", "openai-project", *STEERING):
        assert name not in sent, name
    for name, value in ALLOWED.items():
        assert sent[name] == value
    assert sent["user-agent"].startswith("OpenAI/Python")
    assert sent["x-stainless-lang"] == "python"  # the SDK's own description of itself
    assert sent["accept"] == "application/json"


def test_a_virtual_key_without_a_gateway_key_forwards_no_key_and_no_org(start_gateway, upstream) -> None:
    gw = start_gateway(virtual_keys=({"key": ACME, "org": "acme"},))
    ask(gw, ACME)
    sent = upstream.requests[-1].headers
    assert "authorization" not in sent  # a virtual key never leaves the gateway
    assert "openai-organization" not in sent and "x-forwarded-for" not in sent


def test_with_the_clients_own_key_its_org_and_project_go_along(start_gateway, upstream) -> None:
    digest = hashlib.sha256(PROVIDER_KEY.encode()).hexdigest()
    gw = start_gateway(passthrough={digest: "acme"})
    ask(gw, PROVIDER_KEY)
    sent = upstream.requests[-1].headers
    assert sent["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert sent["openai-organization"] == "org-victim" and sent["openai-project"] == "proj-victim"
    assert sent["idempotency-key"] == "retry-42"
    assert "cookie" not in sent  # never: hop-by-hop and credentials of the gateway's own site


def test_an_open_gateway_forwards_the_clients_key_and_its_org(start_gateway, upstream) -> None:
    gw = start_gateway()
    ask(gw, PROVIDER_KEY)
    sent = upstream.requests[-1].headers
    assert sent["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert sent["openai-organization"] == "org-victim"
