"""Budget enforcement on the request path: reserve before forwarding, settle after.

Wraps a ``BudgetStore`` with the policy around it: which limits apply, how
much to reserve, what a store outage means (fail-open: serve and remember the
unmetered tokens, charged once the store is back; fail-closed: 503), and the
``sieve_budget_*`` metrics.

How much to reserve is ``gateway.billing.reservation_estimate``: everything the
provider can bill for the forwarded body, so concurrent requests cannot spend
past a budget; content the body only names (a file by id, a built-in tool) at the
policy's ``reference_floor_tokens`` each, and a continuation's stored history at
the size Sieve learned relaying it (``chain_tokens``). With no output cap in the
body, the model's own output limit (``output_limit``, from litellm's model map) is
what the provider may generate; for a model it does not know, the policy's
``default_max_completion_tokens`` is reserved and also sent as the body's cap
(``with_output_cap``), so the provider cannot bill more output than was reserved.
A settle charges the provider's usage as reported, under the per-request sanity
ceiling (``gateway.telemetry.usage_bounds``).

A settle or release the store could not take (down, out of memory, hung) is
owed, not dropped: it is retried before the next reservation once the store
answers again, so a reservation held when the outage began is given back then
rather than at its TTL. So is a reserve that failed: Redis may have taken it
without its reply arriving (it hung with the command in its socket and ran it
later), so its id is released too. Retries are safe: the store tells a settle
it already applied (``Settlement.ALREADY_FINAL``, nothing changes) from a
reservation it no longer knows (``UNKNOWN``: it restarted empty), and only the
latter becomes a plain charge of the usage. Work the store refuses outright
(``StoreRejected``) is logged and dropped: retrying it would fail forever and
hold every later reservation of every org behind it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from gateway.billing import (BudgetConfig, BudgetLimit, OUTPUT_CAPS, Reservation, ReservationEstimate, Settlement,
    estimate_reservation, new_reservation_id)
from gateway.errors import BudgetExceeded, StoreRejected, StoreUnavailable
from gateway.pruning import Policy, TokenCounters
from gateway.state import BudgetStore
from gateway.telemetry import Charge, DEFAULT_CEILING, FailOpen, Metrics, bounded_usage
from gateway.wire import Identity, ModelCall, WireFormat

log = logging.getLogger("sieve.budgets")
MAX_PENDING = 100_000


class BudgetedCall(Protocol):
    """What a reservation needs of a request: who sends it, under which policy (a forwarded
    ``ModelCall``, or a billed pass-through call)."""

    @property
    def request_id(self) -> str: ...

    @property
    def identity(self) -> Identity: ...

    @property
    def policy(self) -> Policy: ...


@dataclass(slots=True)
class _Owed:
    """Budget work postponed by an outage: charge ``tokens`` served unmetered (no
    reservation), settle a reservation at ``tokens``, or release it (``tokens`` None).
    ``charge_id`` makes a charge count once however often it is sent."""

    limits: tuple[BudgetLimit, ...]
    tokens: int | None
    at: float
    reservation: Reservation | None = None
    charge_id: str = field(default_factory=new_reservation_id)


@dataclass(slots=True)
class Hold:
    """What a request holds on its budgets; ``reservation`` is None when unmetered."""

    limits: tuple[BudgetLimit, ...]
    reservation: Reservation | None
    remaining_tokens: int | None
    estimate: int = 0  # the most the request can be billed (what was, or would have been, reserved)
    input_estimate: int = 0  # of which its prompt (a stream cut before its usage is charged on it)
    reserved_at: float = field(default_factory=time.time)
    done: bool = False


class BudgetGuard:
    def __init__(self, store: BudgetStore, config: BudgetConfig, metrics: Metrics,
                 org_label: Callable[[str], str] = lambda org: org, *, counters: TokenCounters | None = None,
                 output_limit: Callable[[str], int | None] = lambda model: None,
                 ceiling: int = DEFAULT_CEILING) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._org_label = org_label
        self._counters = counters or TokenCounters()
        self._output_limit = output_limit
        self._ceiling = ceiling
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

    async def budget_left(self, call: ModelCall) -> float | None:
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

    def estimate(self, body: Mapping[str, Any], policy: Policy, fmt: WireFormat = WireFormat.CHAT,
                 chain_tokens: int = 0) -> ReservationEstimate:
        """The most the forwarded ``body`` can be billed (what a reservation holds), a stored
        history it continues (``chain_tokens``) included."""
        model = str(body.get("model") or "")
        default_output = self._output_limit(model) or policy.default_max_completion_tokens
        counter = self._counters.for_model(model)
        found = estimate_reservation(fmt, body, counter.count_text, default_output, policy.reference_floor_tokens)
        return ReservationEstimate(found.input_tokens + chain_tokens, found.output_tokens)

    def with_output_cap(self, call: BudgetedCall, body: dict[str, Any], fmt: WireFormat) -> dict[str, Any]:
        """``body`` as forwarded under a budget: a model whose output limit is unknown, asked with
        no cap, gets the policy's ``default_max_completion_tokens`` as its cap (what is reserved),
        so its output is bounded by the reservation; any other body as it is."""
        fields = OUTPUT_CAPS[fmt]
        if any(body.get(name) is not None for name in fields) or not self._config.limits_for(call.identity):
            return body
        if self._output_limit(str(body.get("model") or "")):
            return body
        return {**body, fields[-1]: call.policy.default_max_completion_tokens}

    async def reserve(self, call: BudgetedCall, prompt_tokens: int, body: Mapping[str, Any],
                      fmt: WireFormat = WireFormat.CHAT, chain_tokens: int = 0) -> Hold | None:
        """Hold what ``body`` (as forwarded) can cost on every budget of the caller;
        ``prompt_tokens`` (the pruner's count of the messages) is a floor under the estimate."""
        limits = self._config.limits_for(call.identity)
        if not limits:
            return None
        found = self.estimate(body, call.policy, fmt, chain_tokens)
        hold = await self._hold(call, limits, max(found.tokens, prompt_tokens))
        if hold is not None:
            hold.input_estimate = max(found.input_tokens, prompt_tokens)
        return hold

    async def _hold(self, call: BudgetedCall, limits: tuple[BudgetLimit, ...], tokens: int) -> Hold | None:
        org = self._org_label(call.identity.org)
        rid, now = new_reservation_id(), time.time()
        try:
            if self._owed:
                await self._reconcile()
            reservation = await self._store.reserve(rid, limits, tokens, now)
        except BudgetExceeded:
            self._metrics.budget_rejections.labels(org=org).inc()
            raise
        except StoreUnavailable:
            # Redis may have taken the reserve without its reply arriving: give it back once it answers.
            self._remember(_Owed(limits, None, now, Reservation.planned(rid, limits, tokens, now, 0.0)))
            if not call.policy.store_fail_open:
                raise StoreUnavailable("the budget store is unreachable and this org's policy is "
                                       "fail-closed; retry shortly") from None
            self._metrics.fail_open.labels(reason=FailOpen.BUDGET_STORE).inc()
            log.warning("budget store unreachable: serving %s unmetered (fail-open)", call.request_id)
            return Hold(limits, None, None, tokens)
        for status in reservation.statuses:
            self._metrics.budget_remaining.labels(org=org, window=status.limit.window.value).set(status.remaining)
        return Hold(limits, reservation, reservation.remaining_tokens, tokens)

    def bounded(self, reported: int | None, estimate: int) -> Charge:
        """What a reported total charges (the sanity ceiling; junk as ``estimate``), an
        anomaly counted in ``sieve_usage_anomalies_total``."""
        charge = bounded_usage(reported, estimate, self._ceiling)
        if charge.anomaly is not None:
            self._metrics.usage_anomalies.labels(reason=charge.anomaly.value).inc()
            log.warning("provider usage %r is %s: charged %d tokens", reported, charge.anomaly.value, charge.tokens)
        return charge

    @property
    def ceiling(self) -> int:
        return self._ceiling

    async def settle(self, hold: Hold | None, actual_tokens: int | None) -> Charge | None:
        """Charge the provider's usage (``None``: it reported junk) under the sanity ceiling;
        what was charged (None: no budget applies, or the hold was settled already)."""
        if hold is None or hold.done:
            return None
        charge = self.bounded(actual_tokens, hold.estimate)
        await self.settle_charge(hold, charge)
        return charge

    async def settle_charge(self, hold: Hold | None, charge: Charge) -> None:
        """Settle ``hold`` at a charge already bounded (``bounded``)."""
        if hold is None or hold.done:
            return
        hold.done = True
        tokens = charge.tokens
        owed = _Owed(hold.limits, tokens, hold.reserved_at, hold.reservation)
        if hold.reservation is None:
            self._remember(owed)
            return
        try:
            await self._store.settle(hold.reservation, tokens)
        except StoreRejected as exc:
            log.error("budget store refused to settle reservation %s (dropped; its TTL returns the "
                      "tokens): %s", hold.reservation.id, exc)
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
            except StoreRejected as exc:
                log.error("budget store refused to release reservation %s (dropped): %s",
                          hold.reservation.id, exc)
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
        """Do what an outage postponed, in order (charges in their own windows). What the
        store refuses outright is dropped: sent again, it would fail again, forever."""
        pending, self._owed = self._owed, []
        for i, owed in enumerate(pending):
            try:
                await self._apply(owed)
            except StoreRejected as exc:
                log.error("budget store refused owed work (dropped): %s", exc)
            except StoreUnavailable:
                self._owed = pending[i:] + self._owed
                raise

    async def _apply(self, owed: _Owed) -> None:
        if owed.reservation is None:
            assert owed.tokens is not None
            await self._store.charge(owed.limits, owed.tokens, owed.at, owed.charge_id)
        elif owed.tokens is None:
            await self._store.release(owed.reservation)
        elif await self._store.settle(owed.reservation, owed.tokens) is Settlement.UNKNOWN:
            # The store no longer knows the reservation (it restarted empty): charge the usage.
            # A settle it had applied before its reply was lost answers ALREADY_FINAL instead.
            await self._store.charge(owed.limits, owed.tokens, owed.at, owed.charge_id)
