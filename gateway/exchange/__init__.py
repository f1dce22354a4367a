"""The request path: prune step, reserve, forward, relay, account;
the pass-through routes and preserved-reasoning guard beside it. Sieve's own
``sieve_expand`` rounds plug in above it (``ExtraRounds``: ``gateway.expand``).
"""

from gateway.exchange.accounting import Accountant, RequestRecord
from gateway.exchange.big_bodies import BigBodies, THREAD_THRESHOLD_BYTES
from gateway.exchange.budget_guard import BudgetGuard
from gateway.exchange.deferred import Deferred
from gateway.exchange.extra_rounds import ExtraRounds, Pinned, Send
from gateway.exchange.forward import Forwarder, sieve_headers
from gateway.exchange.relay import Reply
from gateway.exchange.passthrough import PassThrough, PassThroughCall
from gateway.exchange.prune_step import PruneOutcome, Pruner, conversation_key
from gateway.exchange.reasoning_guard import ReasoningGuard
from gateway.exchange.stored_responses import RESPONSE_ID_CHARS, StoredResponses

__all__ = [
    "Accountant",
    "BigBodies",
    "BudgetGuard",
    "Deferred",
    "ExtraRounds",
    "Forwarder",
    "PassThrough",
    "PassThroughCall",
    "Pinned",
    "PruneOutcome",
    "Pruner",
    "RESPONSE_ID_CHARS",
    "ReasoningGuard",
    "Reply",
    "RequestRecord",
    "Send",
    "StoredResponses",
    "THREAD_THRESHOLD_BYTES",
    "conversation_key",
    "sieve_headers",
]
