"""The shapes of exact values: what, of one run of characters, a later step copies verbatim.

An agent's next call copies values, not sentences: an order or ticket number,
a record locator, an e-mail, a file path and line, a function name, an error
code. What makes a string such a value is its shape, the same in every domain:
it is not a word of the language (digits inside it, capitals throughout or in
its middle, underscores, an ``@``, slashes, a scheme), and it is not a plain
quantity (a count, a year, a price, ``16GB``). Each rule below states that
reason; none names a format of one data set::

    values_of("noah.ito@example.com")   # ('noah.ito@example.com',)   e-mail
    values_of("ZK4P2M")                 # ('ZK4P2M',)                 record locator
    values_of("src/app/main.py:42")     # ('src/app/main.py:42',)     path and line
    values_of("2019")                   # ()                          a year or a count
    values_of("Hello")                  # ()                          a word

Runs are what ``RUN_CHARS`` joins (word characters and ``RUN_CHARS``); the
caller splits texts into runs (``ids.py``, in C where it can). Names of
people and places are words by shape: the scorer reads them as entities
(``text_features``), the value reader does not.
"""

from __future__ import annotations

import re

# Characters a value may hold besides [A-Za-z0-9_]: ids (#W42, a-b-c), e-mails (+ @ .),
# paths and URLs (/ :), times (14:30), amounts with a currency sign ($).
RUN_CHARS = "#.+@-:/$"
_EDGE = ".-:/+"  # sentence punctuation and separators around a value, never part of it

_DIGIT = re.compile(r"[0-9]").search
_THREE_DIGITS = re.compile(r"[0-9]\D*[0-9]\D*[0-9]").search
_LETTER = re.compile(r"[^\W\d_]").search
_STRONG = re.compile(r"[0-9@/]").search
# A plain quantity: a count, a year, a price (up to four digits, or two decimals).
_AMOUNT = re.compile(r"-?\d{1,4}(?:\.\d+)?|-?\d+\.\d{1,2}")
# A number with a unit or an ordinal suffix: 10am, 3rd, 16GB, 5km, 2x, 15-inch, 1080p. A single
# capital after a number is not a unit but a place in a row (seat 12A, gate 4B): a value.
_QUANTITY = re.compile(r"\d+(?:\.\d+)?(?:-?[a-z][A-Za-z]{0,9}|[A-Z][A-Za-z]{1,3})")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# A file name: its extension says so (source, data, docs, archives, logs, images).
_FILE = re.compile(r"[\w.-]*\w\.(?:py|pyi|js|mjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|scala|"
                   r"json|ya?ml|toml|ini|cfg|conf|env|lock|md|rst|txt|csv|tsv|html?|css|xml|sql|sh|bash|log|"
                   r"pdf|png|jpe?g|gif|svg|zip|tar|gz)(?::\d+(?::\d+)?)?")
# An identifier joined by dots, parts of two characters or more: modules, hosts, attributes.
_DOTTED = re.compile(r"[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+")
# Words of code: snake_case or SCREAMING_SNAKE (one underscore at least), camelCase, PascalCase
# with a capital inside.
_SNAKE = re.compile(r"_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*")
_CAMEL = re.compile(r"[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*")
# A code in capitals: airport, currency, locator, status codes (SFO, USD, KXJTQE, ENOENT).
_CAPS = re.compile(r"[A-Z][A-Z0-9]{2,11}(?:-[A-Z0-9]+)*")
# Words written in capitals in prose and logs, which are not codes: emphasis and log levels.
_CAPS_WORDS = frozenset("""
A AN AND ARE AS AT BE BUT BY FOR FROM HAS HAVE IF IN IS IT NO NOT OF ON OR SO THE TO WAS WE WITH YOU ALL ANY
NOTE TODO FIXME WARNING WARN ERROR INFO DEBUG TRACE FATAL CRITICAL IMPORTANT ALERT PLEASE THANKS YES OK OKAY
NEW OLD NOW ONLY ALWAYS NEVER MUST SHOULD NONE NULL TRUE FALSE NAN END STOP UPDATE DONE FAILED PASSED PASS FAIL
""".split())


