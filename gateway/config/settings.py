"""Settings: the only place that reads the environment.

Read once at start-up and passed explicitly::

    settings = Settings.from_env()            # SIEVE_* variables (+ optional YAML)
    app = create_app(settings)

Environment variables (all optional):

==============================  ==============================================
SIEVE_HOST / SIEVE_PORT         bind address (default 127.0.0.1:8080)
SIEVE_CONFIG                    YAML config file (models, upstreams, keys)
SIEVE_POLICIES_DIR              folder of policy YAML files (default policies/)
SIEVE_POLICY                    name of the default policy (default "default")
SIEVE_UPSTREAM_BASE_URL         default OpenAI-compatible upstream
SIEVE_UPSTREAM_API_KEY          its key; without it the client's is forwarded
SIEVE_ANTHROPIC_BASE_URL        the Anthropic Messages API behind /v1/messages (default
                                https://api.anthropic.com; Sieve appends /v1/messages)
SIEVE_ANTHROPIC_API_KEY         its key (sent as x-api-key); without it the client's is forwarded
SIEVE_STRICT_MODELS             "1": only the configured models are served (404 model_not_found
                                for any other); by default any other goes to the default upstream
SIEVE_REDIS_URL                 Redis for shared state and budgets
SIEVE_ADMIN_KEY                 enables the admin routes
SIEVE_KEYS_FILE                 virtual keys (YAML)
SIEVE_ALLOW_OPEN                "1" allows an open gateway on a non-loopback bind
SIEVE_OPEN_ROUTES               routes that need no key (default /healthz,/readyz,/metrics,/openapi.json,/docs;
                                only these can be open, "" closes them all)
SIEVE_METRICS_KEY               a key that reads the closed ops routes (besides the admin key)
SIEVE_AUTH_FAILURE_LIMIT        failed key checks per client address in the window before it
                                is refused with 429 (default 20; 0 = never throttled)
SIEVE_AUTH_FAILURE_WINDOW_S     that sliding window (default 60)
SIEVE_MAX_BODY_BYTES            request body limit (default 32 MiB)
SIEVE_BODY_TIMEOUT_S            time to receive a request body (default 60; then 408)
SIEVE_MAX_HEADER_BYTES          all request headers together (default 32 KiB)
SIEVE_HEADER_TIMEOUT_S          time for a request's headers to arrive, from the connection's
                                opening or the previous response's end (default 10; then 408
                                and the connection is closed)
SIEVE_MAX_MESSAGES              messages per request (default 20,000)
SIEVE_MAX_CONTENT_PARTS         content parts per message (default 1,024)
SIEVE_MAX_MESSAGE_CHARS         text characters per message (default 4,000,000)
SIEVE_MAX_JSON_DEPTH            nesting depth of the request body (default 64)
SIEVE_MAX_REQUEST_CHARS         text characters of all messages together (default 8,000,000:
                                a 2M-token history)
SIEVE_MAX_PRUNE_BYTES_IN_FLIGHT bodies over 256 KiB are pruned in a worker thread while their
                                bytes together stay within this (default 8 MiB; a larger body
                                is pruned alone); the rest wait their turn
SIEVE_STATE_MAX_ENTRIES         in-memory conversation store bound (default 10000)
SIEVE_STATE_MAX_BYTES           ... and its size bound (default 256 MiB); LRU beyond
SIEVE_UPSTREAM_TIMEOUT_S        upstream read timeout (default 600)
SIEVE_UPSTREAM_CONNECT_TIMEOUT_S  upstream connect timeout (default 10)
SIEVE_MAX_UPSTREAM_BODY_BYTES   largest non-stream answer (or error body) read from a provider
                                (default 32 MiB; larger: 502, nothing relayed; streams are relayed
                                as they come and never held whole)
SIEVE_MAX_BILLED_TOKENS         the most one request is charged (default 10,000,000; above: junk)
SIEVE_COHORT_SECRET             keys the control group's hash (default: shared through Redis)
SIEVE_SCORER_API_KEY            key for the LLM scorer model (policies name the model)
SIEVE_EMBEDDING_MODEL_DIR       the embedding scorer's model directory (default models/all-minilm-l6-v2-int8
                                beside policies/; built by python -m gateway.embedding.build)
SIEVE_EMBEDDING_CPU_SHARE       share of one core its background worker may take (default 0.25)
SIEVE_EMBEDDING_QUEUE           messages waiting for that worker, at most (default 20000)
SIEVE_AUDIT_LOG                 path of the JSON-lines audit log, "-" = stdout
SIEVE_LOG_LEVEL                 default "info"
SIEVE_SHUTDOWN_GRACE_S          on SIGTERM, how long in-flight requests and streams
                                may run on before they are cut (default 30)
SIEVE_TOKEN_ENGINE              "rs-bpe" or "tiktoken" (default: rs-bpe where installed;
                                both count the same, rs-bpe 2-3x faster)
SIEVE_PRESERVED_THINKING_MODELS models with prefix-bound thinking (name prefixes, comma-separated)
==============================  ==============================================

Offline operation is also arranged here: tiktoken is pointed at the encoding
files litellm ships, and litellm is told to use its bundled price map.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Mapping

import yaml

from gateway.errors import ConfigError
from gateway.pruning import ENGINES as TOKEN_ENGINES  # how text is counted (SIEVE_TOKEN_ENGINE)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POLICIES_DIR = PACKAGE_ROOT.parent / "policies"
DEFAULT_EMBEDDING_MODEL_DIR = PACKAGE_ROOT.parent / "models" / "all-minilm-l6-v2-int8"
# Routes for probes, scrapers and tooling: open by default, each closable.
# Every other route needs a key; it cannot be opened by configuration.
OPS_ROUTES = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs")
ANTHROPIC_BASE_URL = "https://api.anthropic.com"


class RouteKind(StrEnum):
    """How a model's requests are forwarded (``gateway.upstream``)."""

    OPENAI = "openai"    # byte-transparent fast path to an OpenAI-compatible api_base
    LITELLM = "litellm"  # any other provider, through litellm.acompletion with litellm_model


