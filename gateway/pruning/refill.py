"""When the protected window, shed oldest first, frees more than it was over: the room goes back by score.

A window that alone breaks the budget is masked, then dropped oldest first, whole
units at a time (``selection.shrink_to_fit``); a big unit dropped late frees more
than was over. A coding agent's tool loop since the task is the whole session: shed by
age alone, it keeps a few newest exchanges and leaves room that the last view of the
file it edits would fit in. That room goes back to the units dropped, the window's and
the older candidates', selected as candidates are: the window's units scored now, with
what the window kept as the context, the working set lifted (``working_set``)::

    protection, working = refill(RefillTask(...), actions, room)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.conversation import Conversation
from gateway.pruning.policy import Policy
from gateway.pruning.protection import Protection
from gateway.pruning.scoring import Scorer, UnitScore
from gateway.pruning.selection import SelectionRules, select
from gateway.pruning.vocabulary import DROPPED, Action
from gateway.pruning.working_set import lifted, named_masks, working_set


@dataclass(frozen=True, slots=True)
class RefillTask:
    conversation: Conversation
    scorer: Scorer
    policy: Policy
    protection: Protection
    scores: Mapping[int, UnitScore]       # the candidates'
    forced: Mapping[int, Action]          # decisions that stand
    prior_masks: Mapping[int, str]        # earlier epochs' masks, kept as forwarded
    ids_reserve: int                      # what the decision held back for the markers' ids
    count: Callable[[Mapping[str, Any]], int]
    recent_from: int                      # the first of the recent units, whose calls name the working set


def refill(task: RefillTask, actions: dict[int, Action], released: Sequence[int],
           room: int) -> tuple[Protection, set[int]]:
    """Units of ``released`` (the window, oldest first) and candidates that ``actions``
    drop, selected again within ``room`` (``actions`` changes in place); the protection
    with the working set's masks, and the working set found."""
    p, conv = task.protection, task.conversation
    # What stays dropped leaves its ids to the marker, which gets all the room the policy
    # gives ids first: an id costs a few tokens where the unit that held it cost hundreds
    # (the decision's own reserve counted the candidates' ids only, not the window's).
    room -= max(0, task.policy.omitted_ids_tokens - task.ids_reserve)
    shed = [i for i in released if actions.get(i) == DROPPED and i not in task.forced]
    dropped = [i for i in task.scores if actions.get(i) == DROPPED and i not in task.forced]
    if room <= 0 or not (shed or dropped):
        return p, set()
    kept_window = [i for i in p.window if actions.get(i) != DROPPED]
    scores = {i: task.scores[i] for i in dropped}
    if shed:
        scores.update(task.scorer.score(conv, shed, kept_window))
    views = working_set(conv, [i for i in scores if i < task.recent_from
                               and p.masked_cost.get(i, p.units[i].tokens) <= room],
                        range(task.recent_from, len(p.units)))
    scores, working = lifted(conv, scores, views), set(views)
    p = named_masks(conv, working, p, task.prior_masks, task.count)
    policy = task.policy
    rules = SelectionRules(room, policy.keep_threshold, policy.compress_threshold, False,
                           policy.mask_tool_outputs, policy.mask_min_tokens)
    for i, action in select(conv, scores, set(), p.masked_cost, rules, task.forced).items():
        if action != DROPPED:
            actions[i] = action
    return p, working
