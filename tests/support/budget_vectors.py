"""Issue 28's budget vectors, run against real replicas: what the provider billed each org, and what
its budget was charged.

Two gateways (threads under uvicorn) share one redis-server and the gateway's own provider
keys; :class:`tests.support.billing_provider.BillingProvider` bills real token counts and keeps
Responses server-side. Each vector is one org with a day budget of ``budget`` tokens,
attacked by 16 concurrent callers split over the two replicas::

    python -m tests.support.budget_vectors [--budget 20000]     # a table: vector, billed, charged, reserved

(run on any tree: it uses only settings every release has; ``tests/integration/
test_budget_vectors.py`` holds the figures to the issue's bound). A vector's stored history
is made first (through Sieve, under a separate minute budget, billed to a separate tag).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Callable

import httpx

from gateway.config.settings import Settings
from tests.support.billing_provider import DOCUMENT_TOKENS, BillingProvider
from tests.support.gateway_server import GatewayServer
from tests.support.redis_server import RedisServer

CONCURRENCY = 16
ATTEMPTS = 2  # per caller: 32 requests a vector
ADMIN = "sieve-admin-vectors"
HISTORY = "the ledger line reads " * 2_750  # about 11k tokens of stored history
LONG_HISTORY = "the ledger line reads " * 21_000  # about 84k
DOC_URL = "https://docs.example/annual-report.pdf"


@dataclass(frozen=True)
class Vector:
    org: str
    path: str
    body: Callable[[dict[str, str]], dict[str, Any]]  # from the stored ids the setup made
    setup: str | None = None  # the stored history it continues: "history" or "long_history"


VECTORS = {
    "responses continuation (previous_response_id)": Vector(
        "v-continue", "/v1/responses",
        lambda ids: {"model": "gpt-5", "previous_response_id": ids["v-continue"], "input": "and then?",
                     "max_output_tokens": 50}, "history"),
    "messages document by URL": Vector(
        "v-document", "/v1/messages",
        lambda ids: {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "url", "url": DOC_URL}},
            {"type": "text", "text": "Summarise it."}]}]}),
    "responses input_file by file_url": Vector(
        "v-file-url", "/v1/responses",
        lambda ids: {"model": "gpt-5", "max_output_tokens": 50, "input": [{"role": "user", "content": [
            {"type": "input_file", "file_url": DOC_URL}, {"type": "input_text", "text": "Summarise it."}]}]}),
    "chat file part by file_id": Vector(
        "v-file-id", "/v1/chat/completions",
        lambda ids: {"model": "gpt-4o-mini", "max_tokens": 50, "messages": [{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-abc123"}}, {"type": "text", "text": "Summarise it."}]}]}),
    "unknown model, no max_tokens, long output": Vector(
        "v-unknown", "/v1/chat/completions",
        lambda ids: {"model": "house-model-x", "messages": [{"role": "user", "content": "Tell me everything."}]}),
    "responses compact of an 84k stored history": Vector(
        "v-compact", "/v1/responses/compact",
        # gpt-4o-mini's output limit (16,384) is what the body alone reserves: under the budget.
        lambda ids: {"model": "gpt-4o-mini", "previous_response_id": ids["v-compact"]}, "long_history"),
}


def key_of(org: str) -> str:
    return f"sk-sieve-{org}-0123456789abcdef"


def settings(provider: BillingProvider, redis: RedisServer, budget: int, audit: Path | None,
             window: str = "day") -> Settings:
    orgs = [v.org for v in VECTORS.values()]
    return Settings(upstream_base_url=provider.base_url, anthropic_base_url=provider.anthropic_base_url,
                    upstream_api_key="sk-gateway-openai", anthropic_api_key="sk-gateway-anthropic",
                    redis_url=redis.url, admin_key=ADMIN, audit_log=str(audit) if audit else None,
                    virtual_keys=tuple({"key": key_of(org), "org": org} for org in orgs),
                    budgets={"orgs": {org: {window: budget} for org in orgs}})


def headers(org: str, tag: str | None = None) -> dict[str, str]:
    return {"authorization": f"Bearer {key_of(org)}", "x-sieve-strategy": "none",
            "x-stainless-billing-org": tag or org, "anthropic-version": "2023-06-01"}


def make_histories(gw: GatewayServer) -> dict[str, str]:
    """The stored responses the continuation vectors name, made by their orgs through Sieve."""
    ids = {}
    for vector in VECTORS.values():
        if vector.setup is None:
            continue
        text = HISTORY if vector.setup == "history" else LONG_HISTORY
        made = httpx.post(gw.base_url + "/v1/responses", headers=headers(vector.org, "setup"), timeout=60,
                          json={"model": "gpt-5", "input": text, "max_output_tokens": 20})
        assert made.status_code == 200, made.text[:300]
        ids[vector.org] = made.json()["id"]
    return ids


def attack(replicas: list[GatewayServer], vector: Vector, ids: dict[str, str]) -> list[int]:
    """16 callers over the replicas, each sending until refused or ``ATTEMPTS`` are sent: the statuses."""
    body = vector.body(ids)

    def caller(i: int) -> list[int]:
        statuses = []
        with httpx.Client(base_url=replicas[i % len(replicas)].base_url, timeout=120) as client:
            for _ in range(ATTEMPTS):
                status = client.post(vector.path, json=body, headers=headers(vector.org)).status_code
                statuses.append(status)
                if status == 429:
                    break
        return statuses

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return [s for statuses in pool.map(caller, range(CONCURRENCY)) for s in statuses]


def charged(gw: GatewayServer, org: str) -> int:
    usage = httpx.get(gw.base_url + f"/admin/usage/{org}", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    return sum(c["settled"] for c in usage.json()["counters"] if c["budget"] == f"org:{org}:day")


def reserved_most(audits: list[Path], org: str) -> int:
    """The largest reservation one request of ``org`` held (the audit lines' ``budget``; 0 on a
    tree whose lines do not say)."""
    most = 0
    for path in audits:
        for line in path.read_text().splitlines() if path.exists() else ():
            entry = json.loads(line)
            budget = entry.get("budget") or {}
            if entry.get("org") == org and budget.get("reserved_tokens"):
                most = max(most, budget["reserved_tokens"])
    return most


def run(budget: int = 20_000) -> dict[str, dict[str, int]]:
    """Every vector once: per vector the tokens billed, charged, the largest reservation, and the
    statuses counted."""
    results: dict[str, dict[str, int]] = {}
    with RedisServer() as redis, BillingProvider() as provider, TemporaryDirectory() as tmp:
        with GatewayServer(settings(provider, redis, 10_000_000, None, window="minute")) as setup:
            ids = make_histories(setup)
        audits = [Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"]
        with GatewayServer(settings(provider, redis, budget, audits[0])) as one, \
                GatewayServer(settings(provider, redis, budget, audits[1])) as two:
            for name, vector in VECTORS.items():
                statuses = attack([one, two], vector, ids)
                one.wait_idle(30)
                two.wait_idle(30)
                results[name] = {"billed": provider.billed[vector.org], "charged": charged(one, vector.org),
                                 "reserved": reserved_most(audits, vector.org),
                                 "ok": statuses.count(200), "refused": statuses.count(429),
                                 "other": sum(1 for s in statuses if s not in (200, 429))}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=20_000)
    budget = ap.parse_args().budget
    print(f"| vector (budget {budget:,}; documents bill {DOCUMENT_TOKENS:,}) | billed | charged | "
          "largest reservation | 200 / 429 / other |")
    print("|---|---|---|---|---|")
    for name, r in run(budget).items():
        print(f"| {name} | {r['billed']:,} | {r['charged']:,} | {r['reserved']:,} | "
              f"{r['ok']} / {r['refused']} / {r['other']} |", flush=True)


if __name__ == "__main__":
    main()
