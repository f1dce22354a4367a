"""``GET /v1/models``: the models this gateway routes.

The configured models, plus whatever the default upstream lists (asked with
the configured key, or the caller's own in passthrough), unless
``strict_models`` says only the configured ones are served. The default
upstream's failure to answer is not the caller's problem: its models are
simply left out.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import aiohttp

from gateway.config import Settings
from gateway.wire import Identity, client_provider_key

log = logging.getLogger("sieve.upstream")
LIST_TIMEOUT_S = 3.0


class ModelCatalog:
    def __init__(self, settings: Settings, session: aiohttp.ClientSession) -> None:
        self._configured = sorted(settings.models)
        self._base = None if settings.strict_models else settings.upstream_base_url
        self._key = settings.upstream_api_key
        self._session = session
        self._created = int(time.time())

    async def list(self, identity: Identity, headers: Mapping[str, str]) -> list[dict[str, Any]]:
        models = {name: {"id": name, "object": "model", "created": self._created, "owned_by": "sieve"}
                  for name in self._configured}
        if self._base:
            key = self._key or client_provider_key(identity, headers)
            for item in await self._listed_upstream(key):
                models.setdefault(item["id"], item)
        return sorted(models.values(), key=lambda m: m["id"])

    async def _listed_upstream(self, key: str | None) -> list[dict[str, Any]]:
        assert self._base is not None
        try:
            async with self._session.get(self._base.rstrip("/") + "/models",
                                         timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT_S),
                                         headers={"authorization": f"Bearer {key}"} if key else {}) as resp:
                if resp.status != 200:
                    return []
                payload = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.info("default upstream did not list its models: %s", exc.__class__.__name__)
            return []
        listed = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(listed, list):
            return []
        return [item for item in listed if isinstance(item, dict) and isinstance(item.get("id"), str)]
