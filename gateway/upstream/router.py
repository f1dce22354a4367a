"""Which upstream a model goes to, and with which key.

Configured models first; any other model goes to the default
OpenAI-compatible upstream (``SIEVE_UPSTREAM_BASE_URL``) when there is one,
else it is unknown (404). Without a configured key the client's own key is
forwarded (passthrough).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gateway.errors import UnknownModel
from gateway.settings import ModelRoute, Settings


@dataclass(frozen=True, slots=True)
class ResolvedRoute:
    model: str
    kind: str                 # "openai" | "litellm"
    url: str | None           # chat/completions URL (openai kind)
    api_key: str | None       # configured key; None = forward the client's
    upstream_model: str | None
    route: ModelRoute


class ModelRouter:
    def __init__(self, settings: Settings) -> None:
        self._models: Mapping[str, ModelRoute] = settings.models
        self._default_base = settings.upstream_base_url
        self._default_key = settings.upstream_api_key
        self._cache: dict[str, ResolvedRoute] = {}

    @property
    def configured(self) -> list[str]:
        return sorted(self._models)

    @property
    def has_default(self) -> bool:
        return bool(self._default_base)

    def resolve(self, model: str) -> ResolvedRoute:
        hit = self._cache.get(model)
        if hit is not None:
            return hit
        route = self._models.get(model)
        if route is None:
            if not self._default_base:
                known = ", ".join(self.configured) or "none configured"
                raise UnknownModel(f"model {model!r} is not routed by this gateway (models: {known})",
                                   param="model")
            route = ModelRoute(name=model, kind="openai", api_base=self._default_base,
                               api_key=self._default_key)
        if route.kind == "openai":
            base = (route.api_base or self._default_base or "").rstrip("/")
            if not base:
                raise UnknownModel(f"model {model!r} has no api_base and no default upstream is set",
                                   param="model")
            resolved = ResolvedRoute(model, "openai", base + "/chat/completions",
                                     route.api_key or (self._default_key if not route.api_base else None),
                                     route.upstream_model, route)
        else:
            resolved = ResolvedRoute(model, "litellm", None, route.api_key, route.upstream_model, route)
        if len(self._cache) < 10_000:
            self._cache[model] = resolved
        return resolved