@dataclass(frozen=True)
class ModelRoute:
    """Where one model name goes, and how (:class:`RouteKind`)."""

    name: str
    kind: RouteKind = RouteKind.OPENAI
    api_base: str | None = None
    api_key: str | None = None
    litellm_model: str | None = None
    upstream_model: str | None = None  # rename on the wire, e.g. an alias


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    config_path: Path | None = None
    policies_dir: Path = DEFAULT_POLICIES_DIR
    default_policy: str = "default"
    upstream_base_url: str | None = None
    upstream_api_key: str | None = None
    anthropic_base_url: str = ANTHROPIC_BASE_URL
    anthropic_api_key: str | None = None
    strict_models: bool = False  # only `models:` are served; else others go to the default upstream
    redis_url: str | None = None
    admin_key: str | None = None
    keys_file: Path | None = None
    allow_open: bool = False
    open_routes: tuple[str, ...] = OPS_ROUTES
    metrics_key: str | None = None
    auth_failure_limit: int = 20
    auth_failure_window_s: float = 60.0
    max_body_bytes: int = 32 * 1024 * 1024
    max_header_bytes: int = 32 * 1024
    body_timeout_s: float = 60.0
    header_timeout_s: float = 10.0
    max_messages: int = 20_000
    max_content_parts: int = 1_024
    max_message_chars: int = 4_000_000
    max_json_depth: int = 64
    max_request_chars: int = 8_000_000
    max_prune_bytes_in_flight: int = 8 * 1024 * 1024
    state_max_entries: int = 10_000            # in-memory conversation store (Redis: its maxmemory)
    state_max_bytes: int = 256 * 1024 * 1024
    upstream_timeout_s: float = 600.0
    upstream_connect_timeout_s: float = 10.0
    max_upstream_body_bytes: int = 32 * 1024 * 1024
    max_billed_tokens: int = 10_000_000
    cohort_secret: str | None = None
    audit_log: str | None = None
    log_level: str = "info"
    scorer_api_key: str | None = None
    embedding_model_dir: Path = DEFAULT_EMBEDDING_MODEL_DIR
    embedding_cpu_share: float = 0.25
    embedding_queue: int = 20_000
    shutdown_grace_s: float = 30.0
    token_engine: str | None = None
    preserved_thinking_models: tuple[str, ...] = (  # Anthropic's "Prefix checks on thinking blocks"
        "claude-fable-5", "claude-mythos-5", "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")
    models: Mapping[str, ModelRoute] = field(default_factory=dict)
    virtual_keys: tuple[Mapping[str, Any], ...] = ()
    passthrough: Mapping[str, str] = field(default_factory=dict)   # sha256(provider key) -> org
    org_policies: Mapping[str, str] = field(default_factory=dict)  # org -> policy name
    budgets: Mapping[str, Any] = field(default_factory=dict)       # see gateway.billing.budgets
    prices: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # model -> per-token prices

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        env = os.environ if environ is None else environ
        prepare_offline_environment(os.environ if environ is None else None)
        settings = cls(
            host=env.get("SIEVE_HOST", cls.host),
            port=_int(env, "SIEVE_PORT", cls.port),
            config_path=_path(env.get("SIEVE_CONFIG")),
            policies_dir=_path(env.get("SIEVE_POLICIES_DIR")) or DEFAULT_POLICIES_DIR,
            default_policy=env.get("SIEVE_POLICY", cls.default_policy),
            upstream_base_url=env.get("SIEVE_UPSTREAM_BASE_URL") or None,
            upstream_api_key=env.get("SIEVE_UPSTREAM_API_KEY") or None,
            anthropic_base_url=env.get("SIEVE_ANTHROPIC_BASE_URL") or cls.anthropic_base_url,
            anthropic_api_key=env.get("SIEVE_ANTHROPIC_API_KEY") or None,
            strict_models=_flag(env, "SIEVE_STRICT_MODELS"),
            redis_url=env.get("SIEVE_REDIS_URL") or None,
            admin_key=env.get("SIEVE_ADMIN_KEY") or None,
            keys_file=_path(env.get("SIEVE_KEYS_FILE")),
            allow_open=_flag(env, "SIEVE_ALLOW_OPEN"),
            open_routes=_routes(env, "SIEVE_OPEN_ROUTES", cls.open_routes),
            metrics_key=env.get("SIEVE_METRICS_KEY") or None,
            auth_failure_limit=_int(env, "SIEVE_AUTH_FAILURE_LIMIT", cls.auth_failure_limit),
            auth_failure_window_s=_float(env, "SIEVE_AUTH_FAILURE_WINDOW_S", cls.auth_failure_window_s),
            max_body_bytes=_int(env, "SIEVE_MAX_BODY_BYTES", cls.max_body_bytes),
            max_header_bytes=_int(env, "SIEVE_MAX_HEADER_BYTES", cls.max_header_bytes),
            body_timeout_s=_float(env, "SIEVE_BODY_TIMEOUT_S", cls.body_timeout_s),
            header_timeout_s=_float(env, "SIEVE_HEADER_TIMEOUT_S", cls.header_timeout_s),
            max_messages=_int(env, "SIEVE_MAX_MESSAGES", cls.max_messages),
            max_content_parts=_int(env, "SIEVE_MAX_CONTENT_PARTS", cls.max_content_parts),
            max_message_chars=_int(env, "SIEVE_MAX_MESSAGE_CHARS", cls.max_message_chars),
            max_json_depth=_int(env, "SIEVE_MAX_JSON_DEPTH", cls.max_json_depth),
            max_request_chars=_int(env, "SIEVE_MAX_REQUEST_CHARS", cls.max_request_chars),
            max_prune_bytes_in_flight=_int(env, "SIEVE_MAX_PRUNE_BYTES_IN_FLIGHT", cls.max_prune_bytes_in_flight),
            state_max_entries=_int(env, "SIEVE_STATE_MAX_ENTRIES", cls.state_max_entries),
            state_max_bytes=_int(env, "SIEVE_STATE_MAX_BYTES", cls.state_max_bytes),
            upstream_timeout_s=_float(env, "SIEVE_UPSTREAM_TIMEOUT_S", cls.upstream_timeout_s),
            upstream_connect_timeout_s=_float(env, "SIEVE_UPSTREAM_CONNECT_TIMEOUT_S", cls.upstream_connect_timeout_s),
            max_upstream_body_bytes=_int(env, "SIEVE_MAX_UPSTREAM_BODY_BYTES", cls.max_upstream_body_bytes),
            max_billed_tokens=_int(env, "SIEVE_MAX_BILLED_TOKENS", cls.max_billed_tokens),
            cohort_secret=env.get("SIEVE_COHORT_SECRET") or None,
            audit_log=env.get("SIEVE_AUDIT_LOG") or None,
            scorer_api_key=env.get("SIEVE_SCORER_API_KEY") or None,
            embedding_model_dir=_path(env.get("SIEVE_EMBEDDING_MODEL_DIR")) or DEFAULT_EMBEDDING_MODEL_DIR,
            embedding_cpu_share=_float(env, "SIEVE_EMBEDDING_CPU_SHARE", cls.embedding_cpu_share),
            embedding_queue=_int(env, "SIEVE_EMBEDDING_QUEUE", cls.embedding_queue),
            log_level=env.get("SIEVE_LOG_LEVEL", cls.log_level),
            shutdown_grace_s=_float(env, "SIEVE_SHUTDOWN_GRACE_S", cls.shutdown_grace_s),
            token_engine=env.get("SIEVE_TOKEN_ENGINE", "").strip().lower() or None,
            preserved_thinking_models=_routes(env, "SIEVE_PRESERVED_THINKING_MODELS", cls.preserved_thinking_models),
        )
        settings = replace(settings, **overrides)
        if settings.shutdown_grace_s < 0:
            raise ConfigError(f"SIEVE_SHUTDOWN_GRACE_S must be >= 0, got {settings.shutdown_grace_s}")
        if settings.config_path is not None:
            settings = settings.with_config_file(settings.config_path, env)
        settings.check()
        return settings

    def check(self) -> None:
        """Combinations no single field can refuse on its own."""
        unknown = sorted(set(self.open_routes) - set(OPS_ROUTES))
        if unknown:
            raise ConfigError(f"SIEVE_OPEN_ROUTES: {', '.join(unknown)} cannot be open; "
                              f"only {', '.join(OPS_ROUTES)} can (every other route needs a key)")
        for name in ("max_body_bytes", "max_header_bytes", "max_messages", "max_content_parts",
                     "max_message_chars", "max_json_depth", "max_upstream_body_bytes", "max_request_chars",
                     "max_prune_bytes_in_flight", "max_billed_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"SIEVE_{name.upper()} must be a positive integer")
        if self.auth_failure_limit < 0 or self.auth_failure_window_s < 0:
            raise ConfigError("SIEVE_AUTH_FAILURE_LIMIT and SIEVE_AUTH_FAILURE_WINDOW_S must be >= 0")
        for name in ("body_timeout_s", "header_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"SIEVE_{name.upper()} must be a positive number of seconds")
        if self.token_engine is not None and self.token_engine not in TOKEN_ENGINES:
            raise ConfigError(f"SIEVE_TOKEN_ENGINE must be one of {', '.join(TOKEN_ENGINES)}, "
                              f"not {self.token_engine!r}")
        if self.token_engine == "rs-bpe" and importlib.util.find_spec("rs_bpe") is None:
            raise ConfigError("SIEVE_TOKEN_ENGINE is rs-bpe, but rs-bpe is not installed (its wheels are for "
                              "Linux x86-64 and arm64): install it, or leave SIEVE_TOKEN_ENGINE unset")
        if not 0 < self.embedding_cpu_share <= 1 or self.embedding_queue < 1:
            raise ConfigError("SIEVE_EMBEDDING_CPU_SHARE must be in (0, 1] and SIEVE_EMBEDDING_QUEUE positive")
        if self.max_json_depth > 200:
            # orjson serializes at most 254 levels; deeper bodies could not be forwarded.
            raise ConfigError("SIEVE_MAX_JSON_DEPTH must be at most 200")

    def startup_warnings(self) -> list[str]:
        """What a configuration that loads can still get wrong, said at start-up rather than
        discovered as a 404 on every request."""
        if self.models:
            return []
        if self.strict_models:
            return ["strict_models is on and no models are configured (models: in the config file): "
                    "every chat request will be answered 404 model_not_found"]
        if not self.upstream_base_url:
            return ["no upstream configured: every chat request will be answered 404 model_not_found. "
                    "Set SIEVE_UPSTREAM_BASE_URL (or upstream.base_url, or models:, in the config file)"]
        return []

    def with_config_file(self, path: Path, env: Mapping[str, str]) -> "Settings":
        """Merge a YAML config file (strict: unknown keys are errors)."""
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read config: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: config must be a mapping")
        allowed = {"models", "strict_models", "upstream", "keys", "redis_url", "admin_key_env", "policy",
                   "passthrough", "org_policies", "budgets", "prices"}
        _reject_unknown(raw, allowed, str(path))
        upstream = raw.get("upstream") or {}
        strict = raw.get("strict_models", self.strict_models)
        if not isinstance(strict, bool):
            raise ConfigError(f"{path}: strict_models must be true or false")
        _reject_unknown(upstream, {"base_url", "api_key_env"}, f"{path}: upstream")
        models = {}
        for name, spec in (raw.get("models") or {}).items():
            spec = spec or {}
            _reject_unknown(spec, {"kind", "api_base", "api_key_env", "litellm_model", "upstream_model"},
                            f"{path}: models.{name}")
            kind = spec.get("kind", RouteKind.OPENAI)
            if kind not in tuple(RouteKind):
                raise ConfigError(f"{path}: models.{name}.kind must be 'openai' or 'litellm'")
            models[name] = ModelRoute(
                name=name,
                kind=RouteKind(kind),
                api_base=spec.get("api_base"),
                api_key=env.get(spec["api_key_env"]) if spec.get("api_key_env") else None,
                litellm_model=spec.get("litellm_model"),
                upstream_model=spec.get("upstream_model"),
            )
        return replace(
            self,
            models=models,
            strict_models=strict,
            upstream_base_url=upstream.get("base_url") or self.upstream_base_url,
            upstream_api_key=(env.get(upstream["api_key_env"]) if upstream.get("api_key_env")
                              else self.upstream_api_key),
            redis_url=raw.get("redis_url") or self.redis_url,
            admin_key=env.get(raw["admin_key_env"]) if raw.get("admin_key_env") else self.admin_key,
            default_policy=raw.get("policy") or self.default_policy,
            virtual_keys=tuple(raw.get("keys") or ()),
            passthrough=_mapping(raw, "passthrough", path),
            org_policies=_mapping(raw, "org_policies", path),
            budgets=_mapping(raw, "budgets", path),
            prices=_mapping(raw, "prices", path),
        )

    @property
    def bind_is_loopback(self) -> bool:
        """Whether the bind address reaches this machine only: a literal loopback address
        (127.0.0.0/8, ::1, ::ffff:127.x), or ``localhost``. Any other name is not taken as
        loopback, whatever it resolves to today: a name is resolved again when the server
        binds, and a text test would let ``127.0.0.1.nip.io`` (a public DNS name) pass."""
        host = self.host.strip().strip("[]")
        if host.lower() == "localhost":
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        return (mapped or address).is_loopback


def litellm_package_dir() -> Path | None:
    """litellm's installed package folder, found without importing it."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def litellm_tokenizer_dir() -> Path | None:
    """The folder of tiktoken encodings that litellm ships."""
    package = litellm_package_dir()
    folder = package / "litellm_core_utils" / "tokenizers" if package else None
    return folder if folder is not None and folder.is_dir() else None


def prepare_offline_environment(environ: Any = None) -> None:
    """Keep tiktoken and litellm off the network (set before either is imported)."""
    target = os.environ if environ is None else environ
    folder = litellm_tokenizer_dir()
    if folder is not None:
        target.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
    target.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    target.setdefault("LITELLM_OFFLINE_MODE", "true")


def _reject_unknown(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: must be a mapping")
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _mapping(raw: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: {name} must be a mapping")
    return dict(value)


def _routes(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if name not in env:
        return default
    return tuple(route.strip() for route in env[name].split(",") if route.strip())


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env[name]) if env.get(name) else default
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {env[name]!r}") from exc


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env[name]) if env.get(name) else default
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {env[name]!r}") from exc
