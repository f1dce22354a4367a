"""One access line per request: a JSON object on the ``sieve.access`` logger, at INFO.

::

    log_access(AccessLine(request_id="req_…", method="POST", route="/v1/chat/completions", status=502,
                          org="acme", model="gpt-4o-mini", outcome="upstream_error",
                          original_tokens=5120, forwarded_tokens=1800, prune_ms=3.1, upstream_ms=40.2,
                          duration_ms=45.0))
    # {"request_id":"req_…","method":"POST","route":"/v1/chat/completions","status":502,…}

``sieve serve`` writes these lines alone on standard output, one JSON object a line
(``access_lines_to``), so a log shipper parses them as they are; every other log
record goes to standard error. ``route`` is the route's template
(``/v1/responses/{response_id}``); a request no route serves (404, or 405 for a
method the path does not take) has a line too, its route the template its path
matched, or null, and then its ``path`` (cut to ``MAX_MODEL_CHARS``).

Two places write it, so each request gets exactly one line: the deferred
accounting (``gateway.exchange.accounting``) for a request that was forwarded, once its
answer has ended (a stream that broke after its 200 is an ``upstream_error``
there, with its tokens and upstream time); the access guard
(``gateway.api.access``) for every other request to a route: refused (401, 400,
404, 429, 503), answered without forwarding (``/v1/prune``, ``/v1/models``, the
admin routes), or failed with a bug (500). The ops routes' successes (probes and
scrapes, every few seconds) get none.

Never content, never a key: ids, names from configuration (the org, the route
template), the model the client named (cut to ``MAX_MODEL_CHARS``), numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import TextIO

import orjson

log = logging.getLogger("sieve.access")
MAX_MODEL_CHARS = 200


@dataclass(frozen=True, slots=True)
class AccessLine:
    request_id: str | None
    route: str | None
    status: int
    method: str | None = None
    org: str | None = None
    model: str | None = None
    path: str | None = None  # only when no route matched (route is None)
    outcome: str | None = None
    original_tokens: int | None = None
    forwarded_tokens: int | None = None
    prune_ms: float | None = None
    upstream_ms: float | None = None
    duration_ms: float | None = None


def log_access(line: AccessLine) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    shown = {name: value for name in _NAMES if (value := getattr(line, name)) is not None}
    if line.route is None:
        shown["route"] = None
    if isinstance(line.model, str):
        shown["model"] = line.model[:MAX_MODEL_CHARS]
    if isinstance(line.path, str):
        shown["path"] = line.path[:MAX_MODEL_CHARS]
    for name in ("prune_ms", "upstream_ms", "duration_ms"):
        if name in shown:
            shown[name] = round(shown[name], 2)
    log.info(orjson.dumps(shown).decode())


_NAMES = tuple(f.name for f in fields(AccessLine))


def access_lines_to(stream: TextIO) -> None:
    """Write the access lines to ``stream``, each its JSON object alone (no time, level or name
    in front: the object holds what a reader needs), and nowhere else."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.propagate = False  # the level stays the process's (SIEVE_LOG_LEVEL=warning turns them off)
