"""The stores (conversations, scores, budgets, keys, stored responses) behind Protocols,
each with an in-memory twin and a Redis implementation.
"""

from gateway.state.memory import (
    MemoryAuthFailureLog,
    MemoryBudgetStore,
    MemoryConversationStore,
    MemoryKeyStore,
    MemoryResponseRegistry,
    MemoryScoreCache,
)
from gateway.state.protocols import (
    AuthFailureLog,
    BudgetStore,
    ConversationStore,
    KeyRecord,
    KeyStore,
    ResponseRegistry,
    ScoreCache,
    StoredResponse,
)
from gateway.state.redis_registries import RedisAuthFailureLog, RedisResponseRegistry
from gateway.state.redis_store import RedisStores

__all__ = [
    "AuthFailureLog",
    "BudgetStore",
    "ConversationStore",
    "KeyRecord",
    "KeyStore",
    "MemoryAuthFailureLog",
    "MemoryBudgetStore",
    "MemoryConversationStore",
    "MemoryKeyStore",
    "MemoryResponseRegistry",
    "MemoryScoreCache",
    "RedisAuthFailureLog",
    "RedisResponseRegistry",
    "RedisStores",
    "ResponseRegistry",
    "ScoreCache",
    "StoredResponse",
]
