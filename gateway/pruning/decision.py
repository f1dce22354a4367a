"""One decision (an epoch, or a stateless prune): every unit kept, masked or dropped, in named phases.

::

    protect -> room -> settled prefix -> scoring -> selection (shrinking the window if it alone is over)
            -> markers -> assembly (-> the retry, when the markers push it over the target) -> ids
            -> key lines (in the room left under the target) -> result

    result = decide(DecisionTask(request, conv, scorer, mode=Mode.STATELESS, budget=8000, epoch=1))

Each phase reads what the earlier ones left in a :class:`_Decision` and
returns its own product; :func:`decide` shows the order and what flows where.

With the policy's ``expand_tool`` on, the markers are counted as the expander
forwards them, each naming its ref (``gateway.pruning.marker_refs``): in the reserve,
in the retry and in the room the ids take. The plan keeps the plain markers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gateway.pruning.assembly import Assembled, assemble, count_forwarded, message_actions
from gateway.pruning.compression import dropped_marker, is_marker, is_omission_marker, task_reminder
from gateway.pruning.conversation import Conversation
from gateway.pruning.epochs import settled_prefix
from gateway.pruning.marker_refs import marker_spans, refs_tokens, span_ref, with_ref
from gateway.pruning.key_lines import MIN_KEY_LINE_ROOM, key_line_masks
from gateway.pruning.markers import (MARKER_RESERVE, omitted_ids_reserve, place_markers, with_omitted_ids,
                                     with_carried_trimmed, without_carried_ids, without_later_carried, without_markers,
                                     listing_room, unlisted_carried)
from gateway.pruning.normalize import check_no_new_problems
from gateway.pruning.protection import Protection, protect
from gateway.pruning.refill import RefillTask, refill
from gateway.pruning.request import PruneRequest
from gateway.pruning.result import PruneResult
from gateway.pruning.scoring import Scorer, UnitScore
from gateway.pruning.selection import SelectionRules, select, shrink_to_fit
from gateway.pruning.working_set import lifted as working_set_lifted, named_masks, working_set
from gateway.pruning.vocabulary import DROPPED, KEPT, MASKED, Action, Mode, Strategy


@dataclass(frozen=True, slots=True)
class DecisionTask:
    """What one decision is asked to do."""

    request: PruneRequest
    conversation: Conversation
    scorer: Scorer
    mode: Mode                     # EPOCH when a stored plan goes on, else STATELESS
    budget: int                    # the tokens to prune down to: the target, or an epoch's low-water mark
    epoch: int                     # the number the new plan carries
    boundary: int = 0              # original messages [0, boundary) were decided before
    forced: Mapping[int, Action] = field(default_factory=dict)  # earlier epochs' masks and drops, per unit
    prior_inserts: Sequence[tuple[int, dict[str, Any]]] = ()     # earlier markers, where the old plan put them
    prior_masks: Mapping[int, str] = field(default_factory=dict)  # earlier masks' text, per message
    scores: Mapping[int, UnitScore] | None = None                # precomputed (an async scorer's)
    in_loop: bool = False          # taken inside a tool loop (gateway.pruning.turns): the target forced it
    # The scorer's scores per candidate set, shared by the decisions of one request: a
    # decision retaken under a lower budget (``pipeline._decided_with_refs``) scores the
    # same candidates of the same conversation alike, so it reads them from here.
    score_memo: dict[tuple[int, ...], dict[int, UnitScore]] | None = None


@dataclass(slots=True)
class _Decision:
    """What the phases of one decision share, filled in phase by phase."""

    task: DecisionTask
    protection: Protection
    forced: dict[int, Action]      # decisions that stand: earlier epochs', then the settled prefix's
    carried: list[int]             # tokens of each earlier marker, which stays where the old prefix stays
    marker_reserve: int = MARKER_RESERVE  # held back for the new marker (with its ref, when it names one)
    ids_reserve: int = 0           # held back for the ids the new markers list
    settled: dict[int, Action] = field(default_factory=dict)
    settled_end: int = 0           # the first original message after the settled prefix
    candidates: list[int] = field(default_factory=list)
    scores: dict[int, UnitScore] = field(default_factory=dict)
    reminder: dict[str, Any] | None = None
    actions: dict[int, Action] = field(default_factory=dict)
    working: set[int] = field(default_factory=set)  # the working set's units (``working_set``)


def decide(task: DecisionTask) -> PruneResult:
    """Decide every unit of ``task.conversation`` and build the request to forward."""
    conv, policy, counter = task.conversation, task.request.policy, task.request.counter
    # The newest tool exchanges join the window only where the decision has the whole
    # target: an epoch aims at the low-water mark and leaves the rest to the next steps,
    # as it leaves the key lines (``_with_key_lines``).
    tool_units = policy.protect_last_tool_units if task.budget >= task.request.target_tokens else 0
    needs = [j for p in task.request.pinned for j in p.needs] if policy.expand_tool else []
    d = _Decision(task, protect(conv, policy, counter, task.request.target_tokens, task.prior_masks, tool_units,
                                needs),
                  dict(task.forced),
                  carried=[counter.count_message(_as_named(task, pos, m)) for pos, m in task.prior_inserts
                           if is_marker(m)])
    p = d.protection
    d.marker_reserve = _marker_reserve(d)
    # The room the protected units leave (and the markers the old prefix carries); part
    # of it is held back for the ids the new markers list.
    room = task.budget - p.tokens(p.protected) - d.marker_reserve - sum(d.carried)
    d.ids_reserve = omitted_ids_reserve(conv, policy, p.candidates, d.forced, p.masked_forms, counter, room)
    d.settled, d.settled_end = _loop_kept(d) or settled_prefix(conv, task.boundary, d.forced, p.masked_cost,
                                                               p.protected, room - d.ids_reserve)
    # The settled prefix stays exactly as forwarded before (the provider's cache keeps
    # it); only the units after it are decided now.
    d.forced.update(d.settled)
    d.candidates = [i for i in p.candidates if i not in d.settled]
    # The agent's working set (``working_set``): the last views, among the units the room
    # can hold, of what the recent units' calls name; they rank above what is only on topic,
    # and their masks keep the names their output holds.
    free = task.budget - p.tokens(p.hard_pins) - d.marker_reserve - sum(d.carried) - d.ids_reserve
    last_views = working_set(conv, [i for i in d.candidates + p.soft_pins if i < recent_from(d)
                                    and p.masked_cost.get(i, p.units[i].tokens) <= free],
                             range(recent_from(d), len(p.units)))
    d.working = set(last_views)
    d.scores = working_set_lifted(conv, _scores(d), last_views)
    d.protection = p = named_masks(conv, d.working, p, task.prior_masks, counter.count_message)
    d.reminder = task_reminder(conv, policy)
    d.actions = _selected(d)
    return _result(d, _forwarded(d))


def _loop_kept(d: _Decision) -> tuple[dict[int, Action], int] | None:
    """An epoch inside a tool loop keeps the previous forward through the task the loop works on
    and sheds the loop itself, its newest steps first (``_selected``): the earlier turns and the
    loop's older steps keep the prefix their reasoning is bound to (ARCHITECTURE.md 2a), where
    shedding the earlier turns would invalidate every step of the loop. It leaves the loop half
    the room that prefix and the pins leave under the target (shedding more would invalidate
    more steps; less, bring the next epoch sooner). None, for the usual epoch: no earlier turn
    is forwarded (nothing to keep), or the prefix and the pins alone leave no room."""
    task, conv, p = d.task, d.task.conversation, d.protection
    if task.mode != Mode.EPOCH or not task.in_loop or conv.task_unit is None:
        return None
    loop_start = conv.units[conv.task_unit].stop
    if task.boundary < loop_start:
        return None
    settled, end = settled_prefix(conv, loop_start, d.forced, p.masked_cost, p.protected, task.budget)
    kept = sum(p.masked_cost.get(i, 0) if a == MASKED else conv.units[i].tokens
               for i, a in settled.items() if a != DROPPED)
    fixed = kept + p.tokens(p.hard_pins) + d.marker_reserve + sum(d.carried)
    target = task.request.target_tokens
    if end < loop_start or kept == 0 or fixed >= target:
        return None
    d.task = dataclasses.replace(task, budget=max(task.budget, fixed + (target - fixed) // 2))
    return settled, end


def _scores(d: _Decision) -> dict[int, UnitScore]:
    """The candidates' scores: the scorer's (or those given, the scorer filling gaps);
    under the window strategy all alike, so selection takes the newest first."""
    task, window = d.task, d.protection.window
    if task.request.strategy == Strategy.WINDOW:
        return {i: UnitScore(3, 0.0, "older than the window") for i in d.candidates}
    if task.scores is not None:
        scores = {i: task.scores[i] for i in d.candidates if i in task.scores}
        missing = [i for i in d.candidates if i not in scores]
        if missing:
            scores.update(task.scorer.score(task.conversation, missing, window))
        return scores
    if not d.candidates:
        return {}
    key = tuple(d.candidates)
    if task.score_memo is not None and key in task.score_memo:
        return dict(task.score_memo[key])
    scores = task.scorer.score(task.conversation, d.candidates, window)
    if task.score_memo is not None:
        task.score_memo[key] = dict(scores)
    return scores


def recent_from(d: _Decision) -> int:
    """The first of the recent units: the policy's last units, the current step among them."""
    return max(0, len(d.protection.units) - max(1, d.task.request.policy.protect_last_units))


