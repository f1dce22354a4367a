"""The exact values a later call reuses: ids, codes, e-mails (three digits or more).

Masks keep them, omission markers list them: an agent's next call is far more
likely to reuse an old order id than an old sentence, and an id costs a few
tokens where its message cost hundreds. Pure and deterministic, like the rest
of the pipeline.
"""

from __future__ import annotations

import re
from itertools import chain, filterfalse, repeat
from typing import Callable, Iterable

from gateway.pruning.memo import TextMemo
from gateway.pruning.runs import RunSplitter

# Values an agent's next call reuses verbatim: ids, codes, amounts, e-mails.
_AMOUNT = re.compile(r"-?\d{1,4}(?:\.\d+)?|-?\d+\.\d{1,2}")
_THREE_DIGITS = re.compile(r"\d\D*\d\D*\d")
# A run of id characters that holds a digit (then kept if it has three): anchored at
# the start of its run and lazy up to the first digit, so a long run of letters is
# passed in linear time, and word-only tokens never reach Python.
_ID_TOKEN = re.compile(r"(?<![#\w.+@\-])[#\w.+@\-]*?\d[#\w.+@\-]*")
_ID_RUNS = RunSplitter("#.+@-")


# Every epoch masks, or lists the ids of, the same old outputs again: their ids are
# read once per text. Bounded like the other per-text memos.
_IDS: TextMemo[tuple[str, ...]] = TextMemo(50_000, 8 * 1024 * 1024)


def text_ids(text: str) -> tuple[str, ...]:
    """All id-like values of a text, first occurrence first, deduplicated (memoised)."""
    ids = _IDS.get(text)
    if ids is None:
        ids = _IDS.put(text, _ids_of_runs(_runs(text)))
    return ids


def _runs(text: str) -> list[str]:
    """The runs of id characters of a text (those with a digit, at least), split in C
    where it can be (runs.py)."""
    runs = _ID_RUNS.split(text)
    return runs if runs is not None else _ID_TOKEN.findall(text)


def _ids_of_runs(runs: Iterable[str]) -> tuple[str, ...]:
    # _is_id's rule (three digits, not an amount) in C iteration throughout: filter,
    # map, and dict.fromkeys for first occurrence first.
    stripped = map(str.strip, filter(_THREE_DIGITS.search, dict.fromkeys(runs)), repeat(".-"))  # no digit is stripped
    return tuple(filterfalse(_AMOUNT.fullmatch, dict.fromkeys(stripped)))


def clear_ids_memo() -> None:
    """Forget the per-text ids (benchmarks of a cold process)."""
    _IDS.clear()


# The newest characters of an omitted span whose ids are considered: a marker holds
# a few dozen ids, and a 100k-token cold history must not be scanned whole for them.
OMITTED_SCAN_CHARS = 60_000
_CONTEXT = 160  # characters either side of an id that say what it is


def omitted_ids(texts: Iterable[tuple[str, bool]], present: set[str], room: int, count_text: Callable[[str], int],
                query: Iterable[str] = ()) -> list[str]:
    """The ids an omitted span leaves behind, as many as ``room`` tokens hold.

    ``texts``: the span's texts, newest first, each with whether it is dialogue
    (a user or assistant message, not a tool output). None the forwarded request
    already carries (``present``, see :func:`ids_in`). Ranked by how many words
    of the current request stand in the id's record (an order listing names
    "laptop" next to the laptop's product id), then by how often the span
    mentions it (dialogue counts double: an id the agent or the user repeats is
    one the task turns on), then newest first. A later call is far more likely
    to reuse an old id than an old sentence, and an id costs a few tokens where
    its message cost hundreds.
    """
    words = tuple(query)
    best: dict[str, list[int]] = {}  # id -> [query words around it, mentions, first seen]
    budget = OMITTED_SCAN_CHARS
    for text, dialogue in texts:
        if budget <= 0:
            break
        text = text[-budget:]
        budget -= len(text)
        lowered = text.lower() if words else ""
        bounds = ("{", "}") if text.lstrip()[:1] in ("{", "[") else ("\n", "\n")
        counted: set[str] = set()
        record_matches: dict[str, int] = {}  # the ids of one JSON object share its record
        for match in _ID_TOKEN.finditer(text):
            value = match.group().strip(".-")
            if value in present or not _is_id(value):
                continue
            matches = 0
            if words:
                record = _record(lowered, match.start(), match.end(), *bounds)
                matches = record_matches.get(record, -1)
                if matches < 0:
                    matches = record_matches[record] = sum(map(record.__contains__, words))
            entry = best.get(value)
            if entry is None:
                entry = best[value] = [matches, 0, len(best)]
            elif matches > entry[0]:  # another mention sits in a more telling record
                entry[0] = matches
            if value not in counted:
                counted.add(value)
                entry[1] += 2 if dialogue else 1
    chosen: list[str] = []
    used = 0
    for value in sorted(best, key=lambda v: (-best[v][0], -best[v][1], best[v][2])):
        cost = count_text(" " + value)
        if used + cost > room:
            break
        chosen.append(value)
        used += cost
    return chosen


def _record(text: str, start: int, end: int, opening: str, closing: str) -> str:
    """What an id stands in: its JSON object (up to the first brace either side) or
    its line, at most _CONTEXT characters either side. An order listing's item names
    its product and options next to its ids."""
    lo, hi = max(0, start - _CONTEXT), end + _CONTEXT
    left, right = text.rfind(opening, lo, start), text.find(closing, end, hi)
    return text[left + 1 if left >= 0 else lo: right if right >= 0 else hi]


def ids_in(texts: Iterable[str]) -> set[str]:
    """Every id-like value of some texts (as :func:`kept_values` reads them), in one
    pass over all their runs: a forwarded request is hundreds of short texts."""
    return set(_ids_of_runs(chain.from_iterable(map(_runs, texts))))


def _is_id(token: str) -> bool:
    return _THREE_DIGITS.search(token) is not None and not _AMOUNT.fullmatch(token)
