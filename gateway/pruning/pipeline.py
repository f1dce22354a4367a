"""prune(request) -> (forwarded request, report): the whole pure pipeline.

::

    result = prune(body, policy, scorer=LocalScorer(), counter=counters.for_model(model),
                   state=FrozenPlan.from_bytes(raw) if raw else None,
                   steering=Steering(target_tokens=8000))
    result.request      # the body to forward (every unknown field untouched)
    result.report()     # per message: action, score, reason; totals
    result.state        # the frozen plan to store for this conversation

Modes (``result.mode``, a :class:`~gateway.pruning.vocabulary.Mode`):

* ``none``       strategy none: forwarded unchanged.
* ``under``      below the target or the policy's minimum size: unchanged.
* ``frozen``     the stored decisions replayed; new messages pass unchanged
                 (``gateway.pruning.replay``).
* ``epoch``      over the target: down to the low-water mark. The
                 longest old prefix that still fits is kept byte for byte (the
                 provider has it cached) and only what follows is decided anew;
                 earlier masks and drops never come back (``gateway.pruning.epochs``).
* ``stateless``  no usable state (first sight, another target, or the client edited
                 its history): pruned straight to the target; for a conversation
                 that says it goes on, to the low-water mark (``continued``).
* ``no_gain``    a decision was taken but would not have made the request smaller
                 (the omission marker, with sieve_expand its ref, or the reminder
                 costs more than what it stands for): forwarded unchanged.

The steps: count the request once (``gateway.pruning.request``), choose its
path (:func:`_prune`), and for an epoch or a stateless prune set up and take
one decision (``gateway.pruning.decision``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.pruning.conversation import Conversation, build_conversation
from gateway.pruning.decision import DecisionTask, decide
from gateway.pruning.epochs import forced_unit_actions, low_water, low_water_mark
from gateway.pruning.messages import SYSTEM_ROLES
from gateway.pruning.marker_refs import marker_spans, refs_tokens
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.pins import pin_budget, placed
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.replay import replay_plan
from gateway.pruning.request import PruneRequest
from gateway.pruning.result import PruneResult
from gateway.pruning.scoring import Scorer, UnitScore
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.turns import Turn, epoch_due, turn_of, works_alone
from gateway.pruning.vocabulary import KEPT, Mode, Strategy


@dataclass(frozen=True, slots=True)
class Precomputed:
    """What the caller has worked out about a request already, so that ``prune`` need not."""

    # Unit scores, from an async scorer (gateway.scorers.llm): used instead of the scorer's.
    scores: Mapping[int, UnitScore] | None = None
    # [fingerprint(m) for m in body["messages"]], from what the conversation's previous
    # request sent (gateway.exchange.recent_messages): a warm step writes only its new ones.
    fingerprints: list[str] | None = None


def prune(
    body: Mapping[str, Any],
    policy: Policy,
    *,
    scorer: Scorer,
    counter: TokenCounter,
    state: FrozenPlan | None = None,
    steering: Steering = Steering(),
    known: Precomputed = Precomputed(),
    continued: bool = False,
) -> PruneResult:
    """Prune ``body['messages']``. ``steering`` is what the request asks beyond the policy
    (an explicit target is a hard one: it overrides the minimum-size triggers); ``known``,
    what the caller has worked out about the request already.

    ``continued``: the request says more steps of its conversation follow (it names
    it, or asks for its prefix to be cached: ``gateway.wire.continuation``). Its first
    decision then goes where an epoch goes (the low-water mark), not to the target:
    pruned to just under the target, the very next step would cross it, open an epoch
    and throw away the prefix the provider cached one step before. A request that says
    neither may be the only one: it keeps all its target allows."""
    request = PruneRequest.counted(body, policy, counter, steering, state, known.fingerprints)
    result = _prune(request, state, scorer, known.scores, continued)
    if result.mode in (Mode.FROZEN, Mode.EPOCH, Mode.STATELESS, Mode.NO_GAIN) and \
            result.target_rule_tokens > result.target_tokens:
        # What the decision had to keep (system prompt, goal, recent window, tool chain) is over it.
        result.problems = [*result.problems, f"target not met: the forwarded messages are "
                           f"{result.target_rule_tokens} tokens, over the target of {result.target_tokens}; what "
                           "must be kept alone exceeds it"]
    result.message_tokens = request.model_tokens
    # The counts travel with the plan: a replica that never saw this conversation
    # reuses them instead of tokenizing the whole history again.
    plan = result.state
    plan.tokens, plan.model_tokens, plan.encoding = request.tokens, request.model_tokens, counter.encoding_name
    return result


def _prune(request: PruneRequest, state: FrozenPlan | None, scorer: Scorer,
           scores: Mapping[int, UnitScore] | None, continued: bool = False) -> PruneResult:
    """The path ``request`` takes: one of the modes above."""
    if request.strategy == Strategy.NONE:
        return _as_forwarded(request, _unchanged(request, Mode.NONE, FrozenPlan(request.fingerprints)))
    if state is not None and state.target_tokens not in (0, request.target_tokens):
        # Decisions hold for the target they were taken under; a client that asks
        # for another target gets a fresh decision.
        state = None
    usable = state is not None and state.decided > 0 and state.prefix_matches(request.fingerprints)
    turn = turn_of(request.messages, request.tokens)
    if usable:
        replayed = replay_plan(request, state)
        if replayed is not None and _holds(request, replayed) and \
                not _turn_epoch_due(request, turn, replayed.target_rule_tokens):
            return replayed
    elif _below_trigger(request) and \
            not (continued and _turn_epoch_due(request, turn, request.original_target_rule_tokens)):
        return _as_forwarded(request, _unchanged(request, Mode.UNDER, _undecided_plan(request, state)))
    return _decided_with_refs(request, state, usable, scorer, scores, continued, turn)


def _turn_epoch_due(request: PruneRequest, turn: Turn, tokens: int) -> bool:
    """A request at a turn boundary whose loop to come would cross the target from ``tokens``
    (as forwarded): its epoch goes before the loop, not into it (``gateway.pruning.turns``)."""
    if not turn.boundary:
        return False
    system = sum(t for m, t in zip(request.messages, request.tokens) if m.get("role") in SYSTEM_ROLES)
    mark = low_water_mark(system, request.target_tokens, request.policy.low_water_ratio)
    return epoch_due(turn, tokens, request.target_tokens, mark)


def _as_forwarded(request: PruneRequest, result: PruneResult) -> PruneResult:
    """With the policy's ``expand_tool`` on, ``result`` counted as the expander forwards it:
    each omission marker naming its ref (``gateway.pruning.marker_refs``, applied after the
    decision; the plan keeps the plain markers, so a policy without the tool forwards them
    byte for byte), and the conversation's pinned exchanges that go back with this decision
    in the room it leaves (``gateway.pruning.pins``; ``result.pinned``). Both are message
    text, so the target holds them too. Counts only: the forwarded messages stay as decided.
    Applied once per result."""
    if not request.policy.expand_tool:
        return result
    if result.changed:
        plan, forwarded = result.state, result.request.get("messages") or ()
        spans = marker_spans(plan.inserts, result.message_actions, plan.fingerprints)
        result.target_rule_tokens += refs_tokens(forwarded, result.sources, spans, request.counter.count_message)
        result.forwarded_tokens += refs_tokens(forwarded, result.sources, spans, request.counter.model_tokens)
    room = min(_pin_budget(request), request.target_tokens - result.target_rule_tokens)
    going = placed(request.pinned, result.message_actions, room)
    result.pinned = tuple(p.pin for p in going)
    result.target_rule_tokens += sum(p.tokens for p in going)
    result.forwarded_tokens += sum(p.model_tokens for p in going)
    return result


def _pin_budget(request: PruneRequest) -> int:
    return pin_budget(request.target_tokens, request.policy.low_water_ratio)


def _holds(request: PruneRequest, replayed: PruneResult) -> bool:
    """A frozen replay stands when, counted as forwarded, it is within the target and leaves
    room for every pin that fits the pins' budget (else an epoch makes that room)."""
    _as_forwarded(request, replayed)
    if replayed.target_rule_tokens > request.target_tokens:
        return False
    return not request.policy.expand_tool or \
        set(replayed.pinned) == {p.pin for p in placed(request.pinned, replayed.message_actions, _pin_budget(request))}