def values_of(run: str) -> tuple[str, ...]:
    """The exact values one run holds (mostly none, a word; a run of ``key:value`` may
    hold one after its colon)."""
    if run.isalpha():  # most runs: a word, or one capitalised
        if run.islower() or (run[1:].islower() and run[0].isupper()):
            return ()
    elif run.isascii() and run.isdigit():  # a number: a count or a year, or five digits and more
        return (run,) if len(run) > 4 else ()
    value = run.strip(_EDGE) if run[:1] != "/" else "/" + run[1:].rstrip(_EDGE)
    if len(value) < 2:
        return ()
    if ":" not in value:
        return (value,) if _is_value(value) else ()
    head, colon, _ = value.partition(":")
    if head.isalpha() and value[len(head):len(head) + 3] != "://":
        # key:value, a log's LEVEL:name:message: the parts, not the whole
        return tuple(v for part in value.split(":") for v in values_of(part))
    return (value,) if _is_value(value) else ()


def is_strong(value: str) -> bool:
    """A value that names one record: with a digit (an order, a ticket, a line), an
    address (@) or a path (/). Codes in capitals and names of code more often name a
    kind of thing (USB, HEPA, a field), so where room is short they come after."""
    return _STRONG(value) is not None


# ``is_strong``'s own test, for ``filter``: a match is true, None false, so
# ``filter(strong_match, values)`` keeps what ``filter(is_strong, values)`` keeps, with a
# C call per value where ``is_strong`` costs a Python call (every tool output's values
# are read this way for its mask).
strong_match = _STRONG


class ValueMemo(dict):
    """``memo[run]``: the values of a run, computed once per distinct run (``map(memo.__getitem__,
    runs)`` runs in C for runs seen before). Vocabularies are small, so it stays warm; bounded."""

    def __init__(self, max_entries: int = 500_000) -> None:
        super().__init__()
        self._max_entries = max_entries

    def __missing__(self, run: str) -> tuple[str, ...]:
        # A number is the commonest miss (ids are unique): read here, without a call.
        found = ((run,) if len(run) > 4 else ()) if run.isdigit() and run.isascii() else values_of(run)
        if len(self) < self._max_entries:
            self[run] = found
        return found


def _is_value(value: str) -> bool:
    if "@" in value:
        # An e-mail, or a handle (@alice): an address a message is sent to.
        return _EMAIL.fullmatch(value) is not None or (value[0] == "@" and len(value) >= 3 and "@" not in value[1:])
    if "://" in value:
        return True  # a URL
    if "/" in value and _is_path(value):
        return True
    if _DIGIT(value) is not None:
        return _with_digits(value)
    if value[0] == "#":
        return len(value) >= 3 and value[1:].replace("-", "").replace("_", "").isalnum()  # a tag or channel (#general)
    if _FILE.fullmatch(value) or _DOTTED.fullmatch(value):
        return True
    if _SNAKE.fullmatch(value) or _CAMEL.fullmatch(value):
        return True
    return _CAPS.fullmatch(value) is not None and value not in _CAPS_WORDS


def _with_digits(value: str) -> bool:
    """A value with a digit in it: an id or code, unless it is a plain quantity. Three
    digits or more (an order number, a date, a time, a zip code), or one or two
    beside letters (a locator, a seat, a version tag); a count, a year, a price or
    a measure is not copied as a value."""
    if value[0] == "$":
        return _AMOUNT.fullmatch(value[1:]) is not None or value[1:].replace(",", "").replace(".", "").isdigit()
    if _AMOUNT.fullmatch(value) or _QUANTITY.fullmatch(value):
        return False
    if _THREE_DIGITS(value) is not None:
        return True
    return len(value) >= 3 and _LETTER(value) is not None


def _is_path(value: str) -> bool:
    """A file path or route: rooted (/etc/hosts, ./run.sh, ~/x), or two slashes at least,
    or one slash and a file name (src/app.py); not 'and/or' or a fraction. A lone rooted
    word (/output, /div) is what a closing tag leaves once its brackets split the run
    (``</output>``, in any markup a tool prints): a path there names one place at most, and a
    name plus one slash is no record's value."""
    if value[0] in "/.~" and len(value) >= 3 and (value[0] != "/" or value.count("/") >= 2 or "." in value):
        return True
    return value.count("/") >= 2 or _FILE.search(value) is not None
