"""Which upstream a model goes to, with which key, through which transport.

Configured models first; any other model goes to the default
OpenAI-compatible upstream (``SIEVE_UPSTREAM_BASE_URL``) when there is one,
else it is unknown (404). With ``strict_models`` only the configured models
are served: any other is unknown (404 ``model_not_found``), default upstream or
not, so a client cannot run up a bill on a model nobody chose. Without a configured key the client's own key is
forwarded (passthrough). Each route's :class:`RouteKind` picks its transport::

    router = ModelRouter(settings, {RouteKind.OPENAI: fast_path, RouteKind.LITELLM: litellm})
    route = router.resolve("gpt-4o-mini")
    response = await router.upstream_for(route).send(route, call, body)
"""

from __future__ import annotations

from typing import Mapping

from gateway.errors import UnknownModel
from gateway.settings import ModelRoute, RouteKind, Settings
from gateway.upstream.base import ResolvedRoute, Upstream

MAX_CACHED_ROUTES = 10_000


class ModelRouter:
    def __init__(self, settings: Settings, upstreams: Mapping[RouteKind, Upstream]) -> None:
        self._models: Mapping[str, ModelRoute] = settings.models
        self._default_base = settings.upstream_base_url
        self._default_key = settings.upstream_api_key
        self._strict = settings.strict_models
        self._upstreams = dict(upstreams)
        self._cache: dict[str, ResolvedRoute] = {}

    @property
    def configured(self) -> list[str]:
        return sorted(self._models)

    def upstream_for(self, route: ResolvedRoute) -> Upstream:
        return self._upstreams[route.kind]

    def resolve(self, model: str) -> ResolvedRoute:
        hit = self._cache.get(model)
        if hit is not None:
            return hit
        route = self._models.get(model)
        if route is None:
            if self._strict:
                raise UnknownModel(f"model {model!r} is not served by this gateway (strict_models; models: "
                                   f"{', '.join(self.configured) or 'none configured'})", param="model")
            if not self._default_base:
                known = ", ".join(self.configured) or "none configured"
                raise UnknownModel(f"model {model!r} is not routed by this gateway (models: {known})",
                                   param="model")
            route = ModelRoute(name=model, kind=RouteKind.OPENAI, api_base=self._default_base,
                               api_key=self._default_key)
        if route.kind == RouteKind.OPENAI:
            base = (route.api_base or self._default_base or "").rstrip("/")
            if not base:
                raise UnknownModel(f"model {model!r} has no api_base and no default upstream is set",
                                   param="model")
            resolved = ResolvedRoute(model, RouteKind.OPENAI, base + "/chat/completions",
                                     route.api_key or (self._default_key if not route.api_base else None),
                                     route.upstream_model, route)
        else:
            resolved = ResolvedRoute(model, RouteKind.LITELLM, None, route.api_key, route.upstream_model, route)
        if len(self._cache) < MAX_CACHED_ROUTES:
            self._cache[model] = resolved
        return resolved
