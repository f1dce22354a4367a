"""prune(request) -> (forwarded request, report): the whole pure pipeline.

::

    result = prune(body, policy, scorer=LocalScorer(), counter=counters.for_model(model),
                   state=FrozenPlan.from_bytes(raw) if raw else None,
                   steering=Steering(target_tokens=8000))
    result.request      # the body to forward (every unknown field untouched)
    result.report()     # per message: action, score, reason; totals
    result.state        # the frozen plan to store for this conversation

Modes (``result.mode``):

* ``none``       strategy none: forwarded unchanged.
* ``under``      below the target or the policy's minimum size: unchanged.
* ``frozen``     the stored decisions replayed; new messages pass unchanged.
* ``epoch``      over the target: down to the low-water mark. The
                 longest old prefix that still fits is kept byte for byte (the
                 provider has it cached) and only what follows is decided anew;
                 earlier masks and drops never come back.
* ``stateless``  no usable state (first sight, another target, or the client edited
                 its history): pruned straight to the target.
* ``no_gain``    a decision was taken but would not have made the request smaller
                 (the omission marker or the reminder costs more than what it
                 stands for): forwarded unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from gateway.pruning import selection as sel
from gateway.pruning.compression import MASKED_PREFIX, goal_reminder, is_maskable, is_marker, masked_message
from gateway.pruning.conversation import KIND_SYSTEM, KIND_USER, Conversation, build_conversation
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.markers import omitted_ids_reserve, place_markers, with_omitted_ids
from gateway.pruning.messages import fingerprint
from gateway.pruning.normalize import check_no_new_problems
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.result import PruneResult
from gateway.pruning.scoring import Scorer, UnitScore
from gateway.pruning.tokens import TokenCounter
from gateway.pruning.vocabulary import Action, Mode, Strategy

MARKER_RESERVE = 12  # tokens held back for the drop marker


def prune(
    body: Mapping[str, Any],
    policy: Policy,
    *,
    scorer: Scorer,
    counter: TokenCounter,
    state: FrozenPlan | None = None,
    steering: Steering = Steering(),
    scores: Mapping[int, UnitScore] | None = None,
) -> PruneResult:
    """Prune ``body['messages']``. ``steering`` is what the request asks beyond the policy
    (an explicit target is a hard one: it overrides the minimum-size triggers); ``scores``
    are precomputed unit scores (an async scorer's)."""
    messages: list[dict[str, Any]] = body["messages"]
    fps = [fingerprint(m) for m in messages]
    tokens, model_tokens = state.known_tokens(fps, counter.encoding_name) if state is not None else ([], [])
    for m in messages[len(tokens):]:
        target_rule, model = counter.message_counts(m)
        tokens.append(target_rule)
        model_tokens.append(model)
    result = _prune(body, messages, fps, tokens, model_tokens, policy, scorer, counter, state,
                    steering.target_tokens, steering.strategy, steering.goal, scores)
    result.message_tokens = model_tokens
    plan = result.state
    plan.tokens, plan.model_tokens, plan.encoding = tokens, model_tokens, counter.encoding_name
    return result


def _prune(body, messages, fps, tokens, model_tokens, policy: Policy, scorer: Scorer, counter: TokenCounter,
           state: FrozenPlan | None, target: int | None, strategy: Strategy | None, goal: str | None,
           scores: Mapping[int, UnitScore] | None) -> PruneResult:
    # Decisions run on the target rule's counts (``tokens``); the result reports the
    # model's own (``model_tokens``): what the provider bills.
    original = sum(tokens)
    reported_original = sum(model_tokens)
    strategy = Strategy(strategy or policy.strategy)
    goal_source = "explicit" if goal else "derived"
    target_tokens = target if target is not None else policy.target_tokens

    def unchanged(mode: Mode, plan: FrozenPlan) -> PruneResult:
        plan.fingerprints = fps
        return PruneResult(dict(body), mode, strategy, reported_original, reported_original, target_tokens,
                           [Action.KEPT] * len(messages), [None] * len(messages), plan,
                           goal_source=goal_source, epoch=plan.epoch, target_rule_tokens=original)

    def reported(result: PruneResult) -> PruneResult:
        result.original_tokens = reported_original
        result.forwarded_tokens = _count_forwarded(result.request["messages"], result.sources, model_tokens,
                                                   counter.model_tokens)
        return result

    if strategy == Strategy.NONE:
        return unchanged(Mode.NONE, FrozenPlan(fps))
    if state is not None and state.target_tokens not in (0, target_tokens):
        # Decisions hold for the target they were taken under; a client that asks
        # for another target gets a fresh decision.
        state = None
    usable = state is not None and state.decided > 0 and state.prefix_matches(fps)

    if usable:
        forwarded, sources = state.replay(messages)
        fwd_tokens = _count_forwarded(forwarded, sources, tokens, counter.count_message)
        if fwd_tokens <= target_tokens:
            state.fingerprints = fps
            return reported(_frozen_result(body, forwarded, sources, state, strategy, original, fwd_tokens,
                                           target_tokens, goal_source, len(messages)))
    elif original <= target_tokens or (
        target is None and (original < policy.min_prompt_tokens or len(messages) < policy.min_messages)
    ):
        plan = state if state is not None and state.continues(fps) and state.decided == 0 else FrozenPlan(fps)
        plan.target_tokens = target_tokens
        return unchanged(Mode.UNDER, plan)

    continuing = usable or (state is not None and state.continues(fps))
    prior = dict(state.actions) if usable else {}
    conv = build_conversation(messages, counter.count_message, explicit_goal=goal,
                              fingerprints=fps, tokens=tokens)
    budget = _low_water(conv, target_tokens, policy.low_water_ratio) if continuing else target_tokens
    plan_epoch = (state.epoch + 1) if (state is not None and continuing) else 1
    boundary = state.decided if usable else 0
    result = reported(_decide(body, conv, policy, scorer, counter, strategy, budget, target_tokens,
                              _forced_unit_actions(conv, prior), scores, plan_epoch, boundary,
                              state.inserts if usable else ()))
    if result.target_rule_tokens >= original or result.forwarded_tokens >= reported_original:
        # Markers and reminders cost tokens too: dropping a few tiny units under a marker
        # larger than them would forward more than the client sent. Never worse than as
        # sent, by either count.
        plan = FrozenPlan(fps)
        plan.target_tokens = target_tokens
        return unchanged(Mode.NO_GAIN, plan)
    result.mode = Mode.EPOCH if continuing else Mode.STATELESS
    result.state.target_tokens = target_tokens
    result.target_tokens = target_tokens
    result.goal_source = goal_source
    return result


def _decide(body, conv: Conversation, policy: Policy, scorer: Scorer, counter: TokenCounter,
            strategy: Strategy, budget: int, target_tokens: int, forced: dict[int, Action],
            scores: Mapping[int, UnitScore] | None, epoch: int, boundary: int = 0,
            prior_inserts: Sequence[tuple[int, dict[str, Any]]] = ()) -> PruneResult:
    units = conv.units
    last = len(units) - 1
    hard_pins = {u.index for u in units if u.kind == KIND_SYSTEM} | set(conv.goal_units) | {last}
    window = _window(conv, policy)
    in_window = set(window)  # the window can hold every unit: list membership made this quadratic
    soft_pins = [i for i in window if i not in hard_pins]
    candidates = [u.index for u in units if u.index not in hard_pins and u.index not in in_window]
    # The target is attainable when the units never given up (system prompt, goal,
    # current step) fit in it; then the rest of the protected window yields, oldest
    # first, to meet it. When they do not, shedding the window would harm the agent
    # and still miss the target: every pinned unit goes whole, everything else is
    # omitted (the request comes as close to the target as the pins allow), and the
    # omission marker lists the ids of what it stands for: an exact id costs a few
    # tokens, and the next call is likely to reuse one.
    masked_forms = _masked_forms(conv) if policy.mask_tool_outputs else {}
    masked_cost = {u.index: _masked_tokens(conv, u.index, counter, masked_forms) for u in units
                   if u.tool_result_tokens and policy.mask_tool_outputs}
    pins_over = sum(units[i].tokens for i in hard_pins) - target_tokens
    # A current step of many parallel results can be what breaks the target: then its
    # earlier results are masked (every call still answered), the newest stays
    # whole, and the unit stays pinned, not dropped.
    squeezed = _squeeze(conv, last, masked_forms, counter, pins_over) if pins_over > 0 and masked_forms else None
    if squeezed is not None:
        masked_forms = {**masked_forms, **squeezed[1]}
    attainable = pins_over <= 0 or squeezed is not None

    def cost(i: int) -> int:
        return squeezed[0] if i == last and squeezed is not None else units[i].tokens

    protected = hard_pins | set(window)
    # Earlier markers stay where the old prefix stays, and with ids they are no
    # longer tiny: their tokens come out of the room like the pinned units'.
    carried = [counter.count_message(m) for _, m in prior_inserts if is_marker(m)]
    room = budget - sum(cost(i) for i in protected) - MARKER_RESERVE - sum(carried)
    ids_reserve = omitted_ids_reserve(conv, policy, candidates, forced, masked_forms, counter, room)
    settled, settled_end = _settled_prefix(conv, boundary, forced, masked_cost, protected, room - ids_reserve)
    if settled:
        # The settled prefix stays exactly as forwarded before (the provider's
        # cache keeps it); only the units after it are decided now.
        for i, act in settled.items():
            forced[i] = act
        candidates = [i for i in candidates if i not in settled]
    if strategy == Strategy.WINDOW:
        unit_scores = {i: UnitScore(3, 0.0, "older than the window") for i in candidates}
    elif scores is not None:
        unit_scores = {i: scores[i] for i in candidates if i in scores}
        missing = [i for i in candidates if i not in unit_scores]
        if missing:
            unit_scores.update(scorer.score(conv, missing, window))
    else:
        unit_scores = scorer.score(conv, candidates, window) if candidates else {}
    hard = {i for i, s in unit_scores.items() if s.hard}
    locked_keep = {i for i, a in (settled or {}).items() if a == Action.KEPT}
    locked_mask = {i for i, a in (settled or {}).items() if a == Action.MASKED}
    pinned = hard_pins | set(soft_pins) | hard | locked_keep
    pinned_tokens = sum(cost(i) for i in pinned) + sum(masked_cost[i] for i in locked_mask)
    reminder = _reminder(conv, policy)
    reserve = MARKER_RESERVE + (counter.count_message(reminder) if reminder else 0) + \
        (policy.summary_max_tokens if policy.summaries else 0)  # room for the summary written later
    reserve += sum(carried) if settled else max(carried, default=0)  # a re-decision keeps one at most
    reserve += min(ids_reserve, max(0, budget - pinned_tokens - reserve))
    rules = sel.SelectionRules(budget - pinned_tokens - reserve, policy.keep_threshold,
                               policy.compress_threshold, policy.fill_budget and strategy != Strategy.WINDOW,
                               policy.mask_tool_outputs, policy.mask_min_tokens)
    scored = {i: s for i, s in unit_scores.items() if i not in pinned}
    actions = sel.select(conv, scored, pinned, masked_cost, rules, forced)
    for i in hard:
        actions[i] = Action.KEPT
    for i, act in (settled or {}).items():
        actions[i] = act
    whole = set()
    if squeezed is not None:
        actions[last], whole = Action.MASKED, {units[last].stop - 1}
    excess = pinned_tokens + reserve - budget
    if excess > 0 and attainable:  # the protected window itself is over: give up its oldest units
        release = sorted(soft_pins) + sorted(hard - hard_pins)
        sel.shrink_to_fit(conv, actions, release, masked_cost, excess)

    # Each epoch's omitted span gets a marker of its own when it carries something
    # of its own: a summary, or the span's ids.
    earlier_drops = {i for i, a in forced.items() if a == Action.DROPPED}
    marker_args = (prior_inserts, settled_end, bool(settled), policy.summaries or policy.omitted_ids_tokens > 0,
                   earlier_drops)
    markers, fresh = place_markers(conv, actions, *marker_args)
    forwarded, sources, plan = _assemble(conv, actions, reminder, window, masked_forms, epoch, markers, whole)
    fwd_tokens = _count_forwarded(forwarded, sources, conv.tokens, counter.count_message)
    if fwd_tokens > target_tokens and attainable:  # the markers cost more than was reserved for them
        order = sorted(candidates, key=lambda i: (unit_scores[i].score, unit_scores[i].relevance, i))
        sel.shrink_to_fit(conv, actions, order + sorted(soft_pins), masked_cost, fwd_tokens - target_tokens)
        markers, fresh = place_markers(conv, actions, *marker_args)
        forwarded, sources, plan = _assemble(conv, actions, reminder, window, masked_forms, epoch, markers, whole)
        fwd_tokens = _count_forwarded(forwarded, sources, conv.tokens, counter.count_message)
    if fresh and policy.omitted_ids_tokens > 0:
        room = min(policy.omitted_ids_tokens, budget - fwd_tokens) if attainable else policy.omitted_ids_tokens
        markers = with_omitted_ids(conv, actions, markers, fresh, forwarded, room, counter)
        forwarded, sources, plan = _assemble(conv, actions, reminder, window, masked_forms, epoch, markers, whole)
        fwd_tokens = _count_forwarded(forwarded, sources, conv.tokens, counter.count_message)
    check_no_new_problems(conv.messages, forwarded)

    per_message_actions = [Action.KEPT] * len(conv.messages)
    per_message_scores: list[UnitScore | None] = [None] * len(conv.messages)
    for u in units:
        act = actions.get(u.index, Action.KEPT)
        score = unit_scores.get(u.index) or _pin_score(u.index, hard_pins, in_window)
        for j in u.indices:
            per_message_scores[j] = score
            if act == Action.DROPPED:
                per_message_actions[j] = Action.DROPPED
            elif act == Action.MASKED and conv.messages[j].get("role") in ("tool", "function") and j not in whole:
                per_message_actions[j] = Action.MASKED
    out = dict(body)
    out["messages"] = forwarded
    return PruneResult(out, Mode.EPOCH, strategy, conv.total_tokens, fwd_tokens, None,
                       per_message_actions, per_message_scores, plan, list(conv.problems),
                       scored_units=len(unit_scores), epoch=epoch, sources=sources,
                       target_rule_tokens=fwd_tokens)


def _settled_prefix(conv: Conversation, boundary: int, forced: Mapping[int, Action],
                    masked_cost: Mapping[int, int], protected: set[int], room: int) -> tuple[dict[int, Action], int]:
    """The longest prefix of the previously decided units whose decisions can stay
    exactly as they were within ``room`` tokens (what the protected units leave).

    The provider has that prefix cached: everything before the first changed
    message is read from cache, everything after it is written again. So an
    epoch keeps as much of the old prefix as the budget allows and decides
    anew only after it. Returns the settled unit actions and the index of the
    first original message after the settled prefix.
    """
    settled: dict[int, Action] = {}
    end = 0
    if boundary <= 0:
        return settled, end
    for u in conv.units:
        if u.stop > boundary:
            break
        if u.index in protected:  # the system prompt and the goal: kept as before anyway
            end = u.stop
            continue
        act = forced.get(u.index, Action.KEPT)
        cost = u.tokens if act == Action.KEPT else masked_cost.get(u.index, 0) if act == Action.MASKED else 0
        if cost > room:
            break
        room -= cost
        settled[u.index] = act
        end = u.stop
    return settled, end


def _low_water(conv: Conversation, target_tokens: int, ratio: float) -> int:
    """The epoch's budget. Hysteresis applies to the history: the system prompt is a
    fixed, always-cached cost, so the low-water mark leaves it whole and takes
    ``ratio`` of what remains for everything else."""
    system = sum(u.tokens for u in conv.units if u.kind == KIND_SYSTEM)
    if system >= target_tokens:
        return target_tokens
    return system + int((target_tokens - system) * ratio)


def _window(conv: Conversation, policy: Policy) -> list[int]:
    """The protected recent units: the last N, and the active tool chain (every
    unit since the newest user message)."""
    n = len(conv.units)
    start = max(0, n - policy.protect_last_units)
    if policy.protect_active_chain and conv.last_user_unit is not None:
        start = min(start, conv.last_user_unit)
    return [i for i in range(start, n) if conv.units[i].kind != KIND_SYSTEM]


def _assemble(conv: Conversation, actions: dict[int, Action], reminder, window: list[int],
              masked_forms: Mapping[int, dict[str, Any]], epoch: int, markers: Mapping[int, dict[str, Any]],
              whole: set[int] = frozenset()) -> tuple[list[dict], list[int], FrozenPlan]:
    """The forwarded messages. ``whole``: messages a masked unit leaves whole (the
    newest result of a squeezed current step)."""
    out: list[dict[str, Any]] = []
    sources: list[int] = []
    plan = FrozenPlan(list(conv.fingerprints), decided=len(conv.messages), epoch=epoch)
    removed = bool(markers) or any(a == Action.MASKED for a in actions.values())
    reminder_at = conv.units[window[0]].start if (reminder and removed and window) else None
    for u in conv.units:
        marker = markers.get(u.start)
        if marker is not None:
            out.append(marker), sources.append(-1), plan.inserts.append((u.start, marker))
        if u.start == reminder_at:
            out.append(reminder), sources.append(-1), plan.inserts.append((u.start, reminder))
        act = actions.get(u.index, Action.KEPT)
        for j in u.indices:
            m = conv.messages[j]
            if act == Action.DROPPED:
                plan.actions[j] = Action.DROPPED
                continue
            if act == Action.MASKED and is_maskable(m) and j not in whole:
                plan.actions[j] = Action.MASKED
                m = masked_forms[j]
                plan.masked[j] = m["content"]
            out.append(m)
            sources.append(j)
    return out, sources, plan


def _count_forwarded(forwarded: Sequence[Mapping[str, Any]], sources: Sequence[int],
                     tokens: Sequence[int], count: Callable[[Mapping[str, Any]], int]) -> int:
    """Tokens of the forwarded messages: the known count of each original message
    forwarded as it is, ``count`` for masked ones and inserted markers."""
    total = 0
    for m, src in zip(forwarded, sources):
        if src >= 0 and not _is_masked(m):
            total += tokens[src]
        else:
            total += count(m)
    return total


def _is_masked(m: Mapping[str, Any]) -> bool:
    c = m.get("content")
    return isinstance(c, str) and c.startswith(MASKED_PREFIX)


def _masked_forms(conv: Conversation) -> dict[int, dict[str, Any]]:
    """The masked form of every tool result of the conversation, built once per decision."""
    return {j: masked_message(m, conv.tokens[j], conv.fingerprints[j])
            for u in conv.units if u.tool_result_tokens for j in u.indices
            if is_maskable(m := conv.messages[j])}


def _masked_tokens(conv: Conversation, unit_index: int, counter: TokenCounter,
                   masked_forms: Mapping[int, dict[str, Any]]) -> int:
    return sum(counter.count_message(masked_forms[j]) if j in masked_forms else conv.tokens[j]
               for j in conv.units[unit_index].indices)


def _squeeze(conv: Conversation, index: int, masked_forms: Mapping[int, dict[str, Any]], counter: TokenCounter,
             over: int) -> tuple[int, dict[int, dict[str, Any]]] | None:
    """Unit ``index`` with every result but its newest masked, if that frees ``over``
    tokens: masks with their ids first, else without (the target is the client's hard
    limit). Returns the unit's tokens and the masked forms used; None if neither
    fits, or the unit has nothing to mask but its newest result."""
    unit = conv.units[index]
    head = [j for j in unit.indices[:-1] if j in masked_forms]
    if not head or conv.messages[unit.stop - 1].get("role") not in ("tool", "function"):
        return None
    def freed(forms: Mapping[int, dict[str, Any]]) -> int:
        return sum(conv.tokens[j] - counter.count_message(forms[j]) for j in head)

    forms = {j: masked_forms[j] for j in head}
    gain = freed(forms)
    if gain < over:
        forms = {j: masked_message(conv.messages[j], conv.tokens[j], conv.fingerprints[j], keep_ids=False)
                 for j in head}
        gain = freed(forms)
        if gain < over:
            return None
    return unit.tokens - gain, forms


def _forced_unit_actions(conv: Conversation, prior: Mapping[int, Action]) -> dict[int, Action]:
    """Earlier epochs' drops and masks (per message) as unit actions."""
    forced: dict[int, Action] = {}
    if not prior:
        return forced
    for u in conv.units:
        acts = {prior[j] for j in u.indices if j in prior}
        if Action.DROPPED in acts:
            forced[u.index] = Action.DROPPED
        elif Action.MASKED in acts:
            forced[u.index] = Action.MASKED
    return forced


def _reminder(conv: Conversation, policy: Policy) -> dict[str, Any] | None:
    """A one-line task reminder: the explicit goal, else the task-defining first user
    message (the system prompt is long and stays at the top anyway)."""
    if not policy.goal_reminder:
        return None
    first_user = next((u for u in conv.units if u.kind == KIND_USER), None)
    text = conv.goal_text if conv.goal_explicit else (first_user.text if first_user else "")
    return goal_reminder(text, policy.goal_reminder_max_chars) if text.strip() else None


def _pin_score(index: int, hard_pins: set[int], window: set[int]) -> UnitScore:
    if index in hard_pins:
        return UnitScore(5, 1.0, "pinned: system, goal or current request")
    if index in window:
        return UnitScore(5, 1.0, "pinned: recent window")
    return UnitScore(3, 0.0, "kept")


def _frozen_result(body, forwarded, sources, plan: FrozenPlan, strategy, original, fwd_tokens, target,
                   goal_source, n_messages) -> PruneResult:
    actions = [Action.KEPT] * n_messages
    for i, a in plan.actions.items():
        if i < n_messages:
            actions[i] = a
    out = dict(body)
    out["messages"] = forwarded
    return PruneResult(out, Mode.FROZEN, strategy, original, fwd_tokens, target, actions,
                       [None] * n_messages, plan, goal_source=goal_source, epoch=plan.epoch, sources=sources,
                       target_rule_tokens=fwd_tokens)


__all__ = ["PruneResult", "prune"]
