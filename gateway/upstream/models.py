"""``GET /v1/models``: the models this gateway routes.

The configured models, plus whatever the default upstream lists (asked with
the configured key, or the caller's own in passthrough), unless
``strict_models`` says only the configured ones are served. The default
upstream's failure to answer is not the caller's problem: its models are
simply left out. The listing goes through the same transport as a forward
(``OpenAICompatibleUpstream``: the connection pool, the body limit, credentials in the
URL), with a short wait of its own.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import orjson

from gateway.config import Settings
from gateway.errors import SieveError
from gateway.upstream.openai_compat import OpenAICompatibleUpstream
from gateway.wire import Identity, WireFormat, client_provider_key

log = logging.getLogger("sieve.upstream")
LIST_TIMEOUT_S = 3.0


class ModelCatalog:
    def __init__(self, settings: Settings, http: OpenAICompatibleUpstream) -> None:
        self._configured = sorted(settings.models)
        self._base = None if settings.strict_models else settings.upstream_base_url
        self._key = settings.upstream_api_key
        self._http = http
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
            response = await self._http.relay("GET", self._base.rstrip("/") + "/models", None,
                                              {"authorization": f"Bearer {key}"} if key else {}, WireFormat.CHAT,
                                              read_timeout_s=LIST_TIMEOUT_S)
            if response.chunks is not None:  # an event stream is no listing: its connection is not reused
                response.release.close()
                return []
            payload = orjson.loads(response.body or b"") if response.status == 200 else None
        except (SieveError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.info("default upstream did not list its models: %s", exc.__class__.__name__)
            return []
        listed = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(listed, list):
            return []
        return [item for item in listed if isinstance(item, dict) and isinstance(item.get("id"), str)]
