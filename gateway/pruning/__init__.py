"""The pure core: a request body and a policy in, the pruned body and a report out (no I/O).

    result = prune(body, Policy(), scorer=LocalScorer(), counter=TokenCounters().for_model(model))

What code outside ``gateway.pruning`` may use is exported here (``__all__``);
the modules behind it are the package's own.
"""

from gateway.pruning.cohort import cohort_of
from gateway.pruning.compression import (
    DROPPED_MARKER,
    MASKED_PREFIX,
    dropped_marker,
    is_omission_marker,
    marker_calls,
    marker_ids,
    summary_message,
)
from gateway.pruning.conversation import Conversation, KIND_BROKEN, KIND_SYSTEM, KIND_TOOL_CHAIN
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.marker_refs import REF_CHARS, REF_HINT, marker_spans, ref_of, shown_with_refs, span_ref, with_ref, \
    with_refs
from gateway.pruning.messages import content_text, fingerprint, message_token_text, tool_call_text
from gateway.pruning.pins import PinnedRoom
from gateway.pruning.pipeline import Precomputed, prune
from gateway.pruning.policy import (
    OVERRIDES,
    POLICY_FIELDS,
    POLICY_MODES,
    Policy,
    SCORERS,
    SCORER_FALLBACKS,
    STRATEGIES,
    Steering,
)
from gateway.pruning.result import PruneResult
from gateway.pruning.scoring import LocalScorer, Scorer, UnitScore
from gateway.pruning.semantic import SemanticOutcome, SemanticScorer
from gateway.pruning.target import target_in_force
from gateway.pruning.tokens import ENGINES, TokenCounter, TokenCounters
from gateway.pruning.vocabulary import Action, Cohort, Mode, PolicyMode, Strategy

__all__ = [
    "Action",
    "Cohort",
    "Conversation",
    "DROPPED_MARKER",
    "ENGINES",
    "FrozenPlan",
    "KIND_BROKEN",
    "KIND_SYSTEM",
    "KIND_TOOL_CHAIN",
    "LocalScorer",
    "MASKED_PREFIX",
    "Mode",
    "OVERRIDES",
    "POLICY_FIELDS",
    "POLICY_MODES",
    "PinnedRoom",
    "Policy",
    "PolicyMode",
    "Precomputed",
    "PruneResult",
    "REF_CHARS",
    "REF_HINT",
    "SCORERS",
    "SCORER_FALLBACKS",
    "STRATEGIES",
    "Scorer",
    "SemanticOutcome",
    "SemanticScorer",
    "Steering",
    "Strategy",
    "TokenCounter",
    "TokenCounters",
    "UnitScore",
    "cohort_of",
    "content_text",
    "dropped_marker",
    "fingerprint",
    "is_omission_marker",
    "marker_calls",
    "marker_ids",
    "marker_spans",
    "message_token_text",
    "prune",
    "ref_of",
    "shown_with_refs",
    "span_ref",
    "summary_message",
    "target_in_force",
    "tool_call_text",
    "with_ref",
    "with_refs",
]