def _selected(d: _Decision) -> dict[int, Action]:
    """Every unit's action within the budget: pins, hard user constraints and the settled
    prefix as they are, the rest selected by score; the protected window shed oldest
    first when it alone is over the budget: masked, then dropped under an attainable
    target; under one the hard pins alone break, masked only (``protection``)."""
    task, p, policy = d.task, d.protection, d.task.request.policy
    hard = {i for i, s in d.scores.items() if s.hard}  # user constraints: pinned like the goal
    locked_keep = {i for i, a in d.settled.items() if a == KEPT}
    locked_mask = {i for i, a in d.settled.items() if a == MASKED}
    pinned = p.hard_pins | set(p.soft_pins) | hard | locked_keep
    pinned_tokens = p.tokens(pinned) + sum(p.masked_cost[i] for i in locked_mask)
    reserve = _reserve(d, pinned_tokens)
    rules = SelectionRules(task.budget - pinned_tokens - reserve, policy.keep_threshold, policy.compress_threshold,
                           policy.fill_budget and task.request.strategy != Strategy.WINDOW,
                           policy.mask_tool_outputs, policy.mask_min_tokens)
    scored = {i: s for i, s in d.scores.items() if i not in pinned}
    actions = select(task.conversation, scored, pinned, p.masked_cost, rules, d.forced)
    for i in hard:
        actions[i] = KEPT
    actions.update(d.settled)
    if p.squeezed_tokens is not None:
        actions[p.last] = MASKED
    excess = pinned_tokens + reserve - task.budget
    if excess > 0:
        # An epoch inside a tool loop sheds the window from its newest unit back (the current
        # step is a hard pin): its first changed position comes as late as the decision allows,
        # so the loop's steps before it keep the prefix their reasoning is bound to
        # (ARCHITECTURE.md 2a). Elsewhere (a first decision, a turn boundary, where no loop runs)
        # the oldest go first: the newest turns are what the next step reads. Room the shed
        # frees beyond the excess goes back by score (``refill``).
        late = task.mode == Mode.EPOCH and task.in_loop
        release = sorted(p.soft_pins, reverse=late) + sorted(hard - p.hard_pins)
        left = shrink_to_fit(task.conversation, actions, release, p.masked_cost, excess, drop=p.attainable)
        if left < 0 and p.attainable:
            d.protection, working = refill(RefillTask(
                task.conversation, task.scorer, policy, p, d.scores, d.forced, task.prior_masks, d.ids_reserve,
                task.request.counter.count_message, recent_from(d)), actions, release, -left)
            d.working |= working
    return actions


