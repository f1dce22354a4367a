"""One prune's request as every path of the pipeline reads it: counted once, with what is in force.

The messages are fingerprinted and counted twice over (the target rule's
count, which decisions run on, and the model's own, which is reported and
billed) before any path is chosen; the target, strategy and goal in force are
the request's steering where it names them, else the policy's::

    request = PruneRequest.counted(body, policy, counter, Steering(target_tokens=8000), state=None)
    request.target_tokens, request.explicit_target      # 8000, True
    request.original_target_rule_tokens                 # what the target bounds
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.messages import fingerprint
from gateway.pruning.pins import PinnedRoom
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.target import target_in_force
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.vocabulary import Strategy


@dataclass(frozen=True, slots=True)
class PruneRequest:
    body: Mapping[str, Any]
    policy: Policy
    counter: TokenCounter
    fingerprints: list[str]  # per message
    tokens: list[int]        # per message, under the target rule: what decisions run on
    model_tokens: list[int]  # per message, in the model's own encoding: what is reported and billed
    target_tokens: int       # the target in force: the request's own, else the policy's
    explicit_target: bool    # the request named it: a hard target that overrides the policy's minimum sizes
    strategy: Strategy
    goal: str | None         # the task, when the request names it
    pinned: tuple[PinnedRoom, ...] = ()  # the conversation's pinned exchanges (gateway.pruning.pins)

    @classmethod
    def counted(cls, body: Mapping[str, Any], policy: Policy, counter: TokenCounter, steering: Steering,
                state: FrozenPlan | None, fingerprints: list[str] | None = None) -> PruneRequest:
        """``body`` fingerprinted and counted; ``state`` (the conversation's stored plan) carries
        the counts of the messages it saw, so only the new ones are tokenized. ``fingerprints``:
        the messages' own, when the caller has them already (``[fingerprint(m) for m in messages]``)."""
        messages = body["messages"]
        if fingerprints is None:
            fingerprints = [fingerprint(m) for m in messages]
        tokens, model_tokens = state.known_tokens(fingerprints, counter.encoding_name) if state is not None \
            else ([], [])
        for m in messages[len(tokens):]:
            target_rule, model = counter.message_counts(m)
            tokens.append(target_rule)
            model_tokens.append(model)
        explicit = steering.target_tokens is not None
        return cls(body, policy, counter, fingerprints, tokens, model_tokens,
                   target_tokens=target_in_force(steering.target_tokens, policy),
                   explicit_target=explicit, strategy=Strategy(steering.strategy or policy.strategy),
                   goal=steering.goal, pinned=steering.pinned)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]

    @property
    def original_tokens(self) -> int:
        """The messages as sent, in the model's own encoding."""
        return sum(self.model_tokens)

    @property
    def original_target_rule_tokens(self) -> int:
        """The messages as sent, under the target rule."""
        return sum(self.tokens)

    @property
    def goal_source(self) -> str:
        return "explicit" if self.goal else "derived"
