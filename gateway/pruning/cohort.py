"""Which cohort a conversation is in: pruned, control or shadow. Pure and deterministic.

A policy's ``control_share`` sets aside that share of its conversations as a
control group that is never pruned; the rest is pruned, or only decided and
measured under a shadow policy (``mode: shadow``)::

    cohort_of(policy, "acme:5f0c…")   # Cohort.CONTROL for about control_share of keys

The assignment hashes the conversation key (``gateway.exchange.conversation_key``:
the org and the client's conversation id, or the task's first messages), so a
conversation stays in one cohort for all its requests, on every replica, with
no state, and the split is independent of anything the requests contain beyond
their identity: the cohorts are comparable samples of the same traffic.

The hash is keyed with a secret of the gateway's (``SIEVE_COHORT_SECRET``, or one
the replicas share through Redis): a client picks its conversation ids, so with a
plain hash it could work out which ids fall in the control group and send its
largest histories unpruned under them. Keyed, the cohort cannot be computed from
the id, and Sieve never says it before the conversation is forwarded (``/v1/prune``
decides every conversation as a pruned one)::

    cohort_of(policy, "acme:5f0c…", secret=b"...")
"""

from __future__ import annotations

import hashlib

from gateway.pruning.policy import Policy
from gateway.pruning.vocabulary import Cohort, PolicyMode

_SCALE = float(1 << 64)
# A salt of its own: the key is already a hash, but the cohort must not line up with
# any other use of it (a shard, a sample) that also reads its leading bits.
_SALT = b"sieve-cohort\x00"


def control_point(conversation_key: str, secret: bytes = b"") -> float:
    """The key's uniform point in [0, 1): below ``control_share`` is control."""
    key = hashlib.blake2b(secret, digest_size=32).digest() if secret else b""
    digest = hashlib.blake2b(_SALT + conversation_key.encode(), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "big") / _SCALE


def cohort_of(policy: Policy, conversation_key: str, secret: bytes = b"") -> Cohort:
    """The conversation's cohort under ``policy`` (module docstring)."""
    if policy.control_share > 0 and control_point(conversation_key, secret) < policy.control_share:
        return Cohort.CONTROL
    return Cohort.SHADOW if policy.mode is PolicyMode.SHADOW else Cohort.PRUNED
