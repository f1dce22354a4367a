"""Who is calling: virtual keys, passthrough provider keys, anonymous use.

Keys are kept only as SHA-256 hex digests. A presented key is hashed, looked
up, and confirmed with ``hmac.compare_digest``::

    registry = KeyRegistry.from_entries(load_keys_file(path))
    auth = Authenticator(registry, key_store=redis_stores.keys,
                         passthrough={"<sha256 of a provider key>": "acme"},
                         allow_anonymous=False)
    identity = await auth.authenticate(request.headers)   # raises Unauthorized

    auth = authenticator_for(settings, key_store, allow_anonymous)   # the gateway's, from its settings

Keys file (a YAML list; ``key`` is hashed on load and never kept)::

    - {key: "sk-sieve-...", org: acme, team: search, name: ci-bot}
    - {key_sha256: "9f86d0...", org: acme, name: alice}

Passthrough: a client sends its own provider key; the gateway forwards it, and
the org comes from a ``key_sha256 -> org`` map. A wrong key is always a 401,
even when anonymous use is allowed: a typo should not silently run unmetered.

The resulting :class:`gateway.wire.call.Identity` (org, team, key name) is a
wire-level type: everything above the routes reads it from the ``ModelCall``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from gateway.errors import ConfigError, StoreUnavailable, Unauthorized
from gateway.config import Settings
from gateway.state import KeyRecord, KeyStore
from gateway.wire import ANONYMOUS, Identity, IdentityKind, presented_key

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


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


class Authenticator:
    """Resolves request headers to an :class:`Identity`.

    Order: the admin key store (keys added at runtime, and revocations that
    mask a file key), then the keys file, then the passthrough map.
    """

    def __init__(
        self,
        registry: KeyRegistry | None = None,
        *,
        key_store: KeyStore | KeysDuringOutage | None = None,
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


def is_open(settings: Settings) -> bool:
    """No way to authenticate anyone: every caller is anonymous and brings its own provider key."""
    return not settings.virtual_keys and settings.keys_file is None and not settings.passthrough \
        and not settings.admin_key


def load_keys_file(path: Path) -> list[Any]:
    """The entries of a keys file: a YAML list, or a mapping with ``keys:`` (entries are
    checked by :func:`parse_key_entry`)."""
    try:
        raw = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read keys file: {exc}") from exc
    entries = raw.get("keys") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a list of keys (or a mapping with 'keys:')")
    return entries


class OpenAccess:
    """The authenticator of an open gateway (:func:`is_open`): every caller is anonymous
    and brings its own provider key. The cli refuses to bind one beyond loopback unless told."""

    async def authenticate(self, headers: Mapping[str, str]) -> Identity:
        return ANONYMOUS


def authenticator_for(settings: Settings, key_store: KeyStore, allow_anonymous: bool) -> Authenticator | OpenAccess:
    """The gateway's authenticator: keys from the settings and the keys file, the admin
    key store, the passthrough map; :class:`OpenAccess` when there is no key to check."""
    entries = list(settings.virtual_keys)
    if settings.keys_file is not None:
        entries.extend(load_keys_file(settings.keys_file))
    registry = KeyRegistry.from_entries(entries or None, "keys")
    if is_open(settings):
        return OpenAccess()
    static = {digest.lower() for digest in settings.passthrough}
    return Authenticator(registry, key_store=KeysDuringOutage(key_store, registry, static),
                         passthrough=settings.passthrough, allow_anonymous=allow_anonymous)


class KeysDuringOutage:
    """The admin key store as the Authenticator reads it: an outage must not lock out
    the keys file (else fail-open could never serve). While the store is down a file or
    passthrough key is accepted unchecked for revocation; any other key is a 503, not a 401."""

    def __init__(self, store: KeyStore, registry: KeyRegistry, passthrough: set[str]) -> None:
        self._store, self._registry, self._passthrough = store, registry, passthrough

    async def get(self, key_sha256: str) -> KeyRecord | None:
        try:
            return await self._store.get(key_sha256)
        except StoreUnavailable:
            if self._registry.lookup(key_sha256) is not None or key_sha256 in self._passthrough:
                return None
            raise
