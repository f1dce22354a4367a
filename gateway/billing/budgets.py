"""Token budgets: which limits apply, their windows, and how much to reserve.

Pure logic (no I/O); the stores in ``gateway.state`` do the counting.

Windows are **calendar-aligned in UTC**, not rolling: a ``minute`` budget
resets at the top of each UTC minute, ``hour`` at the top of each UTC hour,
``day`` at 00:00 UTC and ``month`` at 00:00 UTC on the first of the month.
Calendar windows give one counter per window (cheap, exact, easy to report:
"resets at 00:00 UTC"); a rolling window would need a log of every charge.

A budgets config, as read from YAML, maps scopes to per-window token limits.
Teams and keys belong to an org; a bare team/key name applies to that team/key
in every org, an ``org/name`` entry to one org only (and wins)::

    budgets:
      orgs:  {acme: {day: 1000000, minute: 50000}}
      teams: {search: {hour: 200000}, acme/infra: {day: 10000}}
      keys:  {ci-bot: {minute: 5000}}

    config = BudgetConfig.from_mapping(raw["budgets"])
    limits = config.limits_for(identity)            # org, team, key x windows
    tokens = estimate_reservation(WireFormat.CHAT, body, counter.count_text, 1024).tokens
    reservation = await budget_store.reserve(new_reservation_id(), limits, tokens, time.time())

How much a request reserves is ``gateway.billing.reservation_estimate``'s business.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Mapping, Protocol

from gateway.errors import BudgetExceeded, ConfigError


class Scope(str, Enum):
    ORG = "org"
    TEAM = "team"
    KEY = "key"


class Window(str, Enum):
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"
    MONTH = "month"


_WINDOW_ORDER = (Window.MINUTE, Window.HOUR, Window.DAY, Window.MONTH)
_SECTION_SCOPE = {"orgs": Scope.ORG, "teams": Scope.TEAM, "keys": Scope.KEY}


@dataclass(frozen=True)
class Bucket:
    """One calendar window instance (UTC): ``id`` names it, e.g. ``2025-01-15`` for a day."""

    window: Window
    id: str
    start: float
    reset_at: float


def bucket_for(window: Window, now: float) -> Bucket:
    """The UTC calendar window containing ``now`` (unix seconds) and when it resets."""
    t = datetime.fromtimestamp(now, tz=timezone.utc)
    if window is Window.MINUTE:
        start = t.replace(second=0, microsecond=0)
        return Bucket(window, start.strftime("%Y-%m-%dT%H:%M"), start.timestamp(), start.timestamp() + 60)
    if window is Window.HOUR:
        start = t.replace(minute=0, second=0, microsecond=0)
        return Bucket(window, start.strftime("%Y-%m-%dT%H"), start.timestamp(), start.timestamp() + 3600)
    if window is Window.DAY:
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        return Bucket(window, start.strftime("%Y-%m-%d"), start.timestamp(), start.timestamp() + 86400)
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return Bucket(window, start.strftime("%Y-%m"), start.timestamp(), following.timestamp())


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class BudgetLimit:
    """A token limit for one scope and window.

    ``org`` is always set, also for team and key scopes: teams and keys live
    inside an org, and the Redis store tags every key of one org alike so that
    one reservation's counters sit in one cluster slot.
    """

    org: str
    scope: Scope
    scope_id: str
    window: Window
    limit: int

    @property
    def name(self) -> str:
        """Stable, human-readable: ``org:acme:day``, ``team:acme/search:hour``."""
        owner = self.org if self.scope is Scope.ORG else f"{self.org}/{self.scope_id}"
        return f"{self.scope.value}:{owner}:{self.window.value}"

    def describe(self) -> str:
        if self.scope is Scope.ORG:
            return f"org '{self.org}' {self.window.value} budget"
        return f"{self.scope.value} '{self.scope_id}' (org '{self.org}') {self.window.value} budget"


@dataclass(frozen=True)
class BudgetStatus:
    """Where one limit stands in its current window. ``used`` = reserved + settled."""

    limit: BudgetLimit
    bucket: str
    reserved: int
    settled: int
    reset_at: float

    @property
    def used(self) -> int:
        return self.reserved + self.settled

    @property
    def remaining(self) -> int:
        # Settling may overshoot the limit (actual usage above the reservation); never report < 0.
        return max(0, self.limit.limit - self.used)


class Settlement(Enum):
    """What a settle or release found (never truthy-tested: each answer means something else).

    ``ALREADY_FINAL`` is the answer to a retry (a settle whose reply was lost, sent again):
    the store keeps a marker of every settled or released reservation for a while, so
    the retry changes nothing. ``UNKNOWN`` means the store never held it or forgot it
    (restarted empty): the caller charges the usage instead."""

    APPLIED = "applied"
    ALREADY_FINAL = "already_final"
    UNKNOWN = "unknown"


# The most tokens one figure may carry (15 decimal digits): far above any bill, and
# exact in the doubles Redis's Lua computes with (2^53 is about 9.007e15).
MAX_TOKENS = 10**15 - 1


@dataclass(frozen=True)
class Reservation:
    """Tokens held against every limit of one request until settled or released.

    ``buckets`` are the windows the tokens were reserved in: settling charges
    those windows even if the request finishes after a rollover. ``statuses``
    is the state right after reserving (for ``x-sieve-budget-remaining-tokens``).
    """

    id: str
    org: str | None
    tokens: int
    limits: tuple[BudgetLimit, ...]
    buckets: tuple[Bucket, ...]
    expires_at: float
    statuses: tuple[BudgetStatus, ...] = ()

    @property
    def remaining_tokens(self) -> int | None:
        """The smallest remaining across the limits, or ``None`` when no budget applies."""
        return min((s.remaining for s in self.statuses), default=None)

    @classmethod
    def planned(cls, reservation_id: str, limits: tuple[BudgetLimit, ...], tokens: int, now: float,
                ttl_s: float) -> "Reservation":
        """The reservation a ``reserve`` at ``now`` would make: what to release when the
        store may have taken that reserve without its reply arriving (a hang)."""
        buckets = tuple(bucket_for(limit.window, now) for limit in limits)
        return cls(reservation_id, reservation_org(limits), tokens, limits, buckets, now + ttl_s)


def check_tokens(tokens: int) -> None:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
        raise ValueError(f"tokens must be an integer in 0..{MAX_TOKENS}, got {tokens!r}")


def new_reservation_id() -> str:
    return uuid.uuid4().hex


def reservation_org(limits: tuple[BudgetLimit, ...] | list[BudgetLimit]) -> str | None:
    """The single org of a set of limits; one reservation never spans orgs (one hash tag)."""
    orgs = {limit.org for limit in limits}
    if len(orgs) > 1:
        raise ValueError(f"one reservation cannot span orgs: {sorted(orgs)}")
    return next(iter(orgs), None)


def budget_exceeded(status: BudgetStatus, tokens: int, now: float) -> BudgetExceeded:
    """The 429 for a limit that cannot cover ``tokens``; the fields go into the OpenAI error body."""
    limit = status.limit
    why = (
        f"this request needs {tokens} tokens, more than the whole limit"
        if tokens > limit.limit
        else f"this request needs {tokens}"
    )
    message = (
        f"Budget exceeded: {limit.describe()} of {limit.limit} tokens has {status.remaining} remaining; "
        f"{why}. It resets at {utc_iso(status.reset_at)} (UTC calendar window)."
    )
    return BudgetExceeded(
        message,
        extra={
            "budget": limit.name,
            "scope": limit.scope.value,
            "window": limit.window.value,
            "limit": limit.limit,
            "remaining": status.remaining,
            "requested": tokens,
            "reset_at": utc_iso(status.reset_at),
        },
        headers={
            "retry-after": str(max(1, int(status.reset_at - now + 0.999))),
            "x-sieve-budget-remaining-tokens": str(status.remaining),
        },
    )


class _HasScopes(Protocol):
    org: str
    team: str | None
    key_name: str | None


@dataclass(frozen=True)
class BudgetConfig:
    """Parsed ``budgets:`` section. Strict: unknown sections/windows and bad numbers are errors."""

    orgs: Mapping[str, Mapping[Window, int]]
    teams: Mapping[str, Mapping[Window, int]]
    keys: Mapping[str, Mapping[Window, int]]

    @classmethod
    def empty(cls) -> "BudgetConfig":
        return cls({}, {}, {})

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None, where: str = "budgets") -> "BudgetConfig":
        raw = raw or {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: must be a mapping of orgs/teams/keys")
        unknown = sorted(set(raw) - set(_SECTION_SCOPE))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; allowed: keys, orgs, teams")
        sections = {name: _parse_section(raw.get(name), f"{where}.{name}") for name in _SECTION_SCOPE}
        return cls(sections["orgs"], sections["teams"], sections["keys"])

    def limits_for(self, identity: _HasScopes) -> tuple[BudgetLimit, ...]:
        """Every limit that applies to ``identity``: org, then team, then key; windows short to long."""
        if not (self.orgs or self.teams or self.keys):
            return ()  # no budgets at all (asked three times a request)
        org = identity.org
        found: list[BudgetLimit] = []
        scoped = (
            (Scope.ORG, org, self.orgs.get(org)),
            (Scope.TEAM, identity.team, _lookup(self.teams, org, identity.team)),
            (Scope.KEY, identity.key_name, _lookup(self.keys, org, identity.key_name)),
        )
        for scope, scope_id, windows in scoped:
            if scope_id is None or not windows:
                continue
            for window in _WINDOW_ORDER:
                if window in windows:
                    found.append(BudgetLimit(org, scope, scope_id, window, windows[window]))
        return tuple(found)

    def limits_of_org(self, org: str) -> list[BudgetLimit]:
        """Every limit configured for ``org`` (admin reporting): its own, then its teams' and
        keys' (an ``org/name`` entry beats a bare ``name``); windows short to long."""
        found = [BudgetLimit(org, Scope.ORG, org, w, n) for w, n in _ordered(self.orgs.get(org))]
        for scope, section in ((Scope.TEAM, self.teams), (Scope.KEY, self.keys)):
            chosen: dict[str, Mapping[Window, int]] = {n: w for n, w in section.items() if "/" not in n}
            chosen.update({n.split("/", 1)[1]: w for n, w in section.items()
                           if "/" in n and n.split("/", 1)[0] == org})
            for name in sorted(chosen):
                found.extend(BudgetLimit(org, scope, name, w, n) for w, n in _ordered(chosen[name]))
        return found


def _ordered(windows: Mapping[Window, int] | None) -> list[tuple[Window, int]]:
    return [(w, windows[w]) for w in _WINDOW_ORDER if windows and w in windows]


def _lookup(section: Mapping[str, Mapping[Window, int]], org: str, name: str | None) -> Mapping[Window, int] | None:
    if name is None:
        return None
    return section.get(f"{org}/{name}") or section.get(name)


def _parse_section(raw: Any, where: str) -> dict[str, dict[Window, int]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping of name -> {{window: tokens}}")
    parsed: dict[str, dict[Window, int]] = {}
    for name, windows in raw.items():
        if not isinstance(windows, Mapping) or not windows:
            raise ConfigError(f"{where}.{name}: must map windows (minute/hour/day/month) to token limits")
        parsed[str(name)] = {}
        for window, tokens in windows.items():
            try:
                key = Window(window)
            except ValueError:
                raise ConfigError(
                    f"{where}.{name}: unknown window {window!r}; allowed: minute, hour, day, month"
                ) from None
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise ConfigError(f"{where}.{name}.{window}: must be a non-negative integer, got {tokens!r}")
            parsed[str(name)][key] = tokens
    return parsed