def _decided_with_refs(request: PruneRequest, state: FrozenPlan | None, usable: bool, scorer: Scorer,
                       scores: Mapping[int, UnitScore] | None, continued: bool, turn: Turn) -> PruneResult:
    """``_decided_anew``; with the tool on, a decision that leaves too little of the target for
    its markers' refs and the pinned exchanges that fit the pins' budget is taken again under
    the target less the room they want (the largest seen: markers and the pins that can go
    back change with the decision; at most twice more), then stored under the target in force
    (the next request replays it). The decision holds its markers' refs itself (it counts
    them as forwarded), so a retake is for the pins, and for a decision whose pinned units
    alone leave its markers no room (retaken once: the same budget again changes nothing)."""
    deciding, held = request, 0
    retake = _Retake()
    for _ in range(3):
        result = _decided_anew(deciding, state, usable, scorer, scores, continued, retake, turn)
        plain = result.target_rule_tokens
        room = _wanted_room(request, result, plain)
        if plain + room <= request.target_tokens or room <= 0 or plain > request.target_tokens:
            break
        if room <= held:  # the same lower budget again would take the same decision
            break
        held = room
        deciding = dataclasses.replace(request, target_tokens=request.target_tokens - held)
    if result.changed and _no_gain(request, result):
        # The refs are forwarded too: a decision that saved less than its markers' refs
        # add would forward more than the client sent.
        return _unchanged(request, Mode.NO_GAIN, _fresh_plan(request))
    result.target_tokens = result.state.target_tokens = request.target_tokens
    return result


