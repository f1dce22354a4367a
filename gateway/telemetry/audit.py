"""The audit log: one JSON line per request.

::

    audit = AuditLog.open(settings.audit_log, secrets=[upstream_key])  # path, "-" or None
    audit.write(AuditEntry(request_id=rid, timestamp=time.time(), org="acme", ...,
                           secrets=[client_key]))
    audit.close()                                  # in the app's lifespan

A line looks like (keys always present; ``request`` only with content)::

    {"request_id": "r1", "route": "/v1/chat/completions", "timestamp": "2025-01-01T00:00:00.000Z", "org": "acme",
     "team": null, "model": "gpt-4o-mini", "strategy": "relevance", "outcome": "pruned",
     "tokens": {"original": 900, "forwarded": 400, "saved": 500},
     "decisions": [{"index": 0, "action": "kept", "score": 5, "reason": "pinned"}],
     "cost": {"priced": true, "counterfactual_usd": ..., "actual_usd": ..., "scorer_usd": ...,
              "net_usd": ..., ...token figures...} | null,
     "timings": {"prune_ms": 1.2, "scorer_ms": 0.0, "upstream_ms": 350.0, "overhead_ms": 2.0},
     "target_tokens": 24000 | null,
     "budget": {"reserved_tokens": 4096, "charged_tokens": 1420 | null, "reported_tokens": 1420 | null,
                "usage_anomaly": null | "junk" | "ceiling"} | null,
     "cohort": "pruned" | "control" | "shadow" | null,
     "reasoning": {"invalidated": {"current_loop": 1, "earlier": 4}, "stripped": 4, "dropped": 1,
                   "retried": false, "provider_transformations": {"prefix_binding_mismatch": 1}},
                   (only on a request where reasoning was in play and something happened to it)
     "shadow": {"mode": "epoch", "forwarded_tokens": 400, "saved_tokens": 500, "prefix_changed": true,
                "priced": true, "billed_usd": ..., "would_be_usd": ..., "scorer_usd": ..., "net_usd": ...,
                "would_be_prompt_tokens": ..., "would_be_cached_tokens": ...,
                "would_be_cache_write_tokens": ...} | null,
     "request": {...original body...}}

Under a shadow policy the request went out as it came: ``tokens`` are what was
forwarded (nothing saved), ``decisions`` what the shadow decision would have
done to each message, and ``shadow`` what it would have forwarded and saved
(``gateway.telemetry.savings.shadow_savings``); ``sieve replay`` sums these
lines without any content.

Secrets never reach the file. Nothing in an ``AuditEntry`` holds headers,
and before a line is written every mapping key that names a credential
(``authorization``, ``api_key``, ``x-api-key``, ``secret``, ``password``,
``access_token`` …) loses its value, every string is scrubbed of the literal
secrets given (the gateway's upstream keys, the client's key) and of
key-shaped text (``Bearer …``, ``sk-…``, ``AKIA…``). Message content (the
original request body) is written only when the policy opts in
(``include_content=True``).

Writing: a line is encoded with orjson and written to a buffered binary file
that is flushed once per line: one ``write`` syscall of ~1 KB into the page
cache, microseconds, so doing it on the event loop is cheaper than handing it
to a thread. The flush also means a reader tailing the file sees whole lines
and a crash loses at most the line in flight. The one case that can block is
stdout piped to a reader that stops reading (the pipe buffer fills); point
the log at a file for heavy traffic. A write error is logged, never raised:
losing an audit line must not fail the request it describes.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Mapping, Sequence

import orjson

from gateway.telemetry.redaction import redact
from gateway.telemetry.savings import SavingsRecord, ShadowSavings
from gateway.telemetry.usage_bounds import Charge

__all__ = ["AuditEntry", "AuditLog", "MessageDecision", "Timings", "audit_record", "redact"]

logger = logging.getLogger("sieve.audit")

@dataclass(frozen=True, slots=True)
class MessageDecision:
    """What pruning did to one original message (by its index in the request)."""

    index: int
    action: str  # kept | masked | dropped | summarised
    score: float | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Timings:
    prune_ms: float | None = None
    scorer_ms: float | None = None
    upstream_ms: float | None = None
    overhead_ms: float | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    request_id: str
    timestamp: float  # epoch seconds (time.time())
    org: str
    team: str | None
    model: str
    strategy: str
    outcome: str
    original_tokens: int
    forwarded_tokens: int
    decisions: Sequence[MessageDecision] = ()
    savings: SavingsRecord | None = None
    timings: Timings = field(default_factory=Timings)
    request_body: Mapping[str, Any] | None = None  # the original body; written only with include_content
    include_content: bool = False  # the policy's opt-in
    secrets: Sequence[str] = ()  # literals to scrub (the client's key); never written
    route: str | None = None  # the route template it came by
    cohort: str | None = None
    shadow: ShadowSavings | None = None
    shadow_mode: str | None = None  # the shadow decision's prune mode (epoch, frozen, ...)
    expand_refs: Sequence[str] = ()  # the refs the model asked sieve_expand for (gateway.expand)
    expand_rounds: int = 0           # the provider calls Sieve made for them
    target_tokens: int | None = None  # the target in force (None: strategy none, no target)
    charge: Charge | None = None     # what the budget was charged, and a usage figure it refused
    reserved_tokens: int | None = None  # what the budget held for it before forwarding
    # Preserved reasoning (gateway.exchange.reasoning_guard): what Sieve's rewrite invalidated (per scope), the
    # blocks it took out or left for the provider to drop, a retry, and the provider's own report.
    reasoning: Mapping[str, Any] | None = None


def audit_record(entry: AuditEntry) -> dict[str, Any]:
    """The JSON-ready record of ``entry`` (not yet redacted)."""
    record: dict[str, Any] = {
        "request_id": entry.request_id,
        "route": entry.route,
        "timestamp": _iso(entry.timestamp),
        "org": entry.org,
        "team": entry.team,
        "model": entry.model,
        "strategy": entry.strategy,
        "outcome": entry.outcome,
        "tokens": {
            "original": entry.original_tokens,
            "forwarded": entry.forwarded_tokens,
            "saved": entry.original_tokens - entry.forwarded_tokens,
        },
        "decisions": [
            {"index": d.index, "action": d.action, "score": d.score, "reason": d.reason}
            for d in entry.decisions
        ],
        "cost": _cost(entry.savings),
        "timings": {
            "prune_ms": entry.timings.prune_ms,
            "scorer_ms": entry.timings.scorer_ms,
            "upstream_ms": entry.timings.upstream_ms,
            "overhead_ms": entry.timings.overhead_ms,
        },
    }
    record["target_tokens"] = entry.target_tokens
    record["budget"] = _budget(entry.charge, entry.reserved_tokens)
    record["cohort"] = entry.cohort
    record["shadow"] = _shadow(entry.shadow, entry.shadow_mode)
    if entry.expand_rounds or entry.expand_refs:
        record["expand"] = {"refs": list(entry.expand_refs), "rounds": entry.expand_rounds}
    if entry.reasoning:
        record["reasoning"] = dict(entry.reasoning)
    if entry.include_content and entry.request_body is not None:
        record["request"] = entry.request_body
    return record


class AuditLog:
    """Writes audit lines to a binary stream; a log opened on ``None`` is disabled."""

    def __init__(self, stream: BinaryIO | None, *, secrets: Iterable[str] = (), owns_stream: bool = False) -> None:
        self._stream = stream
        self._secrets = tuple(s for s in secrets if s)
        self._owns_stream = owns_stream
        self._lock = threading.Lock()  # lines stay whole if a caller writes from a thread

    @classmethod
    def open(cls, target: str | Path | None, *, secrets: Iterable[str] = ()) -> "AuditLog":
        """``None``: disabled; ``"-"``: stdout; anything else: a file opened for append."""
        if target is None:
            return cls(None)
        if str(target) == "-":
            return cls(sys.stdout.buffer, secrets=secrets)
        return cls(open(target, "ab"), secrets=secrets, owns_stream=True)  # noqa: SIM115 (closed in close())

    @property
    def enabled(self) -> bool:
        return self._stream is not None

    def write(self, entry: AuditEntry) -> None:
        if self._stream is None:
            return
        try:
            record = redact(audit_record(entry), (*self._secrets, *entry.secrets))
            line = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS) + b"\n"
            with self._lock:
                self._stream.write(line)
                self._stream.flush()
        except (OSError, ValueError, TypeError) as exc:  # a closed stream; a value JSON cannot hold
            logger.error("audit log write failed for request %s: %s", entry.request_id, type(exc).__name__)

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None and self._owns_stream:
            stream.close()


def _cost(s: SavingsRecord | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "priced": s.priced,
        "counterfactual_usd": s.counterfactual_usd,
        "actual_usd": s.actual_usd,
        "scorer_usd": s.scorer_usd,
        "net_usd": s.net_usd,
        "prompt_tokens": s.actual_prompt_tokens,
        "cached_tokens": s.actual_cached_tokens,
        "cache_write_tokens": s.actual_cache_write_tokens,
        "completion_tokens": s.completion_tokens,
        "overhead_tokens": s.overhead_tokens,
        "sieve_tool_tokens": s.sieve_tool_tokens,
        "counterfactual_prompt_tokens": s.counterfactual_prompt_tokens,
        "counterfactual_cached_tokens": s.counterfactual_cached_tokens,
        "counterfactual_cache_write_tokens": s.counterfactual_cache_write_tokens,
    }


def _budget(charge: Charge | None, reserved: int | None) -> dict[str, Any] | None:
    if charge is None and reserved is None:
        return None
    anomaly = charge.anomaly.value if charge is not None and charge.anomaly is not None else None
    return {"reserved_tokens": reserved, "charged_tokens": charge.tokens if charge is not None else None,
            "reported_tokens": charge.reported if charge is not None else None, "usage_anomaly": anomaly}


def _shadow(s: ShadowSavings | None, mode: str | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "mode": mode, "forwarded_tokens": s.forwarded_tokens, "saved_tokens": s.saved_tokens,
        "prefix_changed": s.prefix_changed, "priced": s.priced, "billed_usd": s.billed_usd,
        "would_be_usd": s.would_be_usd, "scorer_usd": s.scorer_usd, "net_usd": s.net_usd,
        "would_be_prompt_tokens": s.would_be_prompt_tokens, "would_be_cached_tokens": s.would_be_cached_tokens,
        "would_be_cache_write_tokens": s.would_be_cache_write_tokens,
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
