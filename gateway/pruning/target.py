"""The target in force: the request's own (``x-sieve-target-tokens``, a budget's
tightening), else its policy's. One rule, read by the pipeline, the forward and the CLI::

    target_in_force(None, Policy(target_tokens=24_000))   # 24000
    target_in_force(8_000, Policy(target_tokens=24_000))  # 8000
"""

from __future__ import annotations

from gateway.pruning.policy import Policy


def target_in_force(requested: int | None, policy: Policy) -> int:
    """``requested`` when the request names a target (None: it does not), else the policy's."""
    return requested if requested is not None else policy.target_tokens