def _wanted_room(request: PruneRequest, result: PruneResult, plain: int) -> int:
    """``result`` counted as forwarded (``_as_forwarded``); the room beyond its ``plain`` count
    that its markers' refs take and the pins that fit the pins' budget beside it want."""
    _as_forwarded(request, result)
    if not request.policy.expand_tool:
        return 0
    placed_now = sum(p.tokens for p in request.pinned if p.pin in result.pinned)
    wanted = sum(p.tokens for p in placed(request.pinned, result.message_actions, _pin_budget(request)))
    return result.target_rule_tokens - plain - placed_now + wanted


def _below_trigger(request: PruneRequest) -> bool:
    """At most the target (the pinned exchanges that go back with it included); or, with no
    explicit target, below the policy's minimum sizes (on short requests pruning costs more
    than it saves)."""
    pinned = 0
    if request.policy.expand_tool and request.pinned:
        everything = [KEPT] * len(request.messages)
        pinned = sum(p.tokens for p in placed(request.pinned, everything, _pin_budget(request)))
    if request.original_target_rule_tokens + pinned <= request.target_tokens:
        return True
    policy = request.policy
    small = request.original_target_rule_tokens < policy.min_prompt_tokens or \
        len(request.messages) < policy.min_messages
    return small and not request.explicit_target


def _undecided_plan(request: PruneRequest, state: FrozenPlan | None) -> FrozenPlan:
    """The plan of a request left as it is: the stored one while it holds no decisions and
    the request continues it, else a fresh one; taken under the target in force."""
    continued = state is not None and state.continues(request.fingerprints) and state.decided == 0
    plan = state if continued else FrozenPlan(request.fingerprints)
    plan.target_tokens = request.target_tokens
    return plan


@dataclass(slots=True)
class _Retake:
    """What the decisions of one request share when one is retaken under a lower budget:
    the conversation (its units do not depend on the budget) and the scores per candidate
    set (``DecisionTask.score_memo``)."""

    conversation: Conversation | None = None
    scores: dict[tuple[int, ...], dict[int, UnitScore]] = field(default_factory=dict)


