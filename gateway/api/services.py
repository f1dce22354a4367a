"""Everything a request needs, built once per process from Settings, and stopped in order.

``Services.start(settings)`` runs in the app's lifespan: it creates the shared
HTTP client and the stores (in-memory, or Redis when ``SIEVE_REDIS_URL`` is
set), loads policies and keys, and wires the forwarder. Routes reach it through
``request.app.state.services``. Nothing here serves a request: each part
answers for its own concern (``PolicyBook``, the authenticator, ``Forwarder``,
``ModelCatalog``, ``RequestRecorder``).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any, Mapping


from gateway.exchange import (Accountant, BigBodies, BudgetGuard, Deferred, Forwarder, PassThrough,
    Pruner, ReasoningGuard, StoredResponses)
from gateway.auth import AuthThrottle, Authenticator, OpenAccess, authenticator_for
from gateway.billing import BudgetConfig
from gateway.embedding import Embedder, EmbeddingModel, ModelUnavailable, WorkerLimits
from gateway.errors import ConfigError, StoreUnavailable
from gateway.expand import Expander
from gateway.config import PolicyBook, RouteKind, Settings, prepare_offline_environment
from gateway.pruning import LocalScorer, TokenCounters
from gateway.scorers import LLMScorer, Summarizer
from gateway.state import (AuthFailureLog, BudgetStore, ConversationStore, KeyStore, MemoryAuthFailureLog,
    MemoryBudgetStore, MemoryConversationStore, MemoryKeyStore, MemoryResponseRegistry, MemoryScoreCache,
    ResponseRegistry, ScoreCache)
from gateway.telemetry import AuditLog, LabelBounds, Metrics, PriceBook, RequestRecorder, protect_logs, redact_url
from gateway.upstream import (Http1Client, LiteLLMUpstream, ModelCatalog, ModelRouter, OpenAICompatibleUpstream, Upstream,
    check_url_credentials)
from gateway.wire import WireLimits

log = logging.getLogger("sieve.services")
COHORT_SECRET_KEY = "sieve:cohort-secret"
OWN_KEYS = "the callers' own keys"
COHORT_SECRET_TTL_S = 10 * 365 * 86_400

# A route's dynamic label room: models routed to the default upstream that no config names
# (none with strict_models: a model not configured is refused, and counted as "other").
DYNAMIC_LABELS = 200


@dataclass(frozen=True)
class Stores:
    conversations: ConversationStore
    scores: ScoreCache
    budgets: BudgetStore
    keys: KeyStore
    responses: ResponseRegistry
    auth_failures: AuthFailureLog
    redis: Any = None  # RedisStores, which owns the connections, when configured

    @classmethod
    def open(cls, settings: Settings) -> "Stores":
        """In memory by default; Redis when ``SIEVE_REDIS_URL`` is set."""
        if not settings.redis_url:
            return cls(MemoryConversationStore(settings.state_max_entries, settings.state_max_bytes),
                       MemoryScoreCache(), MemoryBudgetStore(), MemoryKeyStore(), MemoryResponseRegistry(),
                       MemoryAuthFailureLog())
        from gateway.state import RedisStores  # noqa: PLC0415 - only with Redis

        # After a timeout, Redis is skipped for a second rather than waited for on every call.
        from gateway.state import RedisAuthFailureLog, RedisResponseRegistry  # noqa: PLC0415

        redis = RedisStores.from_url(settings.redis_url, breaker_cooldown_s=1.0)
        return cls(redis.conversations, redis.scores, redis.budgets, redis.keys,
                   RedisResponseRegistry(redis.client, redis.prefix, redis.guard),
                   RedisAuthFailureLog(redis.client, redis.prefix, redis.guard), redis)


@dataclass
class Services:
    settings: Settings
    policies: PolicyBook
    authenticator: Authenticator | OpenAccess
    stores: Stores
    forwarder: Forwarder
    passthrough: PassThrough
    models: ModelCatalog
    recorder: RequestRecorder
    budget_guard: BudgetGuard
    deferred: Deferred
    audit: AuditLog
    limits: WireLimits
    auth_throttle: AuthThrottle
    big_bodies: BigBodies   # the bound on big prunes in flight, and the heap trim after them
    # The one HTTP client to providers: forwards, pass-through, model listing, the scorer's calls.
    forwarding: Http1Client | None = None
    embedder: Embedder | None = None  # the embedding scorer's model and worker, when a policy uses it

    @property
    def metrics(self) -> Metrics:
        return self.recorder.metrics

    @classmethod
    async def start(cls, settings: Settings, metrics: Metrics | None = None) -> "Services":
        settings.check()
        check_url_credentials(settings)
        prepare_offline_environment()  # before tiktoken or litellm load anything
        protect_logs(configured_secrets(settings))
        # What a bad config can refuse comes first, before any connection is opened.
        policies = PolicyBook.load(settings)
        for line in in_use(settings, policies):
            log.info(line)
        stores = Stores.open(settings)
        authenticator = authenticator_for(settings, stores.keys, policies.default.allow_anonymous)
        budget_config = BudgetConfig.from_mapping(settings.budgets)
        prices = PriceBook.from_litellm(settings.prices)
        metrics = metrics or Metrics()
        recorder = RequestRecorder(metrics, LabelBounds(orgs=_known_orgs(settings), models=sorted(settings.models),
                                                        dynamic_limit=0 if settings.strict_models
                                                        else DYNAMIC_LABELS))
        counters = TokenCounters(engine=settings.token_engine)
        counters.warm()  # load the encodings now, not on the first request
        budgets = BudgetGuard(stores.budgets, budget_config, metrics, recorder.bounds.org, counters=counters,
                              output_limit=prices.max_output_tokens, ceiling=settings.max_billed_tokens)
        audit = AuditLog.open(settings.audit_log, secrets=configured_secrets(settings))
        deferred = Deferred()
        big_bodies = BigBodies(settings.max_prune_bytes_in_flight)
        embedder = _embedder(settings, policies, stores, metrics)
        if embedder is not None:
            await embedder.start()
        forwarding = Http1Client(connect_timeout_s=settings.upstream_connect_timeout_s)
        fast_path = OpenAICompatibleUpstream(forwarding, settings.upstream_timeout_s, settings.max_upstream_body_bytes)
        upstreams = _upstreams(settings, fast_path)
        router = ModelRouter(settings, upstreams)
        pruner = _pruner(counters, settings, stores, upstreams, metrics, prices, big_bodies, embedder)
        pruner.cohort_secret = await cohort_secret(settings, stores.conversations)
        stored = StoredResponses(stores.responses)
        forwarder = Forwarder(router=router, pruner=pruner,
                          accountant=Accountant(recorder, prices, budgets, audit, counters, stored), budgets=budgets,
                          deferred=deferred, expander=Expander(stores.conversations, budgets, metrics, counters),
                          stored=stored, reasoning=ReasoningGuard(stores.conversations,
                                                                  settings.preserved_thinking_models))
        passthrough = PassThrough(router, fast_path, budgets, recorder, audit, deferred, stored)
        return cls(settings, policies, authenticator, stores, forwarder, passthrough,
                   ModelCatalog(settings, fast_path), recorder, budgets, deferred, audit,
                   WireLimits(settings.max_messages, settings.max_content_parts, settings.max_message_chars,
                              settings.max_json_depth, settings.max_request_chars),
                   AuthThrottle(settings.auth_failure_limit, settings.auth_failure_window_s, stores.auth_failures),
                   big_bodies, forwarding, embedder)

    async def stop(self) -> None:
        """The end of the lifespan. uvicorn has closed the listener and let open responses
        run for the grace period, cancelling what was left, so nothing new arrives: every
        open request is accounted, the deferred accounting runs to its end (settles,
        metrics, audit lines), unmetered tokens are charged, and only then are the
        clients it used closed."""
        await self.forwarder.close(timeout_s=5.0)
        await self.deferred.drain(timeout_s=10.0)
        await self.budget_guard.flush()
        if self.forwarding is not None:
            await self.forwarding.close()
        if self.embedder is not None:
            await self.embedder.stop()
        if self.stores.redis is not None:
            await self.stores.redis.aclose()
        self.audit.close()


def check_config(settings: Settings) -> None:
    """Everything a bad configuration is refused for, checked before the server starts, so
    that ``sieve serve`` says it in one line (``Services.start`` makes the same checks, in a
    lifespan whose failure uvicorn reports as a traceback): the settings' combinations, the
    policies, the budgets, the price overrides and the keys."""
    settings.check()
    check_url_credentials(settings)
    PolicyBook.load(settings)
    BudgetConfig.from_mapping(settings.budgets)
    PriceBook({}, settings.prices)
    authenticator_for(settings, MemoryKeyStore(), allow_anonymous=False)


def in_use(settings: Settings, policies: PolicyBook) -> list[str]:
    """What this gateway forwards to and prunes with, said at start-up (URLs without credentials)."""
    default = redact_url(settings.upstream_base_url) if settings.upstream_base_url else "none"
    key = "configured key" if settings.upstream_api_key else OWN_KEYS
    models = ", ".join(f"{name} -> {redact_url(route.api_base) if route.api_base else route.kind.value}"
                       for name, route in sorted(settings.models.items())) or "none configured"
    orgs = ", ".join(f"{org}: {name}" for org, name in sorted(settings.org_policies.items())) or "none"
    return [f"upstream (Chat Completions, Responses): {default} with {key}; models: {models}"
            f"{' (strict: only these)' if settings.strict_models else ''}",
            f"upstream (Anthropic Messages): {redact_url(settings.anthropic_base_url)} with "
            f"{'configured key' if settings.anthropic_api_key else OWN_KEYS}",
            f"policy: {policies.default.name} (from {settings.policies_dir}); per org: {orgs}; "
            f"state: {'redis' if settings.redis_url else 'in memory'}"]


def _upstreams(settings: Settings, fast_path: OpenAICompatibleUpstream) -> dict[RouteKind, Upstream]:
    """The transports to providers, by kind: the router's for forwards, the scorer's for its calls."""
    return {RouteKind.OPENAI: fast_path,
            RouteKind.LITELLM: LiteLLMUpstream(settings.upstream_timeout_s, settings.max_upstream_body_bytes)}


def _pruner(counters: TokenCounters, settings: Settings, stores: Stores, upstreams: Mapping[RouteKind, Upstream],
            metrics: Metrics, prices: PriceBook, big_bodies: BigBodies, embedder: Embedder | None) -> Pruner:
    llm = LLMScorer(upstreams=upstreams, cache=stores.scores, metrics=metrics, prices=prices, counters=counters,
                    api_key=settings.scorer_api_key)
    return Pruner(counters, LocalScorer(), stores.conversations, metrics, llm=llm,
                  summarizer=Summarizer(llm, prices, metrics), big=big_bodies, embedder=embedder)


def _embedder(settings: Settings, policies: PolicyBook, stores: Stores, metrics: Metrics) -> Embedder | None:
    """The embedding model and its worker, when a policy in use scores with it. A model that
    does not load is a start-up error under a policy with ``embedding_required``; else it is
    logged and those policies score with the local scorer alone."""
    wanted = [p for p in policies.in_use() if p.scorer == "embedding"]
    if not wanted:
        return None
    try:
        model = EmbeddingModel.load(settings.embedding_model_dir)
    except ModelUnavailable as exc:
        names = ", ".join(p.name for p in wanted)
        if any(p.embedding_required for p in wanted):
            raise ConfigError(f"{exc} (policy {names} has embedding_required: true)") from exc
        log.warning("%s: policy %s scores with the local scorer alone", exc, names)
        return None
    log.info("embedding scorer: model %s from %s", model.model_id, settings.embedding_model_dir)
    # With Redis, vectors are shared between replicas in the score store.
    return Embedder(model, metrics, shared=stores.scores if stores.redis is not None else None,
                    limits=WorkerLimits(max_queue=settings.embedding_queue, cpu_share=settings.embedding_cpu_share))


async def cohort_secret(settings: Settings, shared: ConversationStore) -> bytes:
    """The key of the cohort hash (gateway.pruning.cohort): ``SIEVE_COHORT_SECRET``; else one the
    replicas share in the state store (the first to start writes it, each reads it back); else,
    in memory or with the store down, this process's own (cohorts hold until a restart)."""
    if settings.cohort_secret:
        return settings.cohort_secret.encode()
    try:
        secret = await shared.get(COHORT_SECRET_KEY)
        if secret is None:
            await shared.put(COHORT_SECRET_KEY, secrets.token_bytes(32), COHORT_SECRET_TTL_S)
            secret = await shared.get(COHORT_SECRET_KEY)
    except StoreUnavailable:
        log.warning("state store unreachable: this replica keys its cohorts alone until it restarts")
        secret = None
    return secret or secrets.token_bytes(32)


def configured_secrets(settings: Settings) -> list[str]:
    """Every credential the gateway holds: none may appear in a log, audit line or error."""
    keys = [settings.upstream_api_key, settings.anthropic_api_key, settings.admin_key, settings.metrics_key,
            settings.scorer_api_key]
    keys += [route.api_key for route in settings.models.values()]
    return [key for key in keys if key]


def _known_orgs(settings: Settings) -> list[str]:
    orgs = {"anonymous"}
    orgs.update(str(k.get("org")) for k in settings.virtual_keys if isinstance(k, dict))
    orgs.update(settings.passthrough.values())
    orgs.update(settings.org_policies)
    budgets = settings.budgets or {}
    orgs.update((budgets.get("orgs") or {}).keys())
    return sorted(orgs)
