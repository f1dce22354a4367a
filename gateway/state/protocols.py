"""What the gateway needs from shared state; each Protocol has an in-memory twin
(``gateway.state.memory``) and a Redis implementation (``gateway.state.redis_store``),
and one contract suite (``tests/contract``) runs against both.

Every method may raise ``gateway.errors.StoreUnavailable`` when the backing
store cannot be reached; none hangs longer than its configured timeouts.

Budget protocol, in the order a request uses it::

    reservation = await budgets.reserve(rid, limits, tokens, now)   # or BudgetExceeded (429)
    try:
        usage = await forward(...)
    except BaseException:
        await budgets.release(reservation)          # upstream error, timeout, disconnect
        raise
    await budgets.settle(reservation, usage.total_tokens)

``reserve`` checks and holds the tokens on ALL limits at once or on none.
``settle`` replaces the held amount by the actual usage (more or less).
``release`` returns the held amount. Settle and release act once per
reservation and answer a ``Settlement``: ``APPLIED``; ``ALREADY_FINAL`` for
any later settle/release of it (a retry after a lost reply changes nothing: the
store remembers final reservations for a while); ``UNKNOWN`` for an id it never
held or forgot (restarted empty). A release of an unknown id still marks it
final, so a reserve of that id that arrives late holds nothing.
A reservation neither settled nor released within its TTL expires and its
tokens are returned (a crashed replica cannot leak them); a settle that
arrives after that still charges the actual usage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from gateway.billing import BudgetLimit, BudgetStatus, Reservation, Settlement
from gateway.wire import Identity


@runtime_checkable
class ConversationStore(Protocol):
    """Frozen pruning decisions per conversation; values are opaque bytes."""

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: int) -> None: ...


@runtime_checkable
class ScoreCache(Protocol):
    """Scorer results by content key; a miss is ``None`` at the key's position."""

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    async def put_many(self, items: Mapping[str, bytes], ttl_s: int) -> None: ...


@runtime_checkable
class BudgetStore(Protocol):
    async def reserve(
        self, reservation_id: str, limits: Sequence[BudgetLimit], tokens: int, now: float
    ) -> Reservation:
        """Hold ``tokens`` on every limit (windows containing ``now``), atomically.

        Raises ``BudgetExceeded`` naming the first limit that cannot cover it;
        then nothing is held anywhere. All limits must belong to one org. With
        no limits it returns an empty reservation without touching the store.
        Retrying the same ``reservation_id`` does not hold the tokens twice.
        """
        ...

    async def settle(self, reservation: Reservation, actual_tokens: int) -> Settlement:
        """Charge ``actual_tokens`` in place of the held amount (see the module docstring)."""
        ...

    async def release(self, reservation: Reservation) -> Settlement:
        """Return the held tokens; ``ALREADY_FINAL`` if settled, released or expired."""
        ...

    async def charge(self, limits: Sequence[BudgetLimit], tokens: int, now: float,
                     charge_id: str | None = None) -> None:
        """Record usage without a check (fail-open reconciliation of unmetered requests);
        with ``charge_id``, a charge sent again after a lost reply is counted once."""
        ...

    async def remaining(self, limits: Sequence[BudgetLimit], now: float) -> list[BudgetStatus]:
        """Status of each limit in the window containing ``now``, in the given order."""
        ...

    async def usage(self, org: str, now: float) -> list[BudgetStatus]:
        """Every counter of ``org`` in its current window (admin reporting)."""
        ...

    async def ping(self) -> None: ...


@dataclass(frozen=True)
class KeyRecord:
    """A virtual key at rest: its hash and who it belongs to. ``revoked`` masks a file key too."""

    key_sha256: str
    org: str
    team: str | None = None
    name: str | None = None
    revoked: bool = False

    def identity(self) -> Identity:
        return Identity(self.org, self.team, self.name or f"key-{self.key_sha256[:8]}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "KeyRecord":
        return cls(raw["key_sha256"], raw["org"], raw.get("team"), raw.get("name"), bool(raw.get("revoked", False)))


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A stored response (or conversation) Sieve relayed: whose it is, and how many tokens a
    request that continues it sends the model again (its chain: the input it was given,
    earlier turns included, and its output)."""

    org: str
    tokens: int


@runtime_checkable
class ResponseRegistry(Protocol):
    """Stored Responses ids (responses and conversations) by the org they were made for.

    ``claim`` records an id for ``org``, or updates its size when it is ``org``'s already;
    an id another org holds is left as it is (``False``), so the first owner keeps it.
    Entries expire after ``ttl_s`` (the provider's retention), refreshed by each claim."""

    async def get(self, response_id: str) -> StoredResponse | None: ...

    async def claim(self, response_id: str, entry: StoredResponse, ttl_s: int) -> bool: ...

    async def forget(self, response_id: str) -> None: ...


@runtime_checkable
class AuthFailureLog(Protocol):
    """Failed key checks per client address, in a sliding window, shared by the replicas.

    ``failed`` counts one failure at ``now`` and answers until when the address is refused
    (None: it is not: fewer than ``limit`` failures within ``window_s``)."""

    async def failed(self, client: str, now: float, limit: int, window_s: float) -> float | None: ...


@runtime_checkable
class KeyStore(Protocol):
    """Virtual keys added or revoked through the admin API (by SHA-256 digest)."""

    async def get(self, key_sha256: str) -> KeyRecord | None: ...

    async def add(self, record: KeyRecord) -> None: ...

    async def revoke(self, key_sha256: str) -> None:
        """Mark the key revoked (a tombstone that also masks the same key in the keys file)."""
        ...

    async def list(self, org: str | None = None) -> list[KeyRecord]: ...