def _decided_anew(request: PruneRequest, state: FrozenPlan | None, usable: bool, scorer: Scorer,
                  scores: Mapping[int, UnitScore] | None, continued: bool, retake: _Retake,
                  turn: Turn) -> PruneResult:
    """An epoch when the request continues the stored conversation (``usable``: its
    decisions still apply), else a stateless prune; down to the low-water mark when
    steps follow (an epoch, or a conversation that says it goes on: ``continued``); the
    request as sent if either would not make it smaller."""
    continuing = usable or (state is not None and state.continues(request.fingerprints))
    if retake.conversation is None:
        retake.conversation = build_conversation(request.messages, request.counter.count_message,
                                                 explicit_goal=request.goal, fingerprints=request.fingerprints,
                                                 tokens=request.tokens)
    conv = retake.conversation
    target = request.target_tokens
    result = decide(DecisionTask(
        request, conv, scorer, scores=scores, score_memo=retake.scores,
        mode=Mode.EPOCH if continuing else Mode.STATELESS,
        budget=low_water(conv, target, _low_water_ratio(request, turn)) if continuing or continued else target,
        epoch=state.epoch + 1 if state is not None and continuing else 1,
        boundary=_old_prefix(request, state) if usable else 0,
        forced=forced_unit_actions(conv, state.actions if usable else {}),
        prior_inserts=state.inserts if usable else (),
        prior_masks=state.masked if usable else {},
        in_loop=turn.task is not None and not turn.boundary,
    ))
    if _no_gain(request, result):
        return _unchanged(request, Mode.NO_GAIN, _fresh_plan(request))
    return result


def _low_water_ratio(request: PruneRequest, turn: Turn) -> float:
    """How far a decision cuts: ``policy.loop_low_water_ratio`` inside the tool loop of an
    agent that works alone (``turns.works_alone``: a coding agent's session, one task, then
    its loop), else ``policy.low_water_ratio``. Such a loop adds an exchange a step and
    crosses the target again a few steps after each epoch, and each epoch writes again all it kept after its
    first change (1.25 its tokens on a prompt cache) and breaks the loop's reasoning-bound
    prefix: a deeper cut spaces the epochs out, and what it drops is the agent's own
    exploration, which its tools read again when needed. A short loop in a long dialogue
    crosses the target once, and the dialogue is what its next step reads."""
    policy = request.policy
    if turn.task is None or turn.boundary:
        return policy.low_water_ratio
    return policy.loop_low_water_ratio if works_alone(request.messages) else policy.low_water_ratio


def _old_prefix(request: PruneRequest, state: FrozenPlan) -> int:
    """How many of the request's messages the previous forward held: an epoch keeps as much of
    that forward as it can byte for byte. The messages after the stored decisions went as they
    came (kept), so when the request goes on from the last one seen, all of it counts."""
    return len(state.fingerprints) if state.continues(request.fingerprints) else state.decided


def _no_gain(request: PruneRequest, result: PruneResult) -> bool:
    """Markers and reminders cost tokens too: dropping a few tiny units under a marker
    larger than them would forward more than the client sent. Never worse than as sent,
    by either count."""
    return result.target_rule_tokens >= request.original_target_rule_tokens or \
        result.forwarded_tokens >= request.original_tokens


def _fresh_plan(request: PruneRequest) -> FrozenPlan:
    plan = FrozenPlan(request.fingerprints)
    plan.target_tokens = request.target_tokens
    return plan


def _unchanged(request: PruneRequest, mode: Mode, plan: FrozenPlan) -> PruneResult:
    """The request forwarded as sent."""
    plan.fingerprints = request.fingerprints
    n = len(request.messages)
    return PruneResult(
        request=dict(request.body), mode=mode, strategy=request.strategy, original_tokens=request.original_tokens,
        forwarded_tokens=request.original_tokens, target_tokens=request.target_tokens,
        message_actions=[KEPT] * n, message_scores=[None] * n, state=plan, goal_source=request.goal_source,
        epoch=plan.epoch, target_rule_tokens=request.original_target_rule_tokens,
    )


__all__ = ["Precomputed", "PruneResult", "prune"]
