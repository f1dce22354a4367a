"""Budget enforcement on the request path: reserve before forwarding, settle after.

Wraps a ``BudgetStore`` with the policy around it: which limits apply, how
much to reserve, what a store outage means (fail-open: serve and remember the
unmetered tokens, charged once the store is back; fail-closed: 503), and the
``sieve_budget_*`` metrics.

A settle or release the store could not take (down, out of memory, hung) is
owed, not dropped: it is retried before the next reservation once the store
answers again, so a reservation held when the outage began is given back then
rather than at its TTL. A settle whose reservation the store no longer knows
(it restarted empty) becomes a plain charge of the usage.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.budgets import BudgetConfig, BudgetLimit, Reservation, new_reservation_id, reservation_tokens
from gateway.errors import BudgetExceeded, StoreUnavailable
from gateway.state.protocols import BudgetStore
from gateway.telemetry.metrics import FailOpen, Metrics
from gateway.wire.call import ChatCall

log = logging.getLogger("sieve.budgets")
MAX_PENDING = 100_000


@dataclass(slots=True)
class _Owed:
    """Budget work postponed by an outage: charge ``tokens`` served unmetered (no
    reservation), settle a reservation at ``tokens``, or release it (``tokens`` None)."""

    limits: tuple[BudgetLimit, ...]
    tokens: int | None
    at: float
    reservation: Reservation | None = None


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
        self._owed: list[_Owed] = []

    @property
    def store(self) -> BudgetStore:
        return self._store

    @property
    def config(self) -> BudgetConfig:
        return self._config

    def unmetered_tokens(self, org: str) -> int:
        """Tokens served during a store outage on this replica, not yet charged to ``org``."""
        return sum(o.tokens for o in self._owed if o.tokens is not None and o.limits and o.limits[0].org == org)

    async def budget_left(self, call: ChatCall) -> float | None:
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

    async def reserve(self, call: ChatCall, prompt_tokens: int, body: Mapping[str, Any]) -> Hold | None:
        limits = self._config.limits_for(call.identity)
        if not limits:
            return None
        tokens = reservation_tokens(prompt_tokens, body, call.policy.default_max_completion_tokens)
        org = self._org_label(call.identity.org)
        try:
            if self._owed:
                await self._reconcile()
            reservation = await self._store.reserve(new_reservation_id(), limits, tokens, time.time())
        except BudgetExceeded:
            self._metrics.budget_rejections.labels(org=org).inc()
            raise
        except StoreUnavailable:
            if not call.policy.store_fail_open:
                raise StoreUnavailable("the budget store is unreachable and this org's policy is "
                                       "fail-closed; retry shortly") from None
            self._metrics.fail_open.labels(reason=FailOpen.BUDGET_STORE).inc()
            log.warning("budget store unreachable: serving %s unmetered (fail-open)", call.request_id)
            return Hold(limits, None, None)
        for status in reservation.statuses:
            self._metrics.budget_remaining.labels(org=org, window=status.limit.window.value).set(status.remaining)
        return Hold(limits, reservation, reservation.remaining_tokens)

    async def settle(self, hold: Hold | None, actual_tokens: int) -> None:
        if hold is None or hold.done:
            return
        hold.done = True
        owed = _Owed(hold.limits, actual_tokens, hold.reserved_at, hold.reservation)
        if hold.reservation is None:
            self._remember(owed)
            return
        try:
            await self._store.settle(hold.reservation, actual_tokens)
        except StoreUnavailable:
            log.warning("budget store unreachable: settling reservation %s once it is back", hold.reservation.id)
            self._remember(owed)

    async def release(self, hold: Hold | None) -> None:
        if hold is None or hold.done:
            return
        hold.done = True
        if hold.reservation is not None:
            try:
                await self._store.release(hold.reservation)
            except StoreUnavailable:
                # Retried once the store is back (else its TTL returns the tokens).
                log.warning("budget store unreachable: releasing reservation %s once it is back",
                            hold.reservation.id)
                self._remember(_Owed(hold.limits, None, hold.reserved_at, hold.reservation))

    async def flush(self) -> int:
        """At shutdown: charge what was served unmetered (and settle or release what failed)
        while the store was down, as the next reservation would have. Returns the tokens
        that could not be charged (the store is still down) and are lost with this process."""
        if not self._owed:
            return 0
        try:
            await self._reconcile()
        except StoreUnavailable:
            pass
        lost = sum(o.tokens for o in self._owed if o.tokens is not None)
        if lost:
            log.error("budget store unreachable at shutdown: %d tokens served unmetered are not charged", lost)
        return lost

    def _remember(self, owed: _Owed) -> None:
        if len(self._owed) < MAX_PENDING:
            self._owed.append(owed)

    async def _reconcile(self) -> None:
        """Do what an outage postponed, in order (charges in their own windows)."""
        pending, self._owed = self._owed, []
        for i, owed in enumerate(pending):
            try:
                await self._apply(owed)
            except StoreUnavailable:
                self._owed = pending[i:] + self._owed
                raise

    async def _apply(self, owed: _Owed) -> None:
        if owed.reservation is None:
            assert owed.tokens is not None
            await self._store.charge(owed.limits, owed.tokens, owed.at)
        elif owed.tokens is None:
            await self._store.release(owed.reservation)
        elif not await self._store.settle(owed.reservation, owed.tokens):
            # The store no longer knows the reservation (it restarted empty): charge the usage.
            await self._store.charge(owed.limits, owed.tokens, owed.at)
