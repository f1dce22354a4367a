"""Identity: virtual keys (hashed), passthrough, anonymous, header parsing."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError, Unauthorized
from gateway.auth.identity import Authenticator, KeyRegistry, hash_key
from gateway.state.memory import MemoryKeyStore
from gateway.state.protocols import KeyRecord
from gateway.wire.call import ANONYMOUS, Identity, IdentityKind
from gateway.wire.keys import presented_key
from tests.support import bearer

ENTRIES = [
    {"key": "sk-sieve-alice", "org": "acme", "team": "search", "name": "alice"},
    {"key_sha256": hash_key("sk-sieve-bob").upper(), "org": "acme"},
]


def test_registry_keeps_only_hashes():
    registry = KeyRegistry.from_entries(ENTRIES)
    assert len(registry) == 2
    assert "sk-sieve-alice" not in repr(vars(registry))
    assert registry.lookup(hash_key("sk-sieve-alice")).identity() == Identity("acme", "search", "alice")
    bob = registry.lookup(hash_key("sk-sieve-bob")).identity()
    assert bob.org == "acme" and bob.key_name == f"key-{hash_key('sk-sieve-bob')[:8]}"
    assert registry.lookup(hash_key("sk-other")) is None


@pytest.mark.parametrize(
    "entries, message",
    [
        ([{"org": "acme"}], "exactly one of 'key' or 'key_sha256'"),
        ([{"key": "a", "key_sha256": "b" * 64, "org": "acme"}], "exactly one"),
        ([{"key": "a"}], r"keys\[0\].org: required"),
        ([{"key_sha256": "xyz", "org": "acme"}], "64 hex"),
        ([{"key": "a", "org": "acme", "role": "admin"}], "unknown key"),
        ([{"key": "a", "org": "acme"}, {"key": "a", "org": "globex"}], "duplicate virtual key"),
        ({"key": "a"}, "must be a list"),
        (["sk-a"], "must be a mapping"),
    ],
)
def test_keys_file_is_strict(entries, message):
    with pytest.raises(ConfigError, match=message):
        KeyRegistry.from_entries(entries)


def test_header_parsing():
    assert presented_key(bearer("sk-1")) == "sk-1"
    assert presented_key({"authorization": "bearer   sk-2  "}) == "sk-2"
    assert presented_key({"x-api-key": "sk-3"}) == "sk-3"
    assert presented_key({"authorization": "Bearer sk-4", "x-api-key": "sk-5"}) == "sk-4"
    assert presented_key({}) is None
    for headers in ({"authorization": "Basic abc"}, {"authorization": "Bearer "}, {"x-api-key": " "}):
        with pytest.raises(Unauthorized):
            presented_key(headers)


async def test_authenticate_virtual_passthrough_and_errors():
    provider_key = "sk-openai-real"
    auth = Authenticator(KeyRegistry.from_entries(ENTRIES), passthrough={hash_key(provider_key): "globex"})
    assert await auth.authenticate(bearer("sk-sieve-alice")) == Identity("acme", "search", "alice")
    assert (await auth.authenticate({"x-api-key": "sk-sieve-bob"})).org == "acme"
    passthrough = await auth.authenticate(bearer(provider_key))
    assert passthrough.org == "globex" and passthrough.kind is IdentityKind.PASSTHROUGH
    assert passthrough.forwards_client_key
    with pytest.raises(Unauthorized, match="Invalid API key") as info:
        await auth.authenticate(bearer("sk-wrong"))
    assert info.value.status == 401 and info.value.body()["error"]["type"] == "authentication_error"
    with pytest.raises(Unauthorized, match="Missing API key"):
        await auth.authenticate({})


async def test_anonymous_only_without_a_key():
    auth = Authenticator(KeyRegistry.from_entries(ENTRIES), allow_anonymous=True)
    assert await auth.authenticate({}) is ANONYMOUS
    with pytest.raises(Unauthorized):
        await auth.authenticate(bearer("sk-typo"))  # a wrong key is never silently anonymous


async def test_key_store_adds_keys_and_revokes_file_keys():
    store = MemoryKeyStore()
    auth = Authenticator(KeyRegistry.from_entries(ENTRIES), key_store=store)
    await store.add(KeyRecord(hash_key("sk-runtime"), "initech", None, "runtime"))
    assert await auth.authenticate(bearer("sk-runtime")) == Identity("initech", None, "runtime")
    await store.revoke(hash_key("sk-sieve-alice"))
    with pytest.raises(Unauthorized, match="revoked"):
        await auth.authenticate(bearer("sk-sieve-alice"))


def test_passthrough_map_is_validated():
    with pytest.raises(ConfigError, match="SHA-256"):
        Authenticator(passthrough={"sk-plaintext": "acme"})
