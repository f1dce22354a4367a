"""The 1-5 rubric: a candidate's relevance read as a tier, with the reason a report shows.

5 decides success (user constraints, unique ids, key data); 4 affects the next
key steps; 3 useful background; 2 weakly related, drop first; 1 unrelated. The
LLM scorer is asked for the same rubric. Beside the tiers: the prior each kind
of message starts from, and what makes a user message a hard constraint::

    tier(0.5)                                    # 4
    is_imperative("Never refund to a gift card.")  # True
"""

from __future__ import annotations

import re

from gateway.pruning.conversation import KIND_ASSISTANT, KIND_TOOL_CHAIN, KIND_USER


def tier(relevance: float) -> int:
    """The tier of a relevance on the local scorer's scale (about 0-1, the best match of
    the request near its top): 5 for a strong match on words and entities together, 4 for
    a clear one, 3 for some, 2 for a trace, 1 for none."""
    if relevance >= 0.65:
        return 5
    if relevance >= 0.42:
        return 4
    if relevance >= 0.22:
        return 3
    if relevance >= 0.1:
        return 2
    return 1


def type_prior(kind: str, constraint: bool, error: bool) -> float:
    """What a unit of ``kind`` is worth before its content is read: a user's words more
    (a constraint more still), a tool chain some (a failed call a little more)."""
    if kind == KIND_USER:
        return 0.08 + (0.1 if constraint else 0.0)
    if kind == KIND_TOOL_CHAIN:
        return 0.06 + (0.05 if error else 0.0)
    if kind == KIND_ASSISTANT:
        return 0.02
    return 0.0


# After a sentence end, whitespace but no newline: a match after blank lines starts at the
# last one, and no start rescans a run of newlines (quadratic: 40k newlines took 70 s).
_IMPERATIVE = re.compile(
    r"(?:^|[.!?\n][^\S\n]*)(?:please\s+)?(?:do not|don't|never|always|make sure|you must|you should(?: not)?|"
    r"remember to|be sure to|only)\b|不要|必须|务必|禁止|请勿|一定要",
    re.IGNORECASE,
)


def is_imperative(text: str) -> bool:
    """A sentence that starts as an instruction to the assistant, not chit-chat that uses 'always'."""
    return _IMPERATIVE.search(text) is not None


def reason(hard: bool, lexical: float, entities: list[str], references: int, kind: str, error: bool,
           copied: int = 0) -> str:
    """Why a candidate scored as it did, in a few words (``lexical`` relative to the best)."""
    if hard:
        return "user constraint"
    parts = [f"copied by a kept later unit ({copied})"] if copied else []
    if entities:
        parts.append("shares " + ", ".join(sorted(entities)[:3]))
    if lexical >= 0.3:
        parts.append("on topic")
    if references:
        parts.append(f"referenced later ({references})")
    if error and kind == KIND_TOOL_CHAIN:
        parts.append("tool error")
    return "; ".join(parts) or "unrelated to the current step"
