"""``sieve replay AUDIT.jsonl`` on a shadow-mode audit log: what pruning would have saved.

A shadow policy (``mode: shadow``) forwards requests as they came and writes, per
request, what its decision would have forwarded and billed (the audit line's
``shadow`` block, ``gateway.telemetry.audit``). This sums those blocks per org and
model; it needs no message content, so a log written without
``audit_include_content`` is enough::

    sieve replay /var/log/sieve/audit.jsonl

    org    model         requests  prompt tokens  would forward  saved %  billed $  would-be $  scorer $  net $  prefix moved
    acme   gpt-4o-mini        120        1843200         702311     61.9    0.2981      0.1374    0.0000  0.1607          9.2%

The dollars are the live accounting's (``gateway.telemetry.savings.shadow_savings``:
cache pricing, a lower bound); lines of other cohorts are counted, not summed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, TextIO

import orjson

__all__ = ["ShadowTotals", "is_shadow_log", "shadow_report", "shadow_totals"]


@dataclass
class ShadowTotals:
    requests: int = 0
    priced: int = 0
    original_tokens: int = 0
    would_forward_tokens: int = 0
    billed_usd: float = 0.0
    would_be_usd: float = 0.0
    scorer_usd: float = 0.0
    prefix_changes: int = 0
    modes: Counter[str] = field(default_factory=Counter)

    def add(self, line: Mapping[str, Any], shadow: Mapping[str, Any]) -> None:
        self.requests += 1
        self.original_tokens += int((line.get("tokens") or {}).get("original") or 0)
        self.would_forward_tokens += int(shadow.get("forwarded_tokens") or 0)
        self.scorer_usd += float(shadow.get("scorer_usd") or 0.0)
        self.prefix_changes += bool(shadow.get("prefix_changed"))
        self.modes[str(shadow.get("mode"))] += 1
        if shadow.get("priced"):
            self.priced += 1
            self.billed_usd += float(shadow.get("billed_usd") or 0.0)
            self.would_be_usd += float(shadow.get("would_be_usd") or 0.0)

    @property
    def net_usd(self) -> float:
        return self.billed_usd - self.would_be_usd - self.scorer_usd


def _lines(raw: Iterable[bytes]) -> Iterable[Mapping[str, Any]]:
    for text in raw:
        if not text.strip():
            continue
        try:
            line = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        if isinstance(line, dict):
            yield line


def is_shadow_log(raw: Iterable[bytes]) -> bool:
    """Whether these lines are audit lines with a shadow decision (else: recorded requests)."""
    return any(isinstance(line.get("shadow"), dict) for line in _lines(raw))


def shadow_totals(raw: Iterable[bytes]) -> tuple[dict[tuple[str, str], ShadowTotals], Counter[str]]:
    """Per (org, model), the shadow lines' totals; and how many lines each cohort had."""
    totals: dict[tuple[str, str], ShadowTotals] = defaultdict(ShadowTotals)
    cohorts: Counter[str] = Counter()
    for line in _lines(raw):
        cohorts[str(line.get("cohort"))] += 1
        shadow = line.get("shadow")
        if isinstance(shadow, dict):
            totals[(str(line.get("org")), str(line.get("model")))].add(line, shadow)
    return dict(totals), cohorts


def shadow_report(path: Path, raw: list[bytes], out: TextIO) -> int:
    totals, cohorts = shadow_totals(raw)
    out.write(f"shadow decisions in {path} (cohorts: "
              f"{', '.join(f'{name} {n}' for name, n in sorted(cohorts.items()))}); dollars with cache "
              f"pricing, a lower bound on the saving\n")
    out.write(f"{'org':<16} {'model':<28} {'requests':>8} {'prompt tokens':>14} {'would forward':>14} "
              f"{'saved %':>8} {'billed $':>10} {'would-be $':>11} {'scorer $':>9} {'net $':>9} "
              f"{'prefix moved':>13}\n")
    for (org, model), t in sorted(totals.items()):
        saved = 100 * (1 - t.would_forward_tokens / t.original_tokens) if t.original_tokens else 0.0
        dollars = (f"{t.billed_usd:>10.4f} {t.would_be_usd:>11.4f} {t.scorer_usd:>9.4f} {t.net_usd:>9.4f}"
                   if t.priced else f"{'unpriced':>10} {'-':>11} {t.scorer_usd:>9.4f} {'-':>9}")
        out.write(f"{org:<16} {model:<28} {t.requests:>8} {t.original_tokens:>14} {t.would_forward_tokens:>14} "
                  f"{saved:>8.1f} {dollars} {100 * t.prefix_changes / t.requests:>12.1f}%\n")
        if t.priced < t.requests:
            out.write(f"{'':<16} {'':<28} {t.requests - t.priced} request(s) without a price or usage: "
                      f"not in the dollars\n")
    return 0
