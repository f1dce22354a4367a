"""Admin routes: budgets, usage and savings per org; add, list and revoke virtual keys.

All of them need ``Authorization: Bearer <SIEVE_ADMIN_KEY>``; without an admin
key configured they do not exist (404)::

    curl -H "Authorization: Bearer $SIEVE_ADMIN_KEY" localhost:8080/admin/budgets/acme
    curl -X POST -H "Authorization: Bearer $SIEVE_ADMIN_KEY" -d '{"org": "acme", "team": "search",
         "name": "ci-bot"}' localhost:8080/admin/keys          # -> {"key": "sk-sieve-...", ...} once
    curl -X DELETE -H "Authorization: Bearer $SIEVE_ADMIN_KEY" localhost:8080/admin/keys/<sha256>

Budgets and usage come from the budget store (shared by every replica when it
is Redis). Savings are this replica's running totals (the same figures as its
Prometheus counters), so they restart from zero; Prometheus sums them across pods.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from gateway.api.access import AdminRoute
from gateway.api.schemas import answers
from gateway.billing import BudgetStatus, utc_iso
from gateway.auth import hash_key
from gateway.api.services import Services
from gateway.state import KeyRecord

KEY_PREFIX = "sk-sieve-"
NonEmpty = Annotated[str, Field(min_length=1, pattern=r"\S")]  # after stripping whitespace
SHA256 = r"^[0-9a-f]{64}$"


class BudgetState(BaseModel):
    """One limit in its current calendar window (UTC)."""

    budget: str = Field(examples=["org:acme:day"])
    scope: Literal["org", "team", "key"]
    scope_id: str
    window: Literal["minute", "hour", "day", "month"]
    bucket: str = Field(description="The window instance, e.g. 2026-12-01 for a day.")
    limit: int
    reserved: int = Field(description="Held by requests still under way.")
    settled: int
    used: int = Field(description="reserved + settled")
    remaining: int = Field(ge=0)
    reset_at: str = Field(description="When the window rolls over (ISO 8601, UTC).")

    @classmethod
    def of(cls, status: BudgetStatus) -> "BudgetState":
        limit = status.limit
        return cls(budget=limit.name, scope=limit.scope.value, scope_id=limit.scope_id, window=limit.window.value,
                   bucket=status.bucket, limit=limit.limit, reserved=status.reserved, settled=status.settled,
                   used=status.used, remaining=status.remaining, reset_at=utc_iso(status.reset_at))


class Budgets(BaseModel):
    org: str
    windows: Literal["calendar, UTC"] = "calendar, UTC"
    budgets: list[BudgetState]


class BudgetUsage(BaseModel):
    org: str
    windows: Literal["calendar, UTC"] = "calendar, UTC"
    counters: list[BudgetState]
    unmetered_tokens_this_replica: int = Field(
        description="Tokens served on this replica while the budget store was down, not charged yet.")


class SavingsUsd(BaseModel):
    counterfactual: float
    actual: float
    scorer: float
    net_saving: float


class SavingsTokens(BaseModel):
    prompt_original: int
    prompt_forwarded: int
    prompt_saved: int
    completion: int


class Savings(BaseModel):
    org: str
    scope: Literal["replica"] = "replica"
    usd: SavingsUsd
    tokens: SavingsTokens
    requests: int


class NewKey(BaseModel):
    """A virtual key to create; the key itself is generated and shown once."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    org: NonEmpty
    team: NonEmpty | None = None
    name: NonEmpty | None = None


class Key(BaseModel):
    key_sha256: str = Field(pattern=SHA256)
    org: str
    team: str | None = None
    name: str | None = None
    revoked: bool = False


class CreatedKey(Key):
    key: str = Field(pattern=f"^{KEY_PREFIX}", description="The key, shown this once; only its SHA-256 is kept.")


class KeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Key]


