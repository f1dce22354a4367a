"""Which upstream a request goes to, with which key, through which transport.

Chat Completions and Responses requests are routed by model: configured
models first; any other model goes to the default OpenAI-compatible upstream
(``SIEVE_UPSTREAM_BASE_URL``) when there is one, else it is unknown (404). With ``strict_models`` only the configured models
are served, in every format (Anthropic Messages too): any other is unknown (404 ``model_not_found``),
default upstream or not, so a client cannot run up a bill on a model nobody chose.
Without a configured key the client's own key is forwarded (passthrough).
Each route's :class:`RouteKind` picks its transport. Anthropic Messages
requests go to ``SIEVE_ANTHROPIC_BASE_URL`` whatever their model: Sieve
forwards each format in its own format, to a provider that speaks it::

    router = ModelRouter(settings, {RouteKind.OPENAI: fast_path, RouteKind.LITELLM: litellm})
    route = router.resolve("gpt-4o-mini")                         # .../chat/completions
    route = router.resolve("gpt-5", WireFormat.RESPONSES)         # .../responses
    response = await router.upstream_for(route).send(route, call, body)
"""

from __future__ import annotations

from typing import Mapping

from gateway.errors import InvalidRequest, UnknownModel
from gateway.config import ModelRoute, RouteKind, Settings
from gateway.upstream.base import KeyScheme, ResolvedRoute, Upstream
from gateway.wire import WireFormat

MAX_CACHED_ROUTES = 10_000
# Each format's endpoint below an OpenAI-compatible api_base (which ends in /v1).
OPENAI_PATHS = {WireFormat.CHAT: "/chat/completions", WireFormat.RESPONSES: "/responses"}
ANTHROPIC_PATH = "/v1/messages"


class ModelRouter:
    def __init__(self, settings: Settings, upstreams: Mapping[RouteKind, Upstream]) -> None:
        self._models: Mapping[str, ModelRoute] = settings.models
        self._default_base = settings.upstream_base_url
        self._default_key = settings.upstream_api_key
        self._anthropic_url = settings.anthropic_base_url.rstrip("/") + ANTHROPIC_PATH
        self._anthropic_key = settings.anthropic_api_key
        self._strict = settings.strict_models
        self._upstreams = dict(upstreams)
        self._cache: dict[tuple[str, WireFormat], ResolvedRoute] = {}

    @property
    def configured(self) -> list[str]:
        return sorted(self._models)

    def upstream_for(self, route: ResolvedRoute) -> Upstream:
        return self._upstreams[route.kind]

    def resolve(self, model: str, fmt: WireFormat = WireFormat.CHAT) -> ResolvedRoute:
        hit = self._cache.get((model, fmt))
        if hit is not None:
            return hit
        if fmt is WireFormat.MESSAGES:
            if self._strict and model not in self._models:
                raise self._not_served(model)
            resolved = self._anthropic_route(model)
        else:
            resolved = self._resolve_openai(model, fmt)
        if len(self._cache) < MAX_CACHED_ROUTES:
            self._cache[(model, fmt)] = resolved
        return resolved

    def default_route(self, fmt: WireFormat) -> ResolvedRoute:
        """Where a request that names no model goes (``GET /v1/responses/{id}``): the
        format's default upstream."""
        if fmt is WireFormat.MESSAGES:
            return self._anthropic_route("")
        if not self._default_base:
            raise UnknownModel("no default upstream is set (SIEVE_UPSTREAM_BASE_URL): a request that names "
                               "no model has nowhere to go")
        route = ModelRoute(name="", api_base=self._default_base, api_key=self._default_key)
        return ResolvedRoute("", RouteKind.OPENAI, self._default_base.rstrip("/") + OPENAI_PATHS[fmt],
                             self._default_key, None, route)

    def _anthropic_route(self, model: str) -> ResolvedRoute:
        return ResolvedRoute(model, RouteKind.OPENAI, self._anthropic_url, self._anthropic_key, None,
                             ModelRoute(name=model), KeyScheme.X_API_KEY)

    def _not_served(self, model: str) -> UnknownModel:
        return UnknownModel(f"model {model!r} is not served by this gateway (strict_models; models: "
                            f"{', '.join(self.configured) or 'none configured'})", param="model")

    def _resolve_openai(self, model: str, fmt: WireFormat) -> ResolvedRoute:
        route = self._models.get(model)
        if route is None:
            if self._strict:
                raise self._not_served(model)
            if not self._default_base:
                known = ", ".join(self.configured) or "none configured"
                raise UnknownModel(f"model {model!r} is not routed by this gateway (models: {known})",
                                   param="model")
            route = ModelRoute(name=model, kind=RouteKind.OPENAI, api_base=self._default_base,
                               api_key=self._default_key)
        if route.kind != RouteKind.OPENAI:
            if fmt is not WireFormat.CHAT:
                # litellm answers in Chat Completions' shape; a Responses client needs the provider's own.
                raise InvalidRequest(f"model {model!r} is routed through litellm, which serves Chat Completions "
                                     f"only; /v1/responses needs an OpenAI-compatible api_base", param="model")
            return ResolvedRoute(model, RouteKind.LITELLM, None, route.api_key, route.upstream_model, route)
        base = (route.api_base or self._default_base or "").rstrip("/")
        if not base:
            raise UnknownModel(f"model {model!r} has no api_base and no default upstream is set", param="model")
        return ResolvedRoute(model, RouteKind.OPENAI, base + OPENAI_PATHS[fmt],
                             route.api_key or (self._default_key if not route.api_base else None),
                             route.upstream_model, route)
