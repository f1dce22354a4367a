"""Semantic relevance mixed into the local scorer: a sentence-embedding model's cosine
between each candidate and the current request.

The model runs outside the pure pipeline (``gateway.embedding``); it hands in one
unit-length vector per message it has embedded, keyed by the message's fingerprint.
A unit's vector is the mean of its messages' vectors; the request's is its own
message's. The cosines and the local scorer's relevance are each min-max normalised
over the candidates and mixed, ``(1 - w) * local + w * cosine``, then mapped back onto
the local scale, so the tiers read the mix as they read the local relevance::

    scorer = SemanticScorer(local, vectors, weight=0.5)
    prune(body, policy, scorer=scorer, counter=counter)
    scorer.outcome    # MIXED, or why the local scores stood (COLD, NO_REQUEST)

All or nothing: when the request or any candidate has no vector yet (a history the
model has not seen), the local scores stand unchanged, so a decision never mixes two
scales. Hard user constraints and duplicates keep the local scorer's word.
"""

from __future__ import annotations

from enum import Enum
from functools import partial
from typing import Mapping, Sequence

import numpy as np

from gateway.pruning.conversation import Conversation
from gateway.pruning.scoring import LocalScorer, UnitScore


class SemanticOutcome(str, Enum):
    """What the last ``score`` call did (a closed set: a metric label)."""

    MIXED = "mixed"            # the cosines were mixed in
    COLD = "cold"              # a candidate had no vector yet: local scores
    NO_REQUEST = "no_request"  # no current request, or it had no vector yet: local scores
    UNSCORED = "unscored"      # nothing was scored (a frozen replay, nothing over the target)


class SemanticScorer:
    """A ``Scorer``: the local scorer with the embedding model's cosines mixed in."""

    name = "embedding"

    def __init__(self, local: LocalScorer, vectors: Mapping[str, np.ndarray], weight: float = 0.5) -> None:
        self.local = local
        self.vectors = vectors
        self.weight = weight
        self.outcome = SemanticOutcome.UNSCORED

    def score(self, conversation: Conversation, candidates: Sequence[int],
              window: Sequence[int]) -> dict[int, UnitScore]:
        query = request_vector(conversation, self.vectors)
        cosines = None if query is None else unit_cosines(conversation, candidates, self.vectors, query)
        if cosines is None:
            self.outcome = SemanticOutcome.NO_REQUEST if query is None else SemanticOutcome.COLD
            return self.local.score(conversation, candidates, window)
        self.outcome = SemanticOutcome.MIXED
        return self.local.score_mixed(conversation, candidates, window,
                                      partial(mixed_relevance, cosines=cosines, weight=self.weight))


def request_vector(conversation: Conversation, vectors: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The vector of the current request (the newest user message), if the model has it."""
    unit = conversation.last_user_unit
    if unit is None or not conversation.current_request.strip():
        return None
    return vectors.get(conversation.fingerprints[conversation.units[unit].start])


def unit_cosines(conversation: Conversation, candidates: Sequence[int], vectors: Mapping[str, np.ndarray],
                 query: np.ndarray) -> dict[int, float] | None:
    """Each candidate's cosine with ``query``; None when any message of one has no vector."""
    rows = []
    for i in candidates:
        unit = conversation.units[i]
        found = [vectors.get(conversation.fingerprints[j]) for j in unit.indices]
        if any(v is None for v in found):
            return None
        rows.append(found[0] if len(found) == 1 else np.mean(found, axis=0))
    if not rows:
        return {}
    matrix = np.vstack(rows)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    cosines = (matrix @ query) / norms
    return {i: float(c) for i, c in zip(candidates, cosines)}


def mixed_relevance(relevance: dict[int, float], hard: set[int], *, cosines: Mapping[int, float],
                    weight: float) -> dict[int, float]:
    """``(1 - weight) * local + weight * cosine``, each min-max normalised over the candidates
    that are neither duplicates nor hard constraints, mapped back onto the local range."""
    mixed = [i for i in relevance if i not in hard and i in cosines]
    if len(mixed) < 2:
        return relevance
    local_lo, local_hi = _range(relevance[i] for i in mixed)
    cos_lo, cos_hi = _range(cosines[i] for i in mixed)
    span, cos_span = local_hi - local_lo, cos_hi - cos_lo
    out = dict(relevance)
    for i in mixed:
        local_n = (relevance[i] - local_lo) / span if span > 0 else 0.0
        cos_n = (cosines[i] - cos_lo) / cos_span if cos_span > 0 else 0.0
        out[i] = local_lo + ((1 - weight) * local_n + weight * cos_n) * (span if span > 0 else 1.0)
    return out


def _range(values) -> tuple[float, float]:
    listed = list(values)
    return min(listed), max(listed)
