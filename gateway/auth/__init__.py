"""Who is calling: API keys to identities, and the throttle on failed attempts.
"""

from gateway.auth.identity import Authenticator, OpenAccess, authenticator_for, hash_key, is_open
from gateway.auth.throttle import AuthThrottle

__all__ = [
    "AuthThrottle",
    "Authenticator",
    "OpenAccess",
    "authenticator_for",
    "hash_key",
    "is_open",
]
