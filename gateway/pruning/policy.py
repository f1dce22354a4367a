"""A pruning policy: the knobs an org sets, as one frozen value.

Loaded from ``policies/*.yaml`` (strictly: unknown keys are start-up errors,
see ``gateway.policies``); the pure pipeline only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

STRATEGIES = ("none", "window", "relevance")


@dataclass(frozen=True, slots=True)
class Policy:
    name: str = "default"
    strategy: str = "relevance"
    # Cap on the forwarded messages when the request names none. It is the
    # high-water mark: an epoch prunes down to low_water_ratio of it.
    target_tokens: int = 24_000
    low_water_ratio: float = 0.6
    # Below both minimums nothing is pruned: scoring costs more than it saves.
    min_prompt_tokens: int = 4_000
    min_messages: int = 12
    protect_last_units: int = 4
    protect_active_chain: bool = True
    keep_threshold: int = 4
    compress_threshold: int = 2
    fill_budget: bool = True
    mask_tool_outputs: bool = True
    mask_min_tokens: int = 120
    goal_reminder: bool = False
    goal_reminder_max_chars: int = 200
    allow_overrides: bool = True
    state_ttl_s: int = 6 * 3600
    fail_open: bool = True
    audit_include_content: bool = False
    # Identity and budgets (enforced outside the pure pipeline).
    allow_anonymous: bool = False
    store_fail_open: bool = True
    default_max_completion_tokens: int = 4_096
    tighten_below: float = 0.0

    def with_overrides(self, **changes) -> "Policy":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in changes.items() if v is not None})
        return Policy(**values)

    @property
    def low_water_tokens(self) -> int:
        return int(self.target_tokens * self.low_water_ratio)


POLICY_FIELDS = {f.name: f.type for f in fields(Policy)}
