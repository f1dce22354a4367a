"""Everything a request needs, built once per process from Settings.

``Services.start(settings)`` runs in the app's lifespan: it creates the shared
HTTP client and the stores (in-memory, or Redis when ``SIEVE_REDIS_URL`` is
set), loads policies and keys, and wires the proxy. Routes reach it through
``request.app.state.services``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import aiohttp

from gateway.accounting import Accountant
from gateway.api.protocol import WireLimits
from gateway.budget_guard import BudgetGuard
from gateway.budgets import BudgetConfig
from gateway.deferred import Deferred
from gateway.errors import (BodyTooLarge, BudgetExceeded, ConfigError, Forbidden, InvalidRequest, SieveError,
                            StoreUnavailable, Unauthorized)
from gateway.identity import ANONYMOUS, Authenticator, Identity, KeyRegistry, client_provider_key
from gateway.policies import load_policies
from gateway.pruner import Pruner
from gateway.pruning.policy import Policy
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.proxy import ChatProxy
from gateway.scorers.llm import LLMScorer
from gateway.scorers.summaries import Summarizer
from gateway.settings import Settings
from gateway.state.memory import MemoryBudgetStore, MemoryConversationStore, MemoryKeyStore, MemoryScoreCache
from gateway.telemetry.audit import AuditLog
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.pricing import PriceBook
from gateway.telemetry.recording import LabelBounds, record_request
from gateway.telemetry.redaction import protect_logs
from gateway.upstream.litellm_route import LiteLLMUpstream
from gateway.upstream.openai_compat import OpenAICompatibleUpstream
from gateway.upstream.router import ModelRouter

log = logging.getLogger("sieve")

_REJECTIONS: dict[type, str] = {
    BudgetExceeded: "budget_rejected", Unauthorized: "unauthorized", InvalidRequest: "client_error",
    BodyTooLarge: "client_error", Forbidden: "client_error", StoreUnavailable: "fail_closed",
}


@dataclass
class Services:
    settings: Settings
    policies: Mapping[str, Policy]
    default_policy: Policy
    org_policies: Mapping[str, str]
    authenticator: Authenticator | None      # None: open gateway (loopback only)
    router: ModelRouter
    proxy: ChatProxy
    metrics: Metrics
    deferred: Deferred
    session: aiohttp.ClientSession
    redis: Any = None                         # RedisStores when configured
    audit: AuditLog | None = None
    key_store: Any = None
    budget_guard: BudgetGuard | None = None
    scores: Any = None
    conversations: Any = None
    bounds: LabelBounds | None = None
    started_at: float = field(default_factory=time.time)
    limits: WireLimits = field(default_factory=WireLimits)

    @classmethod
    async def start(cls, settings: Settings, metrics: Metrics | None = None) -> "Services":
        settings.check()
        protect_logs(configured_secrets(settings))
        policies = load_policies(settings.policies_dir)
        if settings.default_policy not in policies:
            raise ConfigError(f"default policy {settings.default_policy!r} not found in {settings.policies_dir}")
        for org, name in settings.org_policies.items():
            if name not in policies:
                raise ConfigError(f"org_policies.{org}: policy {name!r} not found in {settings.policies_dir}")
        metrics = metrics or Metrics()
        redis = None
        if settings.redis_url:
            from gateway.state.redis_store import RedisStores  # noqa: PLC0415 - only with Redis

            # After a timeout, Redis is skipped for a second rather than waited for on every call.
            redis = RedisStores.from_url(settings.redis_url, breaker_cooldown_s=1.0)
            conversations, scores, budget_store, key_store = redis.conversations, redis.scores, redis.budgets, redis.keys
        else:
            conversations = MemoryConversationStore(settings.state_max_entries, settings.state_max_bytes)
            scores = MemoryScoreCache()
            budget_store, key_store = MemoryBudgetStore(), MemoryKeyStore()
        authenticator = _authenticator(settings, key_store, policies[settings.default_policy])
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=60)
        # Decompress whatever arrives compressed anyway (content-encoding is never relayed).
        session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",))
        router = ModelRouter(settings)
        bounds = LabelBounds(orgs=_known_orgs(settings), models=router.configured, dynamic_limit=200)
        budgets = BudgetGuard(budget_store, BudgetConfig.from_mapping(settings.budgets), metrics, bounds.org)
        audit = AuditLog.open(settings.audit_log, secrets=configured_secrets(settings))
        deferred = Deferred()
        prices = PriceBook.from_litellm(settings.prices)
        accountant = Accountant(metrics, bounds, prices, budgets, audit)
        counters = TokenCounters(engine=settings.token_engine)
        counters.warm()  # load the encodings now, not on the first request
        llm = LLMScorer(session=session, cache=scores, metrics=metrics, prices=prices, counters=counters,
                        api_key=settings.scorer_api_key)
        pruner = Pruner(counters, LocalScorer(), conversations, metrics, llm=llm,
                        summarizer=Summarizer(llm, prices, metrics))
        proxy = ChatProxy(router=router, pruner=pruner,
                          openai=OpenAICompatibleUpstream(session, settings.upstream_timeout_s,
                                                          settings.upstream_connect_timeout_s),
                          litellm=LiteLLMUpstream(settings.upstream_timeout_s), accountant=accountant,
                          budgets=budgets, deferred=deferred)
        return cls(settings, policies, policies[settings.default_policy], settings.org_policies,
                   authenticator, router, proxy, metrics, deferred, session, redis, audit,
                   key_store=key_store, budget_guard=budgets, scores=scores, conversations=conversations,
                   bounds=bounds, limits=WireLimits(settings.max_messages, settings.max_content_parts,
                                                    settings.max_message_chars, settings.max_json_depth))

    async def stop(self) -> None:
        """The end of the lifespan. uvicorn has closed the listener and let open responses
        run for the grace period, cancelling what was left, so nothing new arrives: every
        open request is accounted, the deferred accounting runs to its end (settles,
        metrics, audit lines), unmetered tokens are charged, and only then are the
        clients it used closed."""
        await self.proxy.close(timeout_s=5.0)
        await self.deferred.drain(timeout_s=10.0)
        if self.budget_guard is not None:
            await self.budget_guard.flush()
        await self.session.close()
        if self.redis is not None:
            await self.redis.aclose()
        if self.audit is not None:
            self.audit.close()

    def count_rejection(self, exc: SieveError, org: str | None, model: str | None) -> None:
        """Requests refused before reaching the provider still count, by outcome.
        (Upstream failures are counted by the accountant, with their timings.)"""
        outcome = next((label for cls, label in _REJECTIONS.items() if isinstance(exc, cls)), None)
        if outcome is not None:
            self.count_outcome(outcome, org, model)

    def count_outcome(self, outcome: str, org: str | None, model: str | None) -> None:
        if self.bounds is not None:
            record_request(self.metrics, bounds=self.bounds, org=org or "unknown", model=model, outcome=outcome)

    async def authenticate(self, headers: Mapping[str, str]) -> Identity:
        if self.authenticator is None:
            return ANONYMOUS
        return await self.authenticator.authenticate(headers)

    def policy_for(self, identity: Identity) -> Policy:
        name = self.org_policies.get(identity.org)
        return self.policies[name] if name else self.default_policy

    async def model_list(self, identity: Identity, headers: Mapping[str, str]) -> list[dict[str, Any]]:
        """Configured models, plus what the default upstream lists (asked with the
        configured key, or the client's own in passthrough); its failure is not ours."""
        models = {name: {"id": name, "object": "model", "created": int(self.started_at), "owned_by": "sieve"}
                  for name in self.router.configured}
        base = self.settings.upstream_base_url
        if base:
            key = self.settings.upstream_api_key or client_provider_key(identity, headers)
            try:
                async with self.session.get(base.rstrip("/") + "/models", timeout=aiohttp.ClientTimeout(total=3),
                                            headers={"authorization": f"Bearer {key}"} if key else {}) as resp:
                    if resp.status == 200:
                        listed = (await resp.json()).get("data") or []
                        for item in listed:
                            if isinstance(item, dict) and isinstance(item.get("id"), str):
                                models.setdefault(item["id"], item)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.info("default upstream did not list its models: %s", exc.__class__.__name__)
        return sorted(models.values(), key=lambda m: m["id"])

    async def readiness_problems(self) -> list[str]:
        if self.redis is None:
            return []
        try:
            await self.redis.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            if self.default_policy.store_fail_open:
                # Fail-open serves without Redis; unready pods would turn that into an outage.
                return []
            return [f"redis unreachable ({exc.__class__.__name__}) and the default policy is fail-closed"]
        return []


def configured_secrets(settings: Settings) -> list[str]:
    """Every credential the gateway holds: none may appear in a log, audit line or error."""
    keys = [settings.upstream_api_key, settings.admin_key, settings.metrics_key, settings.scorer_api_key]
    keys += [route.api_key for route in settings.models.values()]
    return [key for key in keys if key]


def is_open(settings: Settings) -> bool:
    """No way to authenticate anyone: every caller is anonymous and brings its own provider key."""
    return not settings.virtual_keys and settings.keys_file is None and not settings.passthrough \
        and not settings.admin_key


def _authenticator(settings: Settings, key_store: Any, default: Policy) -> Authenticator | None:
    entries = list(settings.virtual_keys)
    if settings.keys_file is not None:
        import yaml  # noqa: PLC0415

        try:
            raw = yaml.safe_load(settings.keys_file.read_text()) or []
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{settings.keys_file}: cannot read keys file: {exc}") from exc
        from_file = raw.get("keys") if isinstance(raw, dict) else raw
        if not isinstance(from_file, list):
            raise ConfigError(f"{settings.keys_file}: expected a list of keys (or a mapping with 'keys:')")
        entries.extend(from_file)
    registry = KeyRegistry.from_entries(entries or None, "keys")
    if is_open(settings):
        return None  # open gateway; the cli refuses a non-loopback bind unless told
    static = {digest.lower() for digest in settings.passthrough}
    return Authenticator(registry, key_store=_KeysDuringOutage(key_store, registry, static),
                         passthrough=settings.passthrough, allow_anonymous=default.allow_anonymous)


class _KeysDuringOutage:
    """The admin key store as the Authenticator reads it: an outage must not lock out
    the keys file (else fail-open could never serve). While the store is down a file or
    passthrough key is accepted unchecked for revocation; any other key is a 503, not a 401."""

    def __init__(self, store: Any, registry: KeyRegistry, passthrough: set[str]) -> None:
        self._store, self._registry, self._passthrough = store, registry, passthrough

    async def get(self, key_sha256: str) -> Any:
        try:
            return await self._store.get(key_sha256)
        except StoreUnavailable:
            if self._registry.lookup(key_sha256) is not None or key_sha256 in self._passthrough:
                return None
            raise


def _known_orgs(settings: Settings) -> list[str]:
    orgs = {"anonymous"}
    orgs.update(str(k.get("org")) for k in settings.virtual_keys if isinstance(k, dict))
    orgs.update(settings.passthrough.values())
    orgs.update(settings.org_policies)
    budgets = settings.budgets or {}
    orgs.update((budgets.get("orgs") or {}).keys())
    return sorted(orgs)
