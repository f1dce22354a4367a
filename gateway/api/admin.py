"""Admin routes: budgets, usage and savings per org; add, list and revoke virtual keys.

All of them need ``Authorization: Bearer <SIEVE_ADMIN_KEY>``; without an admin
key configured they do not exist (404)::

    curl -H "Authorization: Bearer $SIEVE_ADMIN_KEY" localhost:8080/admin/budgets/acme
    curl -X POST -H "Authorization: Bearer $SIEVE_ADMIN_KEY" -d '{"org": "acme", "team": "search",
         "name": "ci-bot"}' localhost:8080/admin/keys          # -> {"key": "sk-sieve-...", ...} once
    curl -X DELETE -H "Authorization: Bearer $SIEVE_ADMIN_KEY" localhost:8080/admin/keys/<sha256>

Budgets and usage come from the budget store (shared by every replica when it
is Redis). Savings come from this process's Prometheus counters, so they are
per replica and restart from zero; Prometheus sums them across pods.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Mapping

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.api.access import Access, guarded
from gateway.api.protocol import parse_body, read_body
from gateway.api.responses import json_response
from gateway.budgets import BudgetConfig, BudgetLimit, BudgetStatus, Scope, Window, utc_iso
from gateway.errors import InvalidRequest
from gateway.identity import KeyRecord, hash_key
from gateway.services import Services

KEY_PREFIX = "sk-sieve-"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_KEY_FIELDS = ("org", "team", "name")


def _services(request: Request) -> Services:
    return request.app.state.services  # the guard has checked the admin key


async def budgets(request: Request) -> Response:
    services = _services(request)
    org = request.path_params["org"]
    limits = configured_limits(services.budget_guard.config, org)
    statuses = await services.budget_guard.store.remaining(limits, time.time()) if limits else []
    return json_response({"org": org, "windows": "calendar, UTC",
                          "budgets": [status_json(s) for s in statuses]})


async def usage(request: Request) -> Response:
    services = _services(request)
    org = request.path_params["org"]
    statuses = await services.budget_guard.store.usage(org, time.time())
    return json_response({"org": org, "windows": "calendar, UTC",
                          "counters": [status_json(s) for s in statuses],
                          "unmetered_tokens_this_replica": services.budget_guard.unmetered_tokens(org)})


async def savings(request: Request) -> Response:
    services = _services(request)
    org = request.path_params["org"]
    return json_response({"org": org, **savings_totals(services.metrics, org)})


async def create_key(request: Request) -> Response:
    services = _services(request)
    fields = key_fields(parse_body(await read_body(request, 64 * 1024)))
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    record = KeyRecord(hash_key(plaintext), fields["org"], fields.get("team"), fields.get("name"))
    await services.key_store.add(record)
    return json_response({"key": plaintext, **record.to_dict()}, status=201)


async def list_keys(request: Request) -> Response:
    services = _services(request)
    records = await services.key_store.list(request.query_params.get("org") or None)
    return json_response({"object": "list", "data": [r.to_dict() for r in records]})


async def revoke_key(request: Request) -> Response:
    services = _services(request)
    digest = request.path_params["key_sha256"].lower()
    if not _SHA256_HEX.match(digest):
        raise InvalidRequest("key_sha256 must be the 64 hex characters of the key's SHA-256", param="key_sha256")
    await services.key_store.revoke(digest)
    return json_response({"key_sha256": digest, "revoked": True})


async def keys(request: Request) -> Response:
    # One route per path: Starlette builds a 405's Allow header from the first route whose
    # path matches, so GET and POST on two routes would advertise only one of them.
    return await (create_key if request.method == "POST" else list_keys)(request)


# -- the few pieces of logic behind them ------------------------------------------------------------

def configured_limits(config: BudgetConfig, org: str) -> list[BudgetLimit]:
    """Every limit configured for ``org``: its own, then teams and keys (``org/name`` beats ``name``)."""
    found = [BudgetLimit(org, Scope.ORG, org, w, n) for w, n in _ordered(config.orgs.get(org))]
    for scope, section in ((Scope.TEAM, config.teams), (Scope.KEY, config.keys)):
        chosen: dict[str, Mapping[Window, int]] = {n: w for n, w in section.items() if "/" not in n}
        chosen.update({n.split("/", 1)[1]: w for n, w in section.items() if n.split("/", 1)[0] == org and "/" in n})
        for name in sorted(chosen):
            found.extend(BudgetLimit(org, scope, name, w, n) for w, n in _ordered(chosen[name]))
    return found


def _ordered(windows: Mapping[Window, int] | None) -> list[tuple[Window, int]]:
    return [(w, windows[w]) for w in Window if windows and w in windows]


def status_json(status: BudgetStatus) -> dict[str, Any]:
    limit = status.limit
    return {"budget": limit.name, "scope": limit.scope.value, "scope_id": limit.scope_id,
            "window": limit.window.value, "bucket": status.bucket, "limit": limit.limit,
            "reserved": status.reserved, "settled": status.settled, "used": status.used,
            "remaining": status.remaining, "reset_at": utc_iso(status.reset_at)}


def savings_totals(metrics: Any, org: str) -> dict[str, Any]:
    """This replica's counters for ``org`` (an org outside the label bounds is counted as ``other``)."""
    usd = {kind: _sum(metrics.cost_usd, org, kind=kind) for kind in ("counterfactual", "actual", "scorer")}
    original = int(_sum(metrics.prompt_tokens_original, org))
    forwarded = int(_sum(metrics.prompt_tokens_forwarded, org))
    return {
        "scope": "replica",
        "usd": {**usd, "net_saving": usd["counterfactual"] - usd["actual"] - usd["scorer"]},
        "tokens": {"prompt_original": original, "prompt_forwarded": forwarded,
                   "prompt_saved": original - forwarded,
                   "completion": int(_sum(metrics.completion_tokens, org))},
        "requests": int(_sum(metrics.requests, org)),
    }


def _sum(counter: Counter, org: str, **labels: str) -> float:
    total = 0.0
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("org") == org and \
                    all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def key_fields(body: Mapping[str, Any]) -> dict[str, str]:
    unknown = sorted(set(body) - set(_KEY_FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}; allowed: org, team, name", param=unknown[0])
    out = {}
    for field in _KEY_FIELDS:
        value = body.get(field)
        if value is None and field != "org":
            continue
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"'{field}' must be a non-empty string", param=field)
        out[field] = value.strip()
    return out


ADMIN_ROUTES = [
    Route("/admin/budgets/{org}", guarded(Access.ADMIN, budgets), methods=["GET"]),
    Route("/admin/usage/{org}", guarded(Access.ADMIN, usage), methods=["GET"]),
    Route("/admin/savings/{org}", guarded(Access.ADMIN, savings), methods=["GET"]),
    Route("/admin/keys", guarded(Access.ADMIN, keys), methods=["GET", "POST"]),
    Route("/admin/keys/{key_sha256}", guarded(Access.ADMIN, revoke_key), methods=["DELETE"]),
]
