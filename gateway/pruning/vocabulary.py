"""The closed vocabularies of pruning: what happened to a message, how a prune went, which strategy.

Each is defined once here and used everywhere: selection, frozen plans,
results, reports and metrics. They are ``StrEnum`` members, so they compare
equal to (and hash like) their strings, and orjson and ``str()`` write their
value: JSON output and metric labels read as before. orjson refuses them as
dict keys, so counts keyed by an action use ``action.value``::

    Action("masked") is Action.MASKED is MASKED    # True
    Action.MASKED == "masked"                      # True
    {a.value: 0 for a in Action}                   # {"kept": 0, "masked": 0, "dropped": 0}
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """What pruning did to a unit or an original message."""

    KEPT = "kept"
    MASKED = "masked"    # tool results replaced by a short marker; the calls and their ids stay
    DROPPED = "dropped"  # omitted (an omission marker stands before the span)


# The members as module names too, and pruning uses these: a member looked up on its
# class costs ~0.18 µs (an EnumType attribute lookup), a module global a fraction of
# that, and assembly, replay and selection read them per message, ~10k times a prune.
KEPT, MASKED, DROPPED = Action.KEPT, Action.MASKED, Action.DROPPED


class Mode(StrEnum):
    """How one prune went (see ``gateway.pruning.pipeline``)."""

    NONE = "none"            # strategy none: forwarded unchanged
    UNDER = "under"          # below the target or the policy's minimum size: unchanged
    FROZEN = "frozen"        # the stored decisions replayed
    EPOCH = "epoch"          # over the target: the history decided anew, down to the low-water mark
    STATELESS = "stateless"  # no usable state: pruned straight to the target
    NO_GAIN = "no_gain"      # a decision that would not have made the request smaller: unchanged


class Strategy(StrEnum):
    """How the older units are chosen."""

    NONE = "none"            # prune nothing
    WINDOW = "window"        # the recent window, then older units newest first as room allows
    RELEVANCE = "relevance"  # score the older units and keep what matters to the task


class PolicyMode(StrEnum):
    """What a policy does with its decision (policy field ``mode``)."""

    PRUNE = "prune"    # forward the decision
    SHADOW = "shadow"  # forward the request as it came; the decision is only measured


class Cohort(StrEnum):
    """Which comparison group a conversation belongs to (``gateway.pruning.cohort``)."""

    PRUNED = "pruned"    # its decisions are forwarded
    CONTROL = "control"  # the policy's control share: never pruned, forwarded whole
    SHADOW = "shadow"    # a shadow policy: decided, measured, forwarded whole