class RevokedKey(BaseModel):
    key_sha256: str = Field(pattern=SHA256)
    revoked: Literal[True] = True


def _services(request: Request) -> Services:
    return request.app.state.services  # the guard has checked the admin key


OrgPath = Annotated[str, Path(min_length=1, description="The org, as the keys file and budgets name it.")]
Sha256Path = Annotated[str, Path(pattern=r"^[0-9a-fA-F]{64}$",
                                 description="The 64 hex characters of the key's SHA-256.")]


async def budgets(request: Request, org: OrgPath) -> Budgets:
    guard = _services(request).budget_guard
    limits = guard.config.limits_of_org(org)
    statuses = await guard.store.remaining(limits, time.time()) if limits else []
    return Budgets(org=org, budgets=[BudgetState.of(s) for s in statuses])


async def usage(request: Request, org: OrgPath) -> BudgetUsage:
    guard = _services(request).budget_guard
    statuses = await guard.store.usage(org, time.time())
    return BudgetUsage(org=org, counters=[BudgetState.of(s) for s in statuses],
                 unmetered_tokens_this_replica=guard.unmetered_tokens(org))


async def savings(request: Request, org: OrgPath) -> Savings:
    return Savings(org=org, **_services(request).recorder.totals.of(org))


async def create_key(request: Request, new: NewKey) -> CreatedKey:
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    record = KeyRecord(hash_key(plaintext), new.org, new.team, new.name)
    await _services(request).stores.keys.add(record)
    return CreatedKey(key=plaintext, **record.to_dict())


async def list_keys(request: Request,
                    org: Annotated[str | None, Query(description="Only the keys of this org.")] = None) -> KeyList:
    records = await _services(request).stores.keys.list(org or None)
    return KeyList(data=[Key(**r.to_dict()) for r in records])


async def revoke_key(request: Request, key_sha256: Sha256Path) -> RevokedKey:
    digest = key_sha256.lower()
    await _services(request).stores.keys.revoke(digest)
    return RevokedKey(key_sha256=digest)


ADMIN = dict(tags=["admin"])
STORE = answers("ServiceUnavailable")  # the budget store or the key store is down

ADMIN_ROUTES = [
    AdminRoute("/admin/budgets/{org}", budgets, methods=["GET"], operation_id="orgBudgets",
               summary="Every budget configured for an org, where it stands in its current window.",
               response_description="The org's budgets (empty when none is configured).", openapi_extra=STORE,
               **ADMIN),
    AdminRoute("/admin/usage/{org}", usage, methods=["GET"], operation_id="orgUsage",
               summary="Every counter the budget store holds for an org in its current windows.",
               response_description="The org's counters.", openapi_extra=STORE, **ADMIN),
    AdminRoute("/admin/savings/{org}", savings, methods=["GET"], operation_id="orgSavings",
               summary="This replica's savings counters for an org (Prometheus sums them across replicas).",
               response_description="Dollars and tokens, counted since this process started.", **ADMIN),
    AdminRoute("/admin/keys", list_keys, methods=["GET"], operation_id="listKeys",
               summary="Virtual keys added through the admin API (their hashes; never the keys).",
               response_description="The keys.", openapi_extra=STORE, **ADMIN),
    AdminRoute("/admin/keys", create_key, methods=["POST"], status_code=201, operation_id="createKey",
               summary="Add a virtual key; the key itself is returned once and stored only as its SHA-256.",
               response_description="The new key (shown this once) and its record.",
               openapi_extra=answers("InvalidRequest", "ServiceUnavailable"), **ADMIN),
    AdminRoute("/admin/keys/{key_sha256}", revoke_key, methods=["DELETE"], operation_id="revokeKey",
               summary="Revoke a virtual key by its SHA-256 (idempotent; an unknown hash is recorded as revoked).",
               response_description="Revoked.", openapi_extra=answers("InvalidRequest", "ServiceUnavailable"),
               **ADMIN),
]
