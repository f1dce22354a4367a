"""A pruning policy: the knobs an org sets, as one frozen value; and the steering of one request.

Loaded from ``policies/*.yaml`` (strictly: unknown keys are start-up errors,
see ``gateway.config.policies``); the pure pipeline only reads it. A request may
steer its own prune within what the policy allows (the ``x-sieve-*`` headers)::

    prune(body, policy, scorer=scorer, counter=counter,
          steering=Steering(target_tokens=8000, strategy=Strategy.WINDOW))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from gateway.pruning.pins import PinnedRoom
from gateway.pruning.vocabulary import PolicyMode, Strategy

STRATEGIES = tuple(Strategy)  # what a policy file or x-sieve-strategy may name
SCORERS = ("local", "embedding", "llm", "hybrid")
SCORER_FALLBACKS = ("local", "keep")
POLICY_MODES = tuple(PolicyMode)


@dataclass(frozen=True, slots=True)
class Steering:
    """What one request asks of the pruner beyond its org's policy; None: the policy's."""

    target_tokens: int | None = None  # a hard target: it overrides the policy's minimum sizes
    strategy: Strategy | None = None
    goal: str | None = None           # the task, when the client names it
    # The conversation's pinned sieve_expand exchanges (gateway.pruning.pins): Sieve's own,
    # never a header; the target holds them.
    pinned: tuple[PinnedRoom, ...] = field(default=(), metadata={"header": False})


# The request headers a client may use to steer pruning (x-sieve-<name with dashes>).
OVERRIDES = tuple(f.name for f in fields(Steering) if f.metadata.get("header", True))


@dataclass(frozen=True, slots=True)
class Policy:
    name: str = "default"
    strategy: Strategy = Strategy.RELEVANCE
    # The target on the forwarded messages when the request names none. Going
    # over it starts an epoch, which prunes down to the system prompt plus
    # low_water_ratio of the rest, so the next turns share a cached prefix.
    target_tokens: int = 24_000
    low_water_ratio: float = 0.5
    # The same for an agent working alone through long tool loops (pipeline._low_water_ratio):
    # a deeper cut, since its steps grow the request fast and its epochs rewrite what they keep
    # (the default policy's is 0.15).
    loop_low_water_ratio: float = 0.5
    # Below either minimum nothing is pruned (unless the request names a target):
    # on short requests pruning costs more than it saves.
    min_prompt_tokens: int = 4_000
    min_messages: int = 12
    protect_last_units: int = 2
    # At least this many tool exchanges protected: when the window holds fewer, the newest
    # ones before it join it (0: none). An agent's working set kept whole, where a decision
    # has the whole target; an epoch leaves that room to the next steps (BENCHMARKS.md).
    protect_last_tool_units: int = 1
    protect_active_chain: bool = True
    keep_threshold: int = 4
    compress_threshold: int = 2
    fill_budget: bool = True
    mask_tool_outputs: bool = True
    mask_min_tokens: int = 120
    goal_reminder: bool = False
    # An omission marker lists the exact ids of what it stands for (order, user,
    # item, payment ids...), up to this many tokens; 0: a plain marker.
    omitted_ids_tokens: int = 220  # as policies/default.yaml ships it
    goal_reminder_max_chars: int = 200
    # Which x-sieve-* steering headers clients may send (YAML: true, false or a
    # list of OVERRIDES), and the range an x-sieve-target-tokens must fall in
    # (0: unbounded). An org that pays for pruning can forbid turning it off.
    allow_overrides: tuple[str, ...] = OVERRIDES
    override_min_target_tokens: int = 0
    override_max_target_tokens: int = 0
    state_ttl_s: int = 6 * 3600
    audit_include_content: bool = False
    # Identity and budgets (enforced outside the pure pipeline).
    allow_anonymous: bool = False
    store_fail_open: bool = True
    # The output a budget reserves for a model whose own limit is unknown (not in litellm's map)
    # when the body sets no cap; under a budget it is also sent as the cap, so the provider
    # cannot bill past what was reserved (gateway.exchange.budget_guard).
    default_max_completion_tokens: int = 4_096
    # What a budget reserves for each piece of content a request only names and the provider
    # adds: a file or document by id or URL, a built-in tool's results (web search, code
    # interpreter, MCP). Charged at its real usage; raise it toward the largest such content
    # your callers send, and concurrent requests stay inside the budget.
    reference_floor_tokens: int = 50_000
    # Stored Responses (previous_response_id, conversation, /v1/responses/{id}): by default only
    # ids Sieve relayed, each to the org it was made for; true also lets ids Sieve never saw
    # through (made with the provider directly), still never one another org holds.
    allow_unmanaged_response_ids: bool = False
    # Below this fraction of a budget left, prune harder instead of running
    # into the 429: the target shrinks to 3/4, 1/2, then 1/4 of itself as the budget
    # drains (steps, so decisions stay frozen within one). 0 disables it.
    tighten_below: float = 0.0
    # "local": the rule-based scorer only; "embedding": the local scorer with a small
    # sentence-embedding model's relevance mixed in (gateway.pruning.semantic, no API:
    # docs/scorers.md). The cheap LLM scorer (gateway.scorers.llm): "llm": the model scores
    # every candidate; "hybrid": the local scorer picks the hybrid_top_k best candidates
    # and only those go to the model.
    scorer: str = "local"
    embedding_weight: float = 0.5     # the model's share of the mix
    embedding_required: bool = False  # no model: a start-up error (true) or the local scorer, logged
    scorer_model: str = "gpt-4o-mini"       # any litellm model string
    scorer_api_base: str = ""               # OpenAI-compatible base URL: the forward's fast path
    scorer_batch_size: int = 12
    scorer_batch_timeout_s: float = 1.0     # per call to the model
    scorer_deadline_s: float = 1.5          # the whole scoring round
    scorer_fallback: str = "local"          # a failed batch: "local" scores, or "keep" (score 5)
    scorer_min_history_tokens: int = 2_000  # fewer candidate tokens: the local scorer decides
    scorer_cost_check: bool = True          # skip the model when scoring costs more than it saves
    scorer_cache_ttl_s: int = 3_600         # 0: no score cache
    scorer_json_mode: bool = True           # response_format json_object
    scorer_max_unit_chars: int = 1_000      # longer units are cut to a head and a tail
    scorer_context_chars: int = 1_200       # recent window shown to the model, not scored
    hybrid_top_k: int = 48
    # When an epoch omits a span, the scorer model writes one structured summary
    # of it (goal, decisions, constraints, key tool results with exact ids, open
    # questions) that stands in the marker's place, frozen like every decision.
    summaries: bool = False
    summary_max_tokens: int = 300
    # Proving the savings on the org's own traffic (gateway.pruning.cohort). "shadow":
    # every request is decided (frozen plans and all) but forwarded as it came; the
    # decision is measured after the response. control_share: the share of
    # conversations (by a hash of the conversation key) that is never pruned, the
    # baseline the pruned (or shadow) cohort is compared with.
    mode: PolicyMode = PolicyMode.PRUNE
    control_share: float = 0.0
    # Reversible pruning (gateway.expand; the markers' refs: gateway.pruning.marker_refs): a
    # forward that masks or omits anything carries the sieve_expand tool, its markers name refs,
    # and Sieve answers the model's calls itself, asking again up to expand_max_rounds times.
    expand_tool: bool = True
    expand_max_rounds: int = 2

    def with_overrides(self, **changes) -> "Policy":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in changes.items() if v is not None})
        return Policy(**values)

    def tightened_target(self, target_tokens: int, budget_left: float) -> int:
        """The target to prune to when ``budget_left`` (0..1) of the tightest budget remains."""
        if self.tighten_below <= 0 or budget_left >= self.tighten_below:
            return target_tokens
        step = max(1, min(3, math.ceil(4 * budget_left / self.tighten_below)))  # 3, 2 or 1 quarters
        return max(1, target_tokens * step // 4)


POLICY_FIELDS = {f.name: f.type for f in fields(Policy)}
