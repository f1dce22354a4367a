"""The caller's key, as the wire carries it: ``Authorization: Bearer <key>`` or ``x-api-key``.

::

    presented_key(headers)                    # the key, None when absent, Unauthorized when malformed
    client_provider_key(identity, headers)    # the caller's own provider key, to forward upstream
"""

from __future__ import annotations

from typing import Mapping

from gateway.errors import Unauthorized
from gateway.wire.call import Identity, IdentityKind


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