def _reserve(d: _Decision, pinned_tokens: int) -> int:
    """Tokens selection leaves free for what is inserted: the omission marker, the reminder,
    a summary written later, the earlier markers and the ids the new markers list."""
    task, policy = d.task, d.task.request.policy
    reserve = d.marker_reserve + (task.request.counter.count_message(d.reminder) if d.reminder else 0) + \
        (policy.summary_max_tokens if policy.summaries else 0)
    # Earlier markers stay where the old prefix stays, and with ids they are no longer
    # tiny; a re-decision (nothing settled) keeps those of the spans still omitted, which
    # earlier epochs' drops are (``markers.place_markers``): all of them, with ids.
    reserve += sum(d.carried) if d.settled or d.task.request.policy.omitted_ids_tokens > 0 \
        else max(d.carried, default=0)
    return reserve + min(d.ids_reserve, max(0, task.budget - pinned_tokens - reserve))


def _forwarded(d: _Decision) -> Assembled:
    """The markers placed and the messages assembled. Markers cost tokens the reserve may
    not cover: over the target, more is shed (masked only, under an unattainable one) and
    all is placed again. Then the fresh markers take the ids of what they stand for,
    within the room left, and the carried markers' lists, given up when over the target,
    come back as far as they fit in it (``_with_carried_lists``). An epoch under the target lists
    the carried markers that list nothing after them: a list given up for one step's bulk, since
    shed, comes back (the cache is rewritten from the marker on, an epoch's soon after anyway)."""
    request, p = d.task.request, d.protection
    markers, fresh = _markers(d)
    done = _assembled(d, markers)
    over = done.held - request.target_tokens
    if over > 0:
        order = sorted(d.candidates, key=lambda i: (d.scores[i].score, d.scores[i].relevance, i))
        if shrink_to_fit(d.task.conversation, d.actions, order + sorted(p.soft_pins), p.masked_cost, over,
                         drop=p.attainable) < over:
            markers, fresh = _markers(d)
            done = _assembled(d, markers)
    listed, given_up = markers, 0  # the carried markers with their lists, before any gives them up
    for give_up in (without_carried_ids, without_later_carried, without_markers):
        if done.held > request.target_tokens and p.attainable:
            markers = give_up(markers, fresh)
            done = _assembled(d, markers)
            given_up += 1
    fresh = [pos for pos in fresh if pos in markers]
    ids_tokens = request.policy.omitted_ids_tokens
    relisted = unlisted_carried(markers, fresh) if given_up == 0 and d.task.mode == Mode.EPOCH else []
    if (fresh or relisted) and ids_tokens > 0:
        room = min(listing_room(ids_tokens), _ids_room(d, done)) if p.attainable else listing_room(ids_tokens)
        refs = {pos: span_ref(d.task.conversation.fingerprints[pos], pos) for pos in fresh + relisted} \
            if request.policy.expand_tool else None
        markers = with_omitted_ids(d.task.conversation, d.actions, markers, (fresh, relisted), done.forwarded,
                                   (room, ids_tokens), request.counter, refs)
        done = _assembled(d, markers)
    if given_up == 1:
        done = _with_carried_lists(d, done, {pos: m if pos in fresh else listed[pos] for pos, m in markers.items()},
                                   fresh)
    done = _with_key_lines(d, done)
    check_no_new_problems(d.task.conversation.messages, done.forwarded)
    return done


