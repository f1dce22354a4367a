"""An agent's working set: what its recent calls work on, and what a newer call made stale.

An agent names what it works on in its calls' arguments: the file it reads, edits and
runs, the order it looks up and then changes, the ticket it updates. Two rules follow,
read from those arguments only (by the shape of their values, ``values.py``), whatever
the tool or the domain:

* *Working set*: for each value a recent call names (the protected window's calls), the
  newest older exchange whose call named it too is the agent's last view of that thing
  (the file as it last read it, the record as last fetched): its next step edits or
  reruns what that view shows, so it ranks with the units a kept unit quotes. An
  exchange whose output shows nothing (an edit's empty result, a status line) ranks so
  too, but the search goes on past it to the view before it: what the agent last saw.
* *Superseded*: an exchange whose call a newer exchange repeats exactly (the same tool,
  the same arguments: the file read again, the test run again) and whose every output
  line the newer result repeats tells nothing the newer one does not (an unchanged file
  read again, a log that only grew), so it ranks with duplicates. An older result that
  says something the newer one does not (the failure a test run showed before the fix,
  the lines an edit changed) is the history of what the agent works on: it keeps its score.

Both are read from calls only, not from outputs: an output names many things it does not
work on (a listing names every file of a folder)::

    views = working_set(conv, candidates, recent)   # {unit: values of recent calls it last named}
    stale = superseded(conv, candidates)             # {unit, ...}
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.compression import masked_message
from gateway.pruning.conversation import KIND_TOOL_CHAIN, Conversation
from gateway.pruning.ids import text_ids
from gateway.pruning.messages import call_arguments_text, content_text
from gateway.pruning.protection import Protection
from gateway.pruning.scoring import UnitScore

# A call that names more values than this is a script or a document written through a
# tool (a here-document, a file's whole new text): the values it names are its content,
# not the few things it acts on.
MAX_CALL_VALUES = 6
# A result shorter than this shows nothing of the thing its call named (an edit's empty
# output, a status line): the last view of that thing is further back.
MIN_VIEW_TOKENS = 24
WORKING_SET_LIFT = 1.0  # above any relevance the scorer's other signals reach


def named_by_call(conv: Conversation, unit: int) -> frozenset[str]:
    """The values a tool exchange's calls name (``ids.text_ids``: paths, file names, ids,
    names of code), none when they name more than MAX_CALL_VALUES."""
    u = conv.units[unit]
    if u.kind != KIND_TOOL_CHAIN:
        return frozenset()
    values = text_ids(call_arguments_text(conv.messages[u.start]))
    return frozenset(values) if len(values) <= MAX_CALL_VALUES else frozenset()


def working_set(conv: Conversation, candidates: Sequence[int], window: Sequence[int]) -> dict[int, int]:
    """Per candidate, how many values a call of ``window`` names of which it is the last
    view: the newest of ``candidates`` whose call names the value."""
    recent: set[str] = set()
    for i in window:
        recent |= named_by_call(conv, i)
    if not recent:
        return {}
    lifted: dict[int, int] = {}
    left = set(recent)
    for i in sorted(candidates, reverse=True):
        found = named_by_call(conv, i) & left
        if found:
            lifted[i] = len(found)
            if conv.units[i].tool_result_tokens >= MIN_VIEW_TOKENS:
                left -= found
            if not left:
                break
    return lifted


def superseded(conv: Conversation, candidates: Sequence[int]) -> set[int]:
    """The candidate tool exchanges whose call a newer exchange repeats exactly and whose
    output lines the newest such exchange all repeats."""
    wanted = set(candidates)
    newest: dict[str, frozenset[str]] = {}  # per call, the output lines of its newest exchange
    stale: set[int] = set()
    for u in reversed(conv.units):
        if u.kind != KIND_TOOL_CHAIN:
            continue
        key = call_arguments_text(conv.messages[u.start])
        lines = _output_lines(conv, u.index)
        if key in newest and u.index in wanted and lines <= newest[key]:
            stale.add(u.index)
        newest.setdefault(key, lines)
    return stale


def _output_lines(conv: Conversation, unit: int) -> frozenset[str]:
    """The non-blank lines of a tool exchange's results, stripped."""
    u = conv.units[unit]
    return frozenset(line.strip() for j in u.indices[1:] for line in content_text(conv.messages[j].get("content"))
                     .splitlines() if line.strip())


def lifted(conv: Conversation, scores: Mapping[int, UnitScore], last_views: Mapping[int, int]) -> dict[int, UnitScore]:
    """``scores`` with the working set (``last_views``, from :func:`working_set`) lifted to the
    top tier, above every unit only on topic (as a unit a kept one quotes is:
    ``references.copied_by_kept``), and superseded exchanges (not in the working set)
    lowered to the tier of duplicates."""
    out = dict(scores)
    for i, n in last_views.items():
        if i in scores:
            s = scores[i]
            out[i] = UnitScore(5, s.relevance + WORKING_SET_LIFT, f"last view of what a recent call names ({n})",
                               s.hard)
    for i in superseded(conv, list(scores)) - last_views.keys():
        s = scores[i]
        if not s.hard:
            out[i] = UnitScore(1, 0.0, "superseded by a newer identical call")
    return out


def named_masks(conv: Conversation, working: set[int], p: Protection, prior_masks: Mapping[int, str],
                count: Callable[[Mapping[str, Any]], int]) -> Protection:
    """``p`` with the working set's results masked with every value of their output
    (``compression.named_values``): the last view of a file the agent edits keeps the names
    its next edit copies, at a fraction of the file's size (a source file's values are about
    a seventh of its tokens). A result an earlier epoch masked keeps its mask (the provider
    cached it). ``p`` itself when there is nothing to change."""
    named = [j for i in working for j in conv.units[i].indices if j in p.masked_forms and j not in prior_masks]
    if not named:
        return p
    forms = dict(p.masked_forms)
    for j in named:
        forms[j] = masked_message(conv.messages[j], conv.tokens[j], conv.fingerprints[j], every_value=True)
    cost = dict(p.masked_cost)
    for i in working:
        if i in cost:
            cost[i] = sum(count(forms[j]) if j in forms else conv.tokens[j] for j in conv.units[i].indices)
    return replace(p, masked_forms=forms, masked_cost=cost)
