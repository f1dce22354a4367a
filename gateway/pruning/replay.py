"""The frozen path: a conversation's stored decisions replayed onto its next request.

Between epochs the forwarded prefix must stay byte-identical, or the
provider's prompt cache misses; so as long as the replayed request still fits
the target, nothing is decided: the stored masks, drops and markers apply as
they are and the new messages pass unchanged::

    result = replay_plan(request, plan)   # None: over the target, an epoch decides anew
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gateway.pruning.compression import MASKED_PREFIX
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.request import PruneRequest
from gateway.pruning.result import PruneResult
from gateway.pruning.vocabulary import KEPT, Mode


def replay_plan(request: PruneRequest, plan: FrozenPlan) -> PruneResult | None:
    """``plan`` (whose decided prefix ``request`` still starts with) replayed onto
    ``request``; None when the result would be over the target."""
    forwarded, sources = plan.replay(request.messages)
    target_rule_tokens, forwarded_tokens = _counted(request, forwarded, sources)
    if target_rule_tokens > request.target_tokens:
        return None
    plan.fingerprints = request.fingerprints
    n = len(request.messages)
    actions = [KEPT] * n
    for i, action in plan.actions.items():
        if i < n:
            actions[i] = action
    body = dict(request.body)
    body["messages"] = forwarded
    return PruneResult(
        request=body, mode=Mode.FROZEN, strategy=request.strategy, original_tokens=request.original_tokens,
        forwarded_tokens=forwarded_tokens,
        target_tokens=request.target_tokens, message_actions=actions, message_scores=[None] * n, state=plan,
        goal_source=request.goal_source, epoch=plan.epoch, sources=sources, target_rule_tokens=target_rule_tokens,
    )


def _counted(request: PruneRequest, forwarded: Sequence[Mapping[str, Any]],
             sources: Sequence[int]) -> tuple[int, int]:
    """``assembly.count_forwarded`` under the target rule and in the model's encoding, in one
    pass: an original message forwarded as it is has both counts known, and a masked one or
    a marker has its text read once for both (``message_counts``)."""
    tokens, model_tokens, both = request.tokens, request.model_tokens, request.counter.message_counts
    rule = model = 0
    for m, src in zip(forwarded, sources):
        if src >= 0:
            content = m.get("content")
            if not (isinstance(content, str) and content.startswith(MASKED_PREFIX)):
                rule += tokens[src]
                model += model_tokens[src]
                continue
        counts = both(m)
        rule += counts[0]
        model += counts[1]
    return rule, model