def _with_carried_lists(d: _Decision, done: Assembled, markers: Mapping[int, dict[str, Any]],
                        fresh: Sequence[int]) -> Assembled:
    """The carried markers' lists given back after the fresh markers took theirs: all of them
    when they fit under the target, else trimmed by what they put over it
    (``markers.with_carried_trimmed``); ``done`` (none given back) if even that is over. Giving
    up every list at once for an overshoot of a few tokens would drop the ids the model is
    likeliest to need again (the carried span's best ones) and rewrite the cached bytes
    from the first carried marker on all the same."""
    target = d.task.request.target_tokens
    restored = _assembled(d, markers)
    if restored.held <= target:
        return restored
    count = d.task.request.counter.count_message
    trimmed = _assembled(d, with_carried_trimmed(markers, fresh, restored.held - target,
                                                 lambda pos, m: count(_as_named(d.task, pos, m))))
    return trimmed if trimmed.held <= target else done


def _ids_room(d: _Decision, done: Assembled) -> int:
    """The room the fresh markers' ids may take: what the decision's budget leaves, and at
    least half of what the target leaves. An epoch aims at the low-water mark so that the
    next steps share a cached prefix, but the client's limit is the target: when the pins
    fill the low-water mark, or all but a few tokens of it, the ids still get up to half of
    what the target leaves (a budget left with a few tokens is no reason to list fewer ids
    than one left with none). An id costs a few tokens where its message cost hundreds, and
    a new span whose marker gets no ids has none of its own (the older marker stands for it,
    listing only what it omitted then)."""
    return max(d.task.budget - done.held, (d.task.request.target_tokens - done.held) // 2)


def _with_key_lines(d: _Decision, done: Assembled) -> Assembled:
    """The room the decision leaves under the target goes to the key lines of its fresh
    masks (``gateway.pruning.key_lines``), the most relevant unit's first: nothing is
    masked or dropped for them, and the target holds them. Only when the budget is the
    target: under a low-water mark (an epoch, a conversation that says it goes on) the
    room left is what the next steps grow into before the next epoch, and filling it
    would bring that epoch (and the cache write it costs) sooner."""
    task, p = d.task, d.protection
    room = task.budget - done.held
    if room < MIN_KEY_LINE_ROOM or not p.attainable or task.budget < task.request.target_tokens:
        return done
    fresh = [j for j, a in done.plan.actions.items() if a == MASKED and j not in task.prior_masks]
    if not fresh:
        return done
    unit_of = {j: u.index for u in task.conversation.units for j in u.indices}
    top = UnitScore(5, 1.0, "")

    def rank(j: int) -> tuple[int, float, int]:
        s = d.scores.get(unit_of[j], top)
        return -s.score, -s.relevance, -j

    chosen, room = key_line_masks(task.conversation, sorted(fresh, key=rank), room,
                                  task.request.counter.count_message, p.masked_forms)
    if not chosen:
        return done
    # The masks change in place: nothing else moves, so nothing is assembled again.
    for k, j in enumerate(done.sources):
        if j in chosen:
            done.forwarded[k] = chosen[j]
            done.plan.masked[j] = chosen[j]["content"]
    done.target_rule_tokens = task.budget - room - done.refs_tokens
    return done


def _markers(d: _Decision) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """Where the omission markers go; each epoch's omitted span gets a marker of its own
    when it carries something of its own: a summary, or the span's ids."""
    policy = d.task.request.policy
    earlier_drops = {i for i, a in d.forced.items() if a == DROPPED}
    per_epoch = policy.summaries or policy.omitted_ids_tokens > 0
    return place_markers(d.task.conversation, d.actions, d.task.prior_inserts, d.settled_end, bool(d.settled),
                         per_epoch, earlier_drops)


def _assembled(d: _Decision, markers: Mapping[int, dict[str, Any]]) -> Assembled:
    """The messages assembled; with the policy's ``expand_tool`` on, the tokens the markers'
    refs add counted beside them (``Assembled.refs_tokens``), as the expander will forward them."""
    done = assemble(d.task.conversation, d.actions, d.protection, markers, d.reminder, d.task.epoch,
                    d.task.request.counter)
    if d.task.request.policy.expand_tool and markers:
        plan, count = done.plan, d.task.request.counter.count_message
        actions = [plan.actions.get(j, KEPT) for j in range(len(plan.fingerprints))]
        done.refs_tokens = refs_tokens(done.forwarded, done.sources,
                                       marker_spans(plan.inserts, actions, plan.fingerprints), count)
    return done


def _marker_reserve(d: _Decision) -> int:
    """Tokens held back for the omission marker this decision places: a plain one's; with
    the policy's ``expand_tool`` on, the marker naming the ref it will carry (a ref's
    tokens vary with its digits), counted where the first undecided candidate starts:
    the oldest, where the first drop, and so the marker, usually stands. An estimate:
    ``_forwarded`` counts the markers as placed, and sheds more if they do not fit."""
    task, p = d.task, d.protection
    first = next((i for i in p.candidates if i not in d.forced), None)
    if not task.request.policy.expand_tool or first is None:
        return MARKER_RESERVE
    named = _as_named(task, task.conversation.units[first].start, dropped_marker())
    return max(MARKER_RESERVE, task.request.counter.count_message(named))


def _as_named(task: DecisionTask, pos: int, marker: dict[str, Any]) -> dict[str, Any]:
    """``marker``, placed at original message ``pos``, as the expander forwards it: with the
    policy's ``expand_tool`` on, an omission marker names the ref of its span."""
    fingerprints = task.conversation.fingerprints
    if task.request.policy.expand_tool and is_omission_marker(marker) and pos < len(fingerprints):
        return with_ref(marker, span_ref(fingerprints[pos], pos))
    return marker


def _result(d: _Decision, done: Assembled) -> PruneResult:
    task, request = d.task, d.task.request
    done.plan.target_tokens = request.target_tokens
    actions, scores = message_actions(d.task.conversation, d.protection, d.actions, d.scores)
    body = dict(request.body)
    body["messages"] = done.forwarded
    return PruneResult(
        request=body, mode=task.mode, strategy=request.strategy, original_tokens=request.original_tokens,
        forwarded_tokens=count_forwarded(done.forwarded, done.sources, request.model_tokens,
                                         request.counter.model_tokens),
        target_tokens=request.target_tokens, message_actions=actions, message_scores=scores, state=done.plan,
        problems=list(task.conversation.problems), goal_source=request.goal_source, scored_units=len(d.scores),
        epoch=task.epoch, sources=done.sources, target_rule_tokens=done.target_rule_tokens,
    )
