"""Who is calling: virtual keys, passthrough provider keys, anonymous use.

Keys are kept only as SHA-256 hex digests. A presented key is hashed, looked
up, and confirmed with ``hmac.compare_digest``::

    registry = KeyRegistry.from_entries(yaml.safe_load(path.read_text()))
    auth = Authenticator(registry, key_store=redis_stores.keys,
                         passthrough={"<sha256 of a provider key>": "acme"},
                         allow_anonymous=False)
    identity = await auth.authenticate(request.headers)   # raises Unauthorized

Keys file (a YAML list; ``key`` is hashed on load and never kept)::

    - {key: "sk-sieve-...", org: acme, team: search, name: ci-bot}
    - {key_sha256: "9f86d0...", org: acme, name: alice}

Passthrough: a client sends its own provider key; the gateway forwards it, and
the org comes from a ``key_sha256 -> org`` map. A wrong key is always a 401,
even when anonymous use is allowed: a typo should not silently run unmetered.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import asdict, dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gateway.errors import ConfigError, Unauthorized

if TYPE_CHECKING:
    from gateway.state.protocols import KeyStore

ANONYMOUS_ORG = "anonymous"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class IdentityKind(str, Enum):
    VIRTUAL = "virtual"          # a Sieve virtual key
    PASSTHROUGH = "passthrough"  # the client's own provider key, forwarded upstream
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Identity:
    org: str
    team: str | None = None
    key_name: str | None = None
    kind: IdentityKind = IdentityKind.VIRTUAL

    @property
    def forwards_client_key(self) -> bool:
        return self.kind is IdentityKind.PASSTHROUGH


ANONYMOUS = Identity(ANONYMOUS_ORG, kind=IdentityKind.ANONYMOUS)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


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


def parse_key_entry(entry: Any, where: str) -> KeyRecord:
    """One keys-file entry -> record; strict about fields, hashes a plaintext ``key``."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: must be a mapping with key or key_sha256, org, team, name")
    unknown = sorted(set(entry) - {"key", "key_sha256", "org", "team", "name"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: key, key_sha256, name, org, team")
    if ("key" in entry) == ("key_sha256" in entry):
        raise ConfigError(f"{where}: give exactly one of 'key' or 'key_sha256'")
    if "key" in entry:
        if not isinstance(entry["key"], str) or not entry["key"]:
            raise ConfigError(f"{where}.key: must be a non-empty string")
        digest = hash_key(entry["key"])
    else:
        digest = str(entry["key_sha256"]).lower()
        if not _SHA256_HEX.match(digest):
            raise ConfigError(f"{where}.key_sha256: must be 64 hex characters")
    org = entry.get("org")
    if not isinstance(org, str) or not org:
        raise ConfigError(f"{where}.org: required (a non-empty string)")
    team, name = entry.get("team"), entry.get("name")
    for field, value in (("team", team), ("name", name)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}.{field}: must be a string")
    return KeyRecord(digest, org, team, name)


class KeyRegistry:
    """Virtual keys loaded at start-up, by SHA-256 digest."""

    def __init__(self, records: Iterable[KeyRecord] = ()) -> None:
        self._by_hash: dict[str, KeyRecord] = {}
        for record in records:
            if record.key_sha256 in self._by_hash:
                raise ConfigError(f"duplicate virtual key (sha256 {record.key_sha256[:12]}...)")
            self._by_hash[record.key_sha256] = record

    @classmethod
    def from_entries(cls, entries: Any, where: str = "keys") -> "KeyRegistry":
        if entries is None:
            return cls()
        if not isinstance(entries, list):
            raise ConfigError(f"{where}: must be a list of {{key or key_sha256, org, team, name}}")
        return cls(parse_key_entry(entry, f"{where}[{i}]") for i, entry in enumerate(entries))

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, digest: str) -> KeyRecord | None:
        # The dict lookup is on SHA-256(key), which an attacker cannot steer byte by
        # byte, so its timing reveals nothing useful; compare_digest guards the match.
        record = self._by_hash.get(digest)
        if record is not None and hmac.compare_digest(record.key_sha256, digest):
            return record
        return None


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key from ``Authorization: Bearer <key>`` or else ``x-api-key``; None when absent.

    ``headers`` must be case-insensitive (Starlette's ``Headers`` is) or use
    lowercase names.
    """
    auth = headers.get("authorization")
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthorized("Authorization header must be 'Bearer <key>'.")
        token = token.strip()
        if not token:
            raise Unauthorized("Authorization header has an empty bearer key.")
        return token
    key = headers.get("x-api-key")
    if key is not None:
        if not key.strip():
            raise Unauthorized("x-api-key header is empty.")
        return key.strip()
    return None


def client_provider_key(identity: Identity, headers: Mapping[str, str]) -> str | None:
    """The caller's own provider key, to forward upstream: never a Sieve virtual key."""
    if identity.kind is IdentityKind.VIRTUAL:
        return None
    try:
        return presented_key(headers)
    except Unauthorized:
        return None


class Authenticator:
    """Resolves request headers to an :class:`Identity`.

    Order: the admin key store (keys added at runtime, and revocations that
    mask a file key), then the keys file, then the passthrough map.
    """

    def __init__(
        self,
        registry: KeyRegistry | None = None,
        *,
        key_store: KeyStore | None = None,
        passthrough: Mapping[str, str] | None = None,
        allow_anonymous: bool = False,
    ) -> None:
        self._registry = registry or KeyRegistry()
        self._store = key_store
        self._passthrough = {digest.lower(): org for digest, org in (passthrough or {}).items()}
        for digest, org in self._passthrough.items():
            if not _SHA256_HEX.match(digest):
                raise ConfigError(f"passthrough: {digest[:12]!r}... is not a SHA-256 hex digest")
            if not isinstance(org, str) or not org:
                raise ConfigError(f"passthrough: {digest[:12]}...: org must be a non-empty string")
        self._allow_anonymous = allow_anonymous

    async def authenticate(self, headers: Mapping[str, str]) -> Identity:
        key = presented_key(headers)
        if key is None:
            if self._allow_anonymous:
                return ANONYMOUS
            raise Unauthorized(
                "Missing API key: send 'Authorization: Bearer <your Sieve key>' (or 'x-api-key')."
            )
        digest = hash_key(key)
        if self._store is not None:
            record = await self._store.get(digest)
            if record is not None:
                if record.revoked:
                    raise Unauthorized("This API key has been revoked.")
                return record.identity()
        record = self._registry.lookup(digest)
        if record is not None:
            return record.identity()
        org = self._passthrough.get(digest)
        if org is not None:
            return Identity(org, None, f"passthrough-{digest[:8]}", IdentityKind.PASSTHROUGH)
        raise Unauthorized("Invalid API key: it is not a Sieve virtual key or a mapped provider key.")
