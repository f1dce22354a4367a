"""The exact values a later call reuses, read from texts: ids, codes, e-mails, paths, names of code.

Masks keep them, omission markers list them: an agent's next call is far more
likely to reuse an old order id than an old sentence, and an id costs a few
tokens where its message cost hundreds. Which strings are values is
``values.py``'s rule (by shape, in any domain); this module reads the runs of
a text that may hold one (``value_runs.py``, in C where it is built), each
distinct run once, and ranks the values of an omitted span for its marker. Pure and deterministic, like the
rest of the pipeline.
"""

from __future__ import annotations

import re
from itertools import chain, filterfalse, repeat
from typing import Callable, Iterable

from gateway.pruning.memo import TextMemo
from gateway.pruning.value_runs import CODE, QUOTED_CODE, clear_run_tests, quoted_codes, value_runs, value_spans
from gateway.pruning.values import ValueMemo, is_strong, strong_match

_VALUES = ValueMemo()
# A JSON object's keys ("order_id":) name fields, they are not values; a key with a digit
# is a record's id ({"6805564527": {...}}) and stays one. Read once per text.
_DIGIT = re.compile(r"[0-9]").search
# A field name numbered in its kind: a word of three letters or more, then one or two digits.
_FIELD_NUMBER = re.compile(r"[A-Za-z]{3,}[_-]?[0-9]{1,2}").fullmatch


# Every epoch masks, or lists the ids of, the same old outputs again: their ids are
# read once per text. Bounded like the other per-text memos.
_IDS: TextMemo[tuple[str, ...]] = TextMemo(50_000, 8 * 1024 * 1024)


def text_ids(text: str) -> tuple[str, ...]:
    """All id-like values of a text, first occurrence first, deduplicated (memoised)."""
    ids = _IDS.get(text)
    if ids is None:
        ids = _IDS.put(text, _without_field_keys(text, _ids_of_runs(value_runs(text, False))))
    return ids


# Masks keep only the values that name one record, and most runs of a tool output cannot
# hold one: a masked text need not read its codes and names of code.
_STRONG_IDS: TextMemo[tuple[str, ...]] = TextMemo(50_000, 8 * 1024 * 1024)


def strong_ids(text: str) -> tuple[str, ...]:
    """``text_ids(text)`` that name one record (``values.is_strong``), in the same order,
    reading only the runs that may hold one (memoised): every tool output offered for
    masking is read, most of them never for a marker."""
    ids = _IDS.get(text)
    if ids is not None:
        return tuple(filter(strong_match, ids))
    strong = _STRONG_IDS.get(text)
    if strong is None:
        found = tuple(filter(strong_match, _ids_of_runs(value_runs(text, True))))
        strong = _STRONG_IDS.put(text, _without_field_keys(text, found))
    return strong


# A field's whole value that is a code (value_runs.CODE). In JSON a string value, not a
# key (value_runs.QUOTED_CODE); in a Python repr the same in single quotes; in YAML and
# other "key: value" text, the rest of a line after its key or a list item's dash:
# 'cabin: basic_economy', '- DGZSYX'.
_SINGLE_QUOTED_VALUE = rf"'({CODE})'\s*[,}}\]]"
_LINE_VALUE = rf"^[ \t]*(?:-[ \t]+(?:[A-Za-z_][\w.-]{{0,40}}:[ \t]+)?|[A-Za-z_][\w.-]{{0,40}}:[ \t]+)({CODE})[ \t]*$"
# One pattern per kind of text, each scanning only for the forms it may hold: single quotes
# in a text with a repr's "'key':", lines in a YAML-like one. Most texts are neither: their
# JSON values are read in C where it is built (value_runs.quoted_codes).
_FIELD_VALUES = {(repr_, lines): re.compile("|".join(
    [QUOTED_CODE] + ([_SINGLE_QUOTED_VALUE] if repr_ else []) + ([_LINE_VALUE] if lines else [])), re.M)
    for repr_ in (False, True) for lines in (False, True) if repr_ or lines}
_FIELD_VALUE_CHARS = 40
_FIELD_CODES: TextMemo[tuple[str, ...]] = TextMemo(50_000, 8 * 1024 * 1024)


def field_codes(text: str) -> tuple[str, ...]:
    """The codes and names of code that are whole field values of a structured output,
    JSON or YAML-like (``"cabin": "basic_economy"``, ``origin: SFO``, ``"status": "pending"``
    is a word, not a code), first occurrence first, without the values that name one
    record (``strong_ids`` has those) (memoised). A field's own value is the record's:
    the next call copies it as it stands (a fare class, a state, a kind), however the
    tool printed it, where the same shape in prose or code more often names a kind of thing."""
    codes = _FIELD_CODES.get(text)
    if codes is None:
        kind = ("':" in text, bool(_line_keys(text)))
        if kind == (False, False):
            values = quoted_codes(text)
        else:
            values = [v for groups in _FIELD_VALUES[kind].findall(text) for v in groups]
        # _VALUES is values_of memoised per run: a record's codes repeat in every output
        # that prints the record (its country, its state), read once.
        found = dict.fromkeys(v for v in values
                              if v and len(v) < _FIELD_VALUE_CHARS and not is_strong(v) and _VALUES[v] == (v,))
        codes = _FIELD_CODES.put(text, tuple(found))
    return codes


