"""Security on the wire: who may call what, what never leaks, what one org can never see.

Real servers throughout: the gateway under uvicorn, the fake upstream and fake
scorer model (real HTTP servers), redis-server where state is shared. Leaks are
looked for in everything Sieve emits: response bodies and headers, /metrics,
/v1/prune output, the audit log, and every log record of the process.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest
import redis

from gateway.api.access import GuardedRoute
from gateway.api.app import create_app
from gateway.errors import ConfigError
from gateway.config.settings import OPS_ROUTES, Settings
from tests.support.conversations import agent_history
from tests.support.fake_scorer import ScorerModel
from tests.support.fake_upstream import Reply
from tests.support.gateway_server import GatewayServer
from tests.support.redis_server import RedisServer, skip_without_redis
from tests.support import bearer, scorer_failures

UPSTREAM_KEY = "sk-upstream-PLANTED-0123456789abcdef"
ADMIN_KEY = "admin-PLANTED-key-0123456789"
METRICS_KEY = "metrics-PLANTED-key-0123456789"
ACME, BETA = "sk-sieve-acme-0123456789abcdef", "sk-sieve-beta-0123456789abcdef"
KEYS = ({"key": ACME, "org": "acme"}, {"key": BETA, "org": "beta"})
SECRETS = (UPSTREAM_KEY, ADMIN_KEY, METRICS_KEY, ACME, BETA)
ROUTES = create_app(Settings()).routes  # the route table as the app serves it


def chat_body(content: str = "hello") -> dict:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]}


def long_chat(steps: int = 30) -> dict:
    return {"model": "gpt-4o-mini", "messages": agent_history(steps)}


def sample_path(route) -> str:
    return route.path.replace("{org}", "acme").replace("{key_sha256}", "0" * 64) \
        .replace("{response_id:response_id}", "resp_1").replace("{asset}", "swagger-ui.css")


# -- access ---------------------------------------------------------------------------------------------

def test_every_route_declares_its_access_level() -> None:
    for route in ROUTES:
        assert isinstance(route, GuardedRoute) and route.access is not None, f"{route.path} is not guarded"


def test_without_a_key_only_the_open_routes_answer(start_gateway) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY)
    for route in ROUTES:
        for method in sorted(route.methods - {"HEAD"}):
            resp = httpx.request(method, gw.base_url + sample_path(route), timeout=10)
            if route.path in OPS_ROUTES or route.path.startswith("/docs/"):  # Swagger UI's assets: as /docs
                assert resp.status_code in (200, 404), (route.path, resp.text)  # /openapi.json may not exist yet
            else:
                assert resp.status_code == 401, (method, route.path, resp.status_code)
                assert resp.json()["error"]["type"] == "authentication_error"


def test_admin_routes_refuse_a_client_key(start_gateway) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY)
    for route in ROUTES:
        if route.path.startswith("/admin"):
            for method in sorted(route.methods - {"HEAD"}):
                resp = httpx.request(method, gw.base_url + sample_path(route), headers=bearer(ACME), timeout=10)
                assert resp.status_code == 403, (method, route.path)
                assert resp.json()["error"]["code"] == "not_admin"


def test_closed_ops_routes_need_the_metrics_or_admin_key(start_gateway) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, metrics_key=METRICS_KEY, open_routes=("/healthz",))
    assert gw.get("/healthz").status_code == 200
    for path in ("/metrics", "/readyz"):
        missing = gw.get(path)
        assert missing.status_code == 401 and "SIEVE_OPEN_ROUTES" in missing.json()["error"]["message"]
        assert gw.get(path, headers=bearer(ACME)).status_code == 403  # a client key is not enough
        assert gw.get(path, headers=bearer(METRICS_KEY)).status_code == 200
        assert gw.get(path, headers=bearer(ADMIN_KEY)).status_code == 200


@pytest.mark.parametrize("routes", ["/v1/prune", "/admin/keys", "/healthz,/v1/chat/completions"])
def test_only_ops_routes_can_be_opened(routes: str) -> None:
    with pytest.raises(ConfigError, match="cannot be open"):
        Settings.from_env({"SIEVE_OPEN_ROUTES": routes})


def test_open_routes_can_all_be_closed() -> None:
    assert Settings.from_env({"SIEVE_OPEN_ROUTES": ""}).open_routes == ()


# -- nothing leaks ------------------------------------------------------------------------------------

@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()}\n{r.exc_text or ''}" for r in caplog.records)


def test_provider_keys_never_leave_the_gateway(start_gateway, upstream, all_logs, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, upstream_api_key=UPSTREAM_KEY, audit_log=str(audit))
    # A provider that echoes the key it was given, as OpenAI's 401 does.
    upstream.enqueue(Reply(status=401, json_body={"error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}",
                                                            "type": "invalid_request_error"}}))
    refused = gw.post("/v1/chat/completions", json=chat_body(), headers=bearer(ACME))
    assert refused.status_code == 401
    assert "Incorrect API key provided: [redacted]" in refused.json()["error"]["message"]
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # it was used
    ok = gw.post("/v1/chat/completions", json=chat_body(), headers=bearer(ACME))
    pruned = gw.post("/v1/prune", json=long_chat(), headers={**bearer(ACME), "x-sieve-target-tokens": "800"})
    metrics = gw.get("/metrics")
    gw.post("/v1/chat/completions", json={"model": 1}, headers=bearer(ACME))  # a 400
    # Another library logging a key by mistake is scrubbed too: the filter is process-wide.
    logging.getLogger("aiohttp.client").warning("retrying with key %s", UPSTREAM_KEY)
    gw.wait_idle()
    emitted = [refused.text, str(refused.headers), ok.text, str(ok.headers), pruned.text, metrics.text,
               audit.read_text(), logged_text(all_logs)]
    for secret in SECRETS:
        for i, text in enumerate(emitted):
            assert secret not in text, (secret, i)
    assert "retrying with key [redacted]" in logged_text(all_logs)


def llm_scorer_policy(tmp_path: Path, scorer: ScorerModel, extra: str = "") -> Path:
    """A policies folder whose default policy asks ``scorer`` about every candidate."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text(
        f"scorer: llm\nscorer_api_base: {json.dumps(scorer.base_url)}\nscorer_min_history_tokens: 0\n"
        f"scorer_cost_check: false\n{extra}")
    return folder


