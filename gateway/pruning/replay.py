"""The frozen path: a conversation's stored decisions replayed onto its next request.

Between epochs the forwarded prefix must stay byte-identical, or the
provider's prompt cache misses; so as long as the replayed request still fits
the target, nothing is decided: the stored masks, drops and markers apply as
they are and the new messages pass unchanged::

    result = replay_plan(request, plan)   # None: over the target, an epoch decides anew
"""

from __future__ import annotations

from gateway.pruning.assembly import count_forwarded_both
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.request import PruneRequest
from gateway.pruning.result import PruneResult
from gateway.pruning.vocabulary import KEPT, Mode


def replay_plan(request: PruneRequest, plan: FrozenPlan) -> PruneResult | None:
    """``plan`` (whose decided prefix ``request`` still starts with) replayed onto
    ``request``; None when the result would be over the target."""
    forwarded, sources = plan.replay(request.messages)
    target_rule_tokens, forwarded_tokens = count_forwarded_both(
        forwarded, sources, request.tokens, request.model_tokens, request.counter.message_counts)
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