def _ids_of_runs(runs: Iterable[str]) -> tuple[str, ...]:
    # values.py's rule per run, memoised, in C iteration throughout: mapped, chained,
    # deduplicated (first occurrence first).
    return tuple(dict.fromkeys(chain.from_iterable(map(_VALUES.__getitem__, runs))))


def _without_field_keys(text: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """``values`` of ``text`` less its records' field names (``_field_keys``), which are
    looked for only when some value could be one: a value without a digit, or a
    numbered word. A few such values are looked up in the text one by one
    (``_keys_among``): collecting every key of a JSON output cost more than reading its
    values (a Python step per key)."""
    maybe = [*filterfalse(_DIGIT, values), *filter(_FIELD_NUMBER, values)]
    if not maybe:
        return values
    keys = _keys_among(text, maybe) if len(maybe) * len(text) <= _LOOKUP_CHARS else _field_keys(text)
    return tuple(filterfalse(keys.__contains__, values)) if keys else values


# Values that could be keys are looked for in the text one by one (a few substring
# searches each, in C) while that scans at most a few times this many characters
# (values x text); beyond, every key of the text is collected once.
_LOOKUP_CHARS = 100_000


def _keys_among(text: str, values: list[str]) -> frozenset[str]:
    """``frozenset(values) & _field_keys(text)`` without collecting every key, for values
    that may be keys (no digit, or a numbered word). A value (which never holds a quote)
    is a JSON or repr key exactly where it ends a piece of ``text.split('":')`` after the
    piece's last quote: right after a quote (``"value":``), or as the whole piece (at the
    text's start, or right after the previous ``":``); else a YAML-like line's key."""
    keys = set()
    lines: frozenset[str] | None = None
    for value in values:
        if not 0 < len(value) <= 64:
            continue
        for quote in ('"', "'"):
            ends = quote + ":"
            if ends in text and (quote + value + ends in text or text.startswith(value + ends)
                                 or ends + value + ends in text):
                keys.add(value)
                break
        else:
            if lines is None:
                lines = frozenset(_line_keys(text))
            if value in lines:
                keys.add(value)
    return frozenset(keys)


# A YAML-like line's key: the word before its colon (then a space or the line's end), at
# the line's start or after a list item's dash ('  address1: 786 Elm St', '- id: 42').
_LINE_KEY = re.compile(r"^[ \t]*(?:-[ \t]+)?([A-Za-z_][\w.-]{0,63}):(?=[ \t]|$)", re.M)


def _field_keys(text: str) -> frozenset[str]:
    """The keys of a structured text's records that name fields (none for other texts):
    those without a digit, and a word numbered by one or two digits (``address1``,
    ``line_2``: the second of a kind of field, not a record); a key that is an id
    (``{"6805564527": {...}}``) stays a value. JSON objects' keys, and a Python repr's
    in single quotes (the text split at each '":' in C, each piece's last quoted word: a
    regex scan cost three times the split), and the keys of YAML-like ``key: value``
    lines: the same fields printed otherwise."""
    keys: set[str] = set()
    for quote in ('"', "'"):  # JSON, and Python's repr of a dict (what str() prints)
        if quote + ":" in text:
            pieces = text.split(quote + ":")
            pieces.pop()
            keys.update(piece[piece.rfind(quote) + 1:] for piece in pieces)
    keys.update(_line_keys(text))
    return frozenset(key for key in keys if 0 < len(key) <= 64 and (_DIGIT(key) is None or _FIELD_NUMBER(key)))


def _line_keys(text: str) -> list[str]:
    """The keys of a YAML-like text's ``key: value`` lines; none unless such lines are at
    least three and half of its lines: a lone 'ValueError: ...' in a traceback, or a
    'Note: ...' in prose, labels a line, it does not make the text a record."""
    lines = text.count("\n") + 1
    if lines < 3:  # a line or two (a JSON document, a sentence) is no YAML-like record: no scan
        return []
    colons = text.count(": ") + text.count(":\n")
    if colons < 3 or 2 * colons < lines:
        return []
    keys = _LINE_KEY.findall(text)
    return keys if len(keys) >= 3 and 2 * len(keys) >= lines else []


def clear_ids_memo() -> None:
    """Forget the per-text ids and the per-run values (benchmarks of a cold process)."""
    _IDS.clear()
    _STRONG_IDS.clear()
    _FIELD_CODES.clear()
    _VALUES.clear()
    clear_run_tests()


# A value the agent passed to its tools this many times (calls, not mentions) names what it
# works on: the file it reads, edits and runs again, the record it looks up and then changes.
WORKED_ON_CALLS = 2

# Mentions (a text of the span each, a word of dialogue two) that make a value one the
# span repeats (``omitted_ids``).
REPEATED = 2

# A short number (three or four digits: no value by shape, values.py) that the agent or the
# user wrote, in words or a call, and that this many texts of an omitted span show is a
# reference, not a quantity (``_Tally.referred_numbers``).
REFERRED_NUMBER_TEXTS = 2
_SHORT_NUMBER = re.compile(r"(?<![\w.$])[0-9]{3,4}(?![0-9]|\.[0-9])").findall

# The newest characters of an omitted span whose ids are considered: a marker holds
# a few dozen ids, and a 100k-token cold history must not be scanned whole for them.
OMITTED_SCAN_CHARS = 60_000
_CONTEXT = 160  # characters either side of an id that say what it is


def omitted_ids(texts: Iterable[tuple[str, bool]], present: set[str], room: int, count_text: Callable[[str], int],
                query: Iterable[str] = ()) -> list[str]:
    """The ids an omitted span leaves behind, as many as ``room`` tokens hold.

    ``texts``: the span's texts, newest first, each with whether it is dialogue
    (a user or assistant message, not a tool output) and, optionally, whether the
    forwarded request repeats one of its values and whether it is the arguments of the
    agent's calls. None the forwarded request already carries (``present``, see
    :func:`ids_in`). Ranked first: the values the agent passed to WORKED_ON_CALLS calls or
    more, the things it works on (a path it read, edited and ran; an order it looked up
    and changed), which its next calls pass again; they are few. Then by whether the
    forwarded request repeats a value of the same text: a
    message a kept later one quotes (its order id, its path) is the strongest
    evidence of need, and its other values are what the next call is likely to
    copy. Then the values the span repeats (two of its texts name them, or the agent's
    or the user's words do: a mention counts twice there): a value named once in a long
    output is one line of it, a value repeated across messages is one the work turns on.
    Both come before the words of the current request that stand in the id's record (an
    order listing names "laptop" next to the laptop's product id): that is a guess, and
    a long request (a coding agent's task, its issue text) shares a few words with
    almost any line of code. Then by the calls that pass it, then those that name one record
    (``values.is_strong``) or are a record's codes (``field_codes``: its fare
    class, its airports) before other codes and names of code, then by how often the span
    mentions it (dialogue counts double: an id the agent or the user repeats is
    one the task turns on), then newest first. A later call is far more likely
    to reuse an old id than an old sentence, and an id costs a few tokens where
    its message cost hundreds. Listed are only the values something supports
    (``_Tally.supported``), and with them the short numbers the agent referred to
    (``_Tally.referred_numbers``).
    """
    tally = _Tally(tuple(query))
    budget = OMITTED_SCAN_CHARS
    for text, dialogue, *flags in texts:
        if budget <= 0:
            break
        text = text[-budget:]
        budget -= len(text)
        tally.read(text, dialogue, present, bool(flags and flags[0]), len(flags) > 1 and flags[1])
    chosen: list[str] = []
    used = 0
    for value in tally.ranked():
        if not tally.supported(value):
            continue
        cost = count_text(" " + value)
        if used + cost > room:
            break
        chosen.append(value)
        used += cost
    return chosen


class _Tally:
    """The values of an omitted span: per value, the most request words one of its
    records holds, its mentions, and when it was first seen."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.words = words
        # value -> [in a text the forwarded request quotes, query words around it,
        #           names one record (values.is_strong) or is a record's code
        #           (field_codes), mentions, first seen, calls that pass it]
        self.best: dict[str, list[int]] = {}
        # Short numbers (no value by shape: a count, a year) the agent or the user wrote, and
        # in how many texts of the span each stands: number -> [texts, said, first seen, referenced].
        self.numbers: dict[str, list[int]] = {}

    def read(self, text: str, dialogue: bool, present: set[str], referenced: bool = False,
             called: bool = False) -> None:
        """Every value of ``text`` the forwarded request does not carry; a mention counts
        once per text, twice in dialogue (a value the agent or the user repeats is one
        the task turns on). ``referenced``: the forwarded request repeats a value of this
        text (a kept later message quoted it), so its other values rank first; ``called``:
        ``text`` is the arguments of the agent's calls."""
        words, best = self.words, self.best
        lowered = text.lower() if words else ""
        yaml = bool(_line_keys(text))
        # A JSON object is bounded by its braces, a line of plain text by its ends; a
        # YAML-like record spans lines, and its ids' context is the characters around them.
        bounds = ("{", "}") if text.lstrip()[:1] in ("{", "[") else ("\0", "\0") if yaml else ("\n", "\n")
        counted: set[str] = set()
        record_matches: dict[str, int] = {}  # the values of one JSON object share its record
        self._read_numbers(text, dialogue or called, referenced)
        readable = set(text_ids(text))  # memoised: a masked output's values were read already
        readable -= present
        if not readable:
            return
        # A record's codes rank with its ids: read where a record may stand (JSON, a repr, YAML).
        codes = set(field_codes(text)) if '"' in text or "':" in text or yaml else ()
        for start, run in value_spans(text):
            for value in _VALUES[run]:
                if value not in readable:
                    continue
                matches = 0
                if words:
                    record = _record(lowered, start, start + len(run), *bounds)
                    matches = record_matches.get(record, -1)
                    if matches < 0:
                        matches = record_matches[record] = sum(map(record.__contains__, words))
                entry = best.get(value)
                if entry is None:
                    entry = best[value] = [referenced, matches, is_strong(value) or value in codes, 0, len(best), 0]
                else:
                    entry[0] |= referenced
                    entry[2] |= value in codes
                    if matches > entry[1]:  # another mention sits in a more telling record
                        entry[1] = matches
                if value not in counted:
                    counted.add(value)
                    entry[3] += 2 if dialogue else 1
                    entry[5] += called

    def _read_numbers(self, text: str, said: bool, referenced: bool) -> None:
        numbers = self.numbers
        for number in dict.fromkeys(_SHORT_NUMBER(text)):
            entry = numbers.get(number)
            if entry is None:
                entry = numbers[number] = [0, 0, len(self.best) + len(numbers), 0]
            entry[0] += 1
            entry[1] |= said
            entry[3] |= referenced

    def supported(self, value: str) -> bool:
        """Whether something says a value matters: a call passed it, the span repeats it
        (or the agent's or the user's words name it), request words stand around it, or it
        names one record (``values.is_strong``, a record's code). A name of code that one
        line of one output prints is one of the hundreds a listing or a traceback prints: a
        marker lists it at a cost every later step pays, and the next call rarely wants it."""
        entry = self.best[value]
        return entry[5] > 0 or entry[3] >= REPEATED or entry[1] > 0 or bool(entry[2])

    def referred_numbers(self) -> None:
        """The short numbers the agent or the user wrote, in words or a call, that another
        text of the span shows too, join the values (as ones that name one record): no value
        by shape (a count, a year), such a number is a reference: the line an agent read or
        will edit (its ``sed -n '790,837p'``, a reader's offset, and the listing's ``837``),
        the line its words name ("line 808") in the output that printed it. Whether the
        forward shows the same digits elsewhere says nothing of this line."""
        best = self.best
        for number, (texts, said, seen, referenced) in self.numbers.items():
            if said and texts >= REFERRED_NUMBER_TEXTS and number not in best:
                best[number] = [referenced, 0, True, texts, seen, 0]

    def ranked(self) -> list[str]:
        self.referred_numbers()
        best = self.best
        return sorted(best, key=lambda v: (-(best[v][5] >= WORKED_ON_CALLS), -best[v][0], -(best[v][3] >= REPEATED),
                                           -best[v][1], -best[v][5], -best[v][2], -best[v][3], best[v][4]))


def _record(text: str, start: int, end: int, opening: str, closing: str) -> str:
    """What an id stands in: its JSON object (up to the first brace either side) or
    its line, at most _CONTEXT characters either side. An order listing's item names
    its product and options next to its ids. In a long flat object (a catalogue of
    name: id pairs on one line) neither brace is near: the record is the id's own
    entry, between the separators either side, or every neighbour's name would count
    for it. (With one brace near, the id is in an object of its own, whose window
    still holds its name: an order item's product id beside its name and options.)"""
    lo, hi = max(0, start - _CONTEXT), end + _CONTEXT
    left, right = text.rfind(opening, lo, start), text.find(closing, end, hi)
    if left < 0 and right < 0 and opening == "{":
        left, right = text.rfind(", ", lo, start), text.find(", ", end, hi)
    return text[left + 1 if left >= 0 else lo: right if right >= 0 else hi]


def ids_in(texts: Iterable[str]) -> set[str]:
    """Every id-like value of some texts (as :func:`kept_values` reads them), in one
    pass over all their runs: a forwarded request is hundreds of short texts. Records'
    field names count too: a value the forward shows as a key is present all the same."""
    return set(chain.from_iterable(map(_VALUES.__getitem__, set(chain.from_iterable(
        map(value_runs, texts, repeat(False)))))))
