"""Budget enforcement on the request path: reserve before forwarding, settle after.

Wraps a ``BudgetStore`` with the policy around it: which limits apply, how
much to reserve, what a store outage means (fail-open: serve and remember the
unmetered tokens, charged once the store is back; fail-closed: 503), and the
``sieve_budget_*`` metrics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from gateway.budgets import BudgetConfig, BudgetLimit, Reservation, new_reservation_id, reservation_tokens
from gateway.errors import BudgetExceeded, StoreUnavailable
from gateway.state.protocols import BudgetStore
from gateway.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from gateway.proxy import ChatCall

log = logging.getLogger("sieve.budgets")
MAX_PENDING = 100_000


@dataclass(slots=True)
class Hold:
    """What a request holds on its budgets; ``reservation`` is None when unmetered."""

    limits: tuple[BudgetLimit, ...]
    reservation: Reservation | None
    remaining_tokens: int | None
    reserved_at: float = field(default_factory=time.time)
    done: bool = False


class BudgetGuard:
    def __init__(self, store: BudgetStore, config: BudgetConfig, metrics: Metrics,
                 org_label=lambda org: org) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._org_label = org_label
        self._unmetered: list[tuple[tuple[BudgetLimit, ...], int, float]] = []

    @property
    def store(self) -> BudgetStore:
        return self._store

    @property
    def config(self) -> BudgetConfig:
        return self._config

    def unmetered_tokens(self, org: str) -> int:
        """Tokens served during a store outage on this replica, not yet charged to ``org``."""
        return sum(tokens for limits, tokens, _ in self._unmetered if limits and limits[0].org == org)

    async def budget_left(self, call: "ChatCall") -> float | None:
        """Fraction (0..1) left of the caller's tightest budget, when the policy tightens
        pruning as budgets run low; None otherwise (or when the store cannot tell)."""
        if call.policy.tighten_below <= 0:
            return None
        limits = self._config.limits_for(call.identity)
        if not limits:
            return None
        try:
            statuses = await self._store.remaining(limits, time.time())
        except StoreUnavailable:
            return None
        return min((s.remaining / s.limit.limit for s in statuses if s.limit.limit > 0), default=None)

    async def reserve(self, call: "ChatCall", prompt_tokens: int, body: Mapping[str, Any]) -> Hold | None:
        limits = self._config.limits_for(call.identity)
        if not limits:
            return None
        tokens = reservation_tokens(prompt_tokens, body, call.policy.default_max_completion_tokens)
        org = self._org_label(call.identity.org)
        try:
            if self._unmetered:
                await self._reconcile()
            reservation = await self._store.reserve(new_reservation_id(), limits, tokens, time.time())
        except BudgetExceeded:
            self._metrics.budget_rejections.labels(org=org).inc()
            raise
        except StoreUnavailable:
            if not call.policy.store_fail_open:
                raise StoreUnavailable("the budget store is unreachable and this org's policy is "
                                       "fail-closed; retry shortly") from None
            self._metrics.fail_open.labels(reason="budget_store").inc()
            log.warning("budget store unreachable: serving %s unmetered (fail-open)", call.request_id)
            return Hold(limits, None, None)
        for status in reservation.statuses:
            self._metrics.budget_remaining.labels(org=org, window=status.limit.window.value).set(status.remaining)
        return Hold(limits, reservation, reservation.remaining_tokens)

    async def settle(self, hold: Hold | None, actual_tokens: int) -> None:
        if hold is None or hold.done:
            return
        hold.done = True
        try:
            if hold.reservation is None:
                self._remember(hold, actual_tokens)
            else:
                await self._store.settle(hold.reservation, actual_tokens)
        except StoreUnavailable:
            self._remember(hold, actual_tokens)

    async def release(self, hold: Hold | None) -> None:
        if hold is None or hold.done:
            return
        hold.done = True
        if hold.reservation is not None:
            try:
                await self._store.release(hold.reservation)
            except StoreUnavailable:
                # The reservation's TTL returns the tokens once the store is back.
                log.warning("budget store unreachable: reservation %s left to expire", hold.reservation.id)

    async def flush(self) -> int:
        """At shutdown: charge what was served unmetered while the store was down, as the
        next reservation would have. Returns the tokens that could not be charged (the
        store is still down) and are lost with this process."""
        if not self._unmetered:
            return 0
        try:
            await self._reconcile()
        except StoreUnavailable:
            lost = sum(tokens for _, tokens, _ in self._unmetered)
            log.error("budget store unreachable at shutdown: %d tokens served unmetered are not charged", lost)
            return lost
        return 0

    def _remember(self, hold: Hold, tokens: int) -> None:
        if len(self._unmetered) < MAX_PENDING:
            self._unmetered.append((hold.limits, tokens, hold.reserved_at))

    async def _reconcile(self) -> None:
        """Charge what was served unmetered during an outage (its own windows)."""
        pending, self._unmetered = self._unmetered, []
        for i, (limits, tokens, at) in enumerate(pending):
            try:
                await self._store.charge(limits, tokens, at)
            except StoreUnavailable:
                self._unmetered = pending[i:] + self._unmetered
                raise
