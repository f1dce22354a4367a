"""``sieve_expand``, reversible pruning, in one place: the tool, its rounds, what it restores.

With the policy's ``expand_tool`` on, a forward that masks or omits anything carries
Sieve's own tool; the model calls it with the refs the markers name, and Sieve answers
the call from the client's history and asks the provider again (docs/expand.md). The
package is split by floor (docs/architecture.md; ``tests/unit/test_architecture.py``
holds each module to its own):

====================  =====  ==============================================================
module                floor  what
====================  =====  ==============================================================
``restore``           0      pure: the tool's text, a forward's index of refs, a call's answer
``tool``              1      the tool's definition in each wire format, added after the client's
``codecs``            1      the tool's calls in each format's answers and streams; the round
``call_filter``       1      a relayed stream with Sieve's calls taken out, or spliced
``pinning``           1      an exchange put back where it was made, in later requests
``record``            4      the conversation's record in the state store (tool on, pins)
``rounds``            4      ``Expander``: the rounds on the request path (``gateway.exchange``
                             calls it through its ``ExtraRounds`` seam)
====================  =====  ==============================================================

How markers name refs is the decision's (``gateway.pruning.marker_refs``: the pruner
counts them under the target), and the room pinned exchanges take is the pruner's too
(``gateway.pruning.pins``); the ``sieve_expand_total`` metric is in ``gateway.telemetry``.

    expander = Expander(stores.conversations, budgets, metrics, counters)
    text, found = restore(["1a2b3c4d"], expandable(result, messages).refs, messages)
"""

from gateway.expand.call_filter import MAX_HELD_BYTES
from gateway.expand.record import ExpandRecord
from gateway.expand.restore import (
    Expandable,
    MAX_REFS_PER_CALL,
    NOT_AVAILABLE,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    expandable,
    refs_of_call,
    restore,
)
from gateway.expand.rounds import Expander, Session
from gateway.expand.tool import CHAT_TOOL, MESSAGES_TOOL, RESPONSES_TOOL, tool_definition, with_tool

__all__ = [
    "CHAT_TOOL",
    "Expandable",
    "ExpandRecord",
    "Expander",
    "MAX_HELD_BYTES",
    "MAX_REFS_PER_CALL",
    "MESSAGES_TOOL",
    "NOT_AVAILABLE",
    "RESPONSES_TOOL",
    "Session",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_PARAMETERS",
    "expandable",
    "refs_of_call",
    "restore",
    "tool_definition",
    "with_tool",
]