SENTINEL = "PLANTED-CONTENT-Zq8vX3-the-user-private-note"


def test_request_content_is_never_logged(tmp_path: Path, upstream, all_logs) -> None:
    """Every failure path that logs: a scorer answering garbage that quotes the request,
    a scorer error body quoting it, an upstream 500 quoting it, a pruning fallback."""
    def respond(ids, attempt, request_json):
        quoted = f"I refuse. You said: {SENTINEL}"
        return Reply(content=quoted) if ids and ids[0] % 2 else Reply(status=500, json_body={"error": quoted})

    with ScorerModel(respond) as scorer:
        folder = llm_scorer_policy(tmp_path, scorer, "scorer_batch_size: 4\n")
        audit = tmp_path / "audit.jsonl"
        with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=folder,
                                    virtual_keys=KEYS, audit_log=str(audit))) as gw:
            body = long_chat()
            for message in body["messages"]:
                if isinstance(message.get("content"), str):
                    message["content"] += f" {SENTINEL}"
            upstream.enqueue(Reply(status=500, json_body={"error": {"message": f"boom near {SENTINEL}"}}))
            failed = gw.post("/v1/chat/completions", json=body,
                             headers={**bearer(ACME), "x-sieve-target-tokens": "1500"})
            assert failed.status_code == 500  # the upstream's own error, relayed
            served = gw.post("/v1/chat/completions", json=body,
                             headers={**bearer(ACME), "x-sieve-target-tokens": "1500"})
            assert served.status_code == 200
            gw.wait_idle()
            assert scorer.batches(), "the scorer model was asked"
            failures = scorer_failures(gw.metrics)
            assert failures.get("parse", 0) + failures.get("http_error", 0) > 0
    assert all_logs.records, "the failures were logged"
    assert SENTINEL not in logged_text(all_logs)
    assert SENTINEL not in audit.read_text()


# -- one org never sees another's ------------------------------------------------------------------------

@pytest.fixture
def redis_url(tmp_path: Path):
    skip_without_redis()
    with RedisServer() as server:
        yield server.url


