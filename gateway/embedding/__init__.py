"""The embedding scorer's model, its vectors and the background worker that fills them.
"""

from gateway.embedding.model import EmbeddingModel, ModelUnavailable
from gateway.embedding.worker import Embedder, WorkerLimits

__all__ = [
    "Embedder",
    "EmbeddingModel",
    "ModelUnavailable",
    "WorkerLimits",
]
