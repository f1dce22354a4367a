"""Admin routes over HTTP: the admin key, budgets/usage/savings per org, the virtual-key round trip."""

from __future__ import annotations

import hashlib
from typing import Iterator

import httpx
import openai
import pytest

from gateway.config.settings import Settings
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import ADMIN_KEY, MODEL, admin_headers, org_counter
from tests.support import NO_PRUNING, openai_client

USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
BUDGETS = {"orgs": {"acme": {"minute": 5_000, "day": 90_000}},
           "teams": {"acme/search": {"hour": 8_000}, "ops": {"day": 1_000}, "beta/ops": {"day": 7}},
           "keys": {"ci": {"month": 3_000}}}
PRICES = {MODEL: {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}

# Calendar-window budgets charged, then read back; the module's gateway has its own fake upstream.
pytestmark = [pytest.mark.usefixtures("clear_of_a_minute_edge"),
              pytest.mark.upstream_default(Reply(content="fine", usage=USAGE))]


@pytest.fixture(scope="module")
def gateway(module_upstream_server: FakeUpstream) -> Iterator[GatewayServer]:
    settings = Settings(upstream_base_url=module_upstream_server.base_url, admin_key=ADMIN_KEY, budgets=BUDGETS,
                        prices=PRICES,
                        virtual_keys=({"key": "sk-file-key", "org": "acme", "team": "search", "name": "file"},))
    with GatewayServer(settings) as gw:
        yield gw


def sdk_chat(gw: GatewayServer, key: str) -> openai.types.chat.ChatCompletion:
    llm = openai_client(gw, key, headers=NO_PRUNING)
    return llm.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10)


def test_admin_routes_need_the_admin_key(gateway: GatewayServer) -> None:
    missing = gateway.get("/admin/budgets/acme")
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    wrong = gateway.get("/admin/budgets/acme", headers=admin_headers("sk-file-key"))
    assert wrong.status_code == 403
    assert wrong.json()["error"] == {"message": "This key is not the admin key.", "type": "permission_error",
                                     "param": None, "code": "not_admin"}
    basic = gateway.get("/admin/keys", headers={"authorization": "Basic abc"})
    assert basic.status_code == 401
    # The admin key is not a chat key.
    assert gateway.post("/v1/chat/completions", headers=admin_headers(),
                        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).status_code == 401


def test_admin_routes_do_not_exist_without_an_admin_key(module_upstream: FakeUpstream) -> None:
    settings = Settings(upstream_base_url=module_upstream.base_url, virtual_keys=({"key": "sk-k", "org": "o"},))
    with GatewayServer(settings) as gw:
        response = gw.get("/admin/budgets/o", headers=admin_headers())
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert "no SIEVE_ADMIN_KEY" in response.json()["error"]["message"]


def test_budgets_usage_and_savings_of_an_org(gateway: GatewayServer) -> None:
    sdk_chat(gateway, "sk-file-key")
    gateway.wait_idle()
    budgets = gateway.get("/admin/budgets/acme", headers=admin_headers()).json()
    names = [b["budget"] for b in budgets["budgets"]]
    # Org windows short to long, then teams (acme/search; the bare 'ops'), then keys; 'beta/ops' is another org's.
    assert names == ["org:acme:minute", "org:acme:day", "team:acme/ops:day", "team:acme/search:hour",
                     "key:acme/ci:month"]
    day = org_counter(budgets["budgets"], "org:acme:day")
    assert (day["limit"], day["used"], day["remaining"], day["reserved"]) == (90_000, 25, 89_975, 0)
    assert day["reset_at"].endswith("T00:00:00Z") and budgets["windows"] == "calendar, UTC"
    assert org_counter(budgets["budgets"], "team:acme/ops:day")["used"] == 0  # configured, untouched

    usage = gateway.get("/admin/usage/acme", headers=admin_headers()).json()
    assert {c["budget"] for c in usage["counters"]} == {"org:acme:minute", "org:acme:day", "team:acme/search:hour"}
    assert all(c["settled"] == 25 for c in usage["counters"])
    assert usage["unmetered_tokens_this_replica"] == 0

    savings = gateway.get("/admin/savings/acme", headers=admin_headers()).json()
    assert savings["scope"] == "replica" and savings["requests"] >= 1
    assert savings["tokens"]["completion"] >= 5
    assert savings["usd"]["actual"] == pytest.approx(savings["requests"] * (20e-6 + 10e-6))
    assert savings["usd"]["net_saving"] == pytest.approx(0.0)  # nothing pruned: no saving, no loss


def test_virtual_key_round_trip(gateway: GatewayServer) -> None:
    created = gateway.post("/admin/keys", headers=admin_headers(), json={"org": "acme", "team": "search", "name": "ci"})
    assert created.status_code == 201, created.text
    record = created.json()
    key = record["key"]
    assert key.startswith("sk-sieve-") and len(key) > 40
    assert record["key_sha256"] == hashlib.sha256(key.encode()).hexdigest()
    assert (record["org"], record["team"], record["name"], record["revoked"]) == ("acme", "search", "ci", False)

    assert sdk_chat(gateway, key).choices[0].message.content == "fine"
    gateway.wait_idle()
    usage = gateway.get("/admin/usage/acme", headers=admin_headers()).json()["counters"]
    assert org_counter(usage, "key:acme/ci:month")["settled"] == 25  # the new key's own budget was charged

    listed = gateway.get("/admin/keys", params={"org": "acme"}, headers=admin_headers()).json()["data"]
    assert [r["key_sha256"] for r in listed] == [record["key_sha256"]]
    assert key not in str(listed)  # only the hash is stored and shown
    assert gateway.get("/admin/keys", params={"org": "nobody"}, headers=admin_headers()).json()["data"] == []

    revoked = httpx.delete(f"{gateway.base_url}/admin/keys/{record['key_sha256']}", headers=admin_headers())
    assert revoked.status_code == 200 and revoked.json() == {"key_sha256": record["key_sha256"], "revoked": True}
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk_chat(gateway, key)
    assert "revoked" in caught.value.body["message"]


def test_revoking_a_file_key_masks_it(gateway: GatewayServer) -> None:
    digest = hashlib.sha256(b"sk-file-key").hexdigest()
    assert httpx.delete(f"{gateway.base_url}/admin/keys/{digest}", headers=admin_headers()).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        sdk_chat(gateway, "sk-file-key")


@pytest.mark.parametrize("body, field", [
    ({"team": "t"}, "org"), ({"org": ""}, "org"), ({"org": "a", "nmae": "x"}, "nmae"),
    ({"org": "a", "team": 3}, "team"),
])
def test_create_key_rejects_bad_bodies(gateway: GatewayServer, body: dict, field: str) -> None:
    response = gateway.post("/admin/keys", headers=admin_headers(), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field


def test_revoke_needs_a_sha256(gateway: GatewayServer) -> None:
    response = httpx.delete(f"{gateway.base_url}/admin/keys/sk-sieve-plaintext", headers=admin_headers())
    assert response.status_code == 400 and response.json()["error"]["param"] == "key_sha256"


def test_a_wrong_method_names_every_allowed_one(gateway: GatewayServer) -> None:
    # Found by fuzzing: GET and POST /admin/keys sat on two routes, and the 405 said "Allow: POST".
    response = httpx.put(f"{gateway.base_url}/admin/keys", headers=admin_headers(), json={})
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