@pytest.mark.redis
def test_orgs_never_share_conversation_state(start_gateway, redis_url: str) -> None:
    gw = start_gateway(virtual_keys=KEYS, redis_url=redis_url)
    headers = {"x-sieve-conversation-id": "shared-id", "x-sieve-target-tokens": "1500"}
    body = long_chat()

    def prune_as(key: str) -> dict:
        resp = gw.post("/v1/prune", json=body, headers={**bearer(key), **headers})
        assert resp.status_code == 200, resp.text
        return resp.json()["report"]

    def forward_as(key: str) -> None:
        resp = gw.post("/v1/chat/completions", json=body, headers={**bearer(key), **headers})
        assert resp.status_code == 200, resp.text

    assert prune_as(ACME)["mode"] == "stateless"  # no state yet (and a dry run writes none)
    forward_as(ACME)
    assert prune_as(ACME)["mode"] == "frozen"      # acme's own plan, reused
    assert prune_as(BETA)["mode"] == "stateless"   # the same id names nothing of acme's for beta
    forward_as(BETA)
    keys = sorted(k.decode() for k in redis.Redis.from_url(redis_url).keys("sieve:conv:*")
                  if not k.endswith(b"%7Cexpand}") and b"cohort-secret" not in k
                  and b"%7Cdry%7C" not in k)  # live plans only (a dry run's rehearsal is its own)
    assert len(keys) == 2
    assert keys[0].startswith("sieve:conv:{acme%3A") and keys[1].startswith("sieve:conv:{beta%3A")


@pytest.mark.redis
def test_score_cache_is_per_org(tmp_path: Path, upstream, redis_url: str) -> None:
    asked: list[list[int]] = []

    def respond(ids, attempt, request_json):
        asked.append(ids)
        return Reply(content=json.dumps({"scores": [{"id": i, "score": 3, "reason": "x"} for i in ids]}))

    with ScorerModel(respond) as scorer:
        folder = llm_scorer_policy(tmp_path, scorer)
        with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=folder,
                                    virtual_keys=KEYS, redis_url=redis_url)) as gw:
            units_asked = []
            for key in (ACME, BETA):
                before = sum(map(len, asked))
                resp = gw.post("/v1/prune", json=long_chat(), headers={**bearer(key), "x-sieve-target-tokens": "1500"})
                assert resp.status_code == 200
                units_asked.append(sum(map(len, asked)) - before)
    cached = [k.decode() for k in redis.Redis.from_url(redis_url).keys("sieve:score:*")]
    orgs = sorted({k.split("{", 1)[1].split("%3A", 1)[0] for k in cached})
    assert orgs == ["acme", "beta"]
    # beta's identical units were scored afresh, not answered from acme's entries
    assert units_asked[0] > 0 and units_asked[1] == units_asked[0]
    assert len(cached) == 2 * units_asked[0]


def test_usage_of_an_org_is_admin_only(start_gateway) -> None:
    gw = start_gateway(virtual_keys=KEYS, admin_key=ADMIN_KEY, budgets={"orgs": {"acme": {"day": 100000}}})
    assert gw.get("/admin/usage/acme", headers=bearer(BETA)).status_code == 403
    assert gw.get("/admin/usage/acme", headers=bearer(ACME)).status_code == 403
    assert gw.get("/admin/usage/acme", headers=bearer(ADMIN_KEY)).status_code == 200


# -- overrides limited by policy ------------------------------------------------------------------------

def test_policy_limits_the_steering_headers(start_gateway, tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text("allow_overrides: [target_tokens, goal]\n"
                                         "override_min_target_tokens: 1000\noverride_max_target_tokens: 50000\n")
    gw = start_gateway(virtual_keys=KEYS, policies_dir=folder)

    def send(**headers: str) -> httpx.Response:
        return gw.post("/v1/prune", json=long_chat(), headers={**bearer(ACME), **headers})

    off = send(**{"x-sieve-strategy": "none"})
    assert off.status_code == 403 and off.json()["error"]["param"] == "x-sieve-strategy"
    assert "does not allow the x-sieve-strategy header" in off.json()["error"]["message"]
    low = send(**{"x-sieve-target-tokens": "10"})
    assert low.status_code == 403 and "1000..50000" in low.json()["error"]["message"]
    assert send(**{"x-sieve-target-tokens": "60000"}).status_code == 403
    assert send(**{"x-sieve-target-tokens": "2000", "x-sieve-goal": "fix the build"}).status_code == 200


def test_allow_overrides_false_refuses_every_steering_header(start_gateway, tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text("allow_overrides: false\n")
    gw = start_gateway(virtual_keys=KEYS, policies_dir=folder)
    for header, value in (("x-sieve-target-tokens", "2000"), ("x-sieve-strategy", "window"), ("x-sieve-goal", "g")):
        resp = gw.post("/v1/prune", json=chat_body(), headers={**bearer(ACME), header: value})
        assert resp.status_code == 403 and resp.json()["error"]["param"] == header
    # The conversation id is no steering: it only names the caller's own state.
    assert gw.post("/v1/prune", json=chat_body(), headers={**bearer(ACME), "x-sieve-conversation-id": "c1"}).status_code == 200
