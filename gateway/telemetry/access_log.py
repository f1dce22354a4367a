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
from dataclasses import dataclass
from typing import TextIO

import orjson

log = logging.getLogger("sieve.access")
MAX_MODEL_CHARS = 200


@dataclass(slots=True)
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
    """The line as JSON: its fields in their order, those that are None left out (a null
    ``route``, last, when no route matched), times in ms to two decimals."""
    if not log.isEnabledFor(logging.INFO):
        return
    model, path = line.model, line.path
    fields = {"request_id": line.request_id, "route": line.route, "status": line.status, "method": line.method,
              "org": line.org, "model": model[:MAX_MODEL_CHARS] if isinstance(model, str) else model,
              "path": path[:MAX_MODEL_CHARS] if isinstance(path, str) else path, "outcome": line.outcome,
              "original_tokens": line.original_tokens, "forwarded_tokens": line.forwarded_tokens,
              "prune_ms": _ms(line.prune_ms), "upstream_ms": _ms(line.upstream_ms),
              "duration_ms": _ms(line.duration_ms)}
    shown = {name: value for name, value in fields.items() if value is not None}
    if line.route is None:
        shown["route"] = None
    log.info(orjson.dumps(shown).decode())


def _ms(value: float | None) -> float | None:
    """Two decimals: ``round(value * 100) / 100`` is ``round(value, 2)`` but for exact ties
    (none in a million random timings), at a fifth of its cost (no decimal conversion)."""
    return round(value * 100) / 100 if value is not None else None


def access_lines_to(stream: TextIO) -> None:
    """Write the access lines to ``stream``, each its JSON object alone (no time, level or name
    in front: the object holds what a reader needs), and nowhere else."""
    handler = _MessageLines(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.propagate = False  # the level stays the process's (SIEVE_LOG_LEVEL=warning turns them off)


class _MessageLines(logging.StreamHandler):  # type: ignore[type-arg]
    """Each record's message alone on its line: what its ``%(message)s`` formatter writes, without
    the formatter's steps for a plain message (one a request)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.exc_text or record.stack_info:
            super().emit(record)  # the formatter appends them
            return
        try:
            self.stream.write(record.getMessage() + self.terminator)
            self.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: a broken stream is reported, never raised
            self.handleError(record)
