"""The runs of a text that may hold a value: what ``ids.py`` reads values from.

A value (``values.py``) lies within one run of ``\\w`` and ``values.RUN_CHARS``, and every
value rule needs one of a few characters in it. Most runs of a tool output are plain
words that have none, so the readers of ids look only at the runs that may hold one::

    value_runs('{"order_id": "#W42", "status": "pending"}', False)  # ['order_id', '#W42']
    value_runs('{"order_id": "#W42", "status": "pending"}', True)   # ['#W42']: strong
    value_spans("see #W42")                                          # [(4, '#W42')]
    quoted_codes('{"cabin": "basic_economy", "status": "pending"}')  # ['basic_economy']

The scan runs in C when the extension ``_value_runs`` is built (``pip install``
compiles it where a C compiler is; docs/speed.md): a string is made only for a run that
passes, where the Python reading makes one per word, hashes it and looks it up. This
module is the same reading in Python, the fallback where it is not built, and the
reference the C code is tested against (tests/unit/pruning/test_value_runs.py). ``NATIVE``
tells which of the two runs.
"""

from __future__ import annotations

import re
from typing import Callable

from gateway.pruning.runs import RunSplitter
from gateway.pruning.values import RUN_CHARS

_RUN = "[\\w" + re.escape(RUN_CHARS) + "]"
# A run that may hold a value: one with a digit, a capital, '_', '@', '/', '$', '#' or a
# dot inside a word (what every value rule needs). Anchored at the start of its run and
# lazy up to that character, so a long run of lower-case letters is passed in linear
# time, and plain words never reach Python.
ID_TOKEN = re.compile(f"(?<!{_RUN}){_RUN}*?(?:[0-9A-Z_@/$#]|\\w\\.\\w){_RUN}*")
_ID_RUNS = RunSplitter(RUN_CHARS)
# Per split run: what every value rule needs (a digit, '_', '@', '/', '$', '#', a dot
# inside a word, or two capitals, or a capital after a small letter); a plain or
# capitalised word holds no value. Each branch starts at one of a few characters (the dot
# and the capital look behind them), so the engine skips the small letters between them
# instead of trying every branch at each.
MAY_HOLD = re.compile(r"[0-9_@/$#]|\.(?<=\w\.)(?=\w)|[A-Z](?<=[a-z][A-Z])|[A-Z]\w*[A-Z]").search
# What a value that names one record needs (values.is_strong: a digit, '@' or '/').
MAY_BE_STRONG = re.compile(r"[0-9@/]").search
# A newline, tab or return escape of a JSON string quoted in a text (not before a small letter).
ESCAPE = re.compile(r"\\[ntr](?![a-z])")
# A field's whole value, with what every code or name of code holds (values.py): a capital,
# '_' or '.' after its first character (a plain word, "pending" or "Sophia", is passed over).
# In JSON a string value, not a key: '"basic_economy"' before a comma, brace or bracket
# (ids.field_codes reads the other forms a record is printed in).
CODE = r"[A-Za-z_][a-z0-9+-]*[A-Z_.][\w.+-]*"
QUOTED_CODE = rf'"({CODE})"\s*[,}}\]]'
python_quoted_codes = re.compile(QUOTED_CODE).findall
_RUN_TEST_CHARS = 64


class _RunTest(dict):
    """``memo[run]``: whether a pattern finds something in a run, searched once per distinct
    run (``filter(memo.__getitem__, runs)`` runs in C for runs seen before). A search costs
    a thousand instructions and more, a lookup a tenth of that, and the texts of one
    conversation share most of their runs (its words, its field names). Bounded in
    entries, and runs over _RUN_TEST_CHARS are searched each time."""

    def __init__(self, search: Callable[[str], object], max_entries: int = 500_000) -> None:
        super().__init__()
        self._search = search
        self._max_entries = max_entries

    def __missing__(self, run: str) -> bool:
        found = self._search(run) is not None
        if len(run) <= _RUN_TEST_CHARS and len(self) < self._max_entries:  # a long run is rare: not kept
            self[run] = found
        return found


_HOLDS = _RunTest(MAY_HOLD)
_HOLDS_STRONG = _RunTest(MAY_BE_STRONG)


def runs(text: str) -> list[str]:
    """The runs of value characters of a text, split in C where it can be (runs.py). A
    JSON string quoted inside another text keeps its escapes ("...delivered.\\nRefund"):
    the escape's letter is no part of the next word, so escapes split like the space they
    stand for. Before a small letter it stays (a Windows path's "\\new_dir"): there it
    makes no value of a word either way."""
    if "\\" in text:
        text = ESCAPE.sub("  ", text)
    split = _ID_RUNS.split(text)
    return split if split is not None else ID_TOKEN.findall(text)


def python_value_runs(text: str, strong: bool) -> list[str]:
    """The distinct runs of ``text`` (``runs``), first occurrence first, that may hold a
    value (``MAY_HOLD``), or with ``strong`` one that names a record (``MAY_BE_STRONG``)."""
    return list(filter((_HOLDS_STRONG if strong else _HOLDS).__getitem__, dict.fromkeys(runs(text))))


def python_value_spans(text: str) -> list[tuple[int, str]]:
    """Every run of ``text`` as it stands (its escapes unsplit: where a value is read in
    place) that may hold a value, with its start."""
    return [(found.start(), run) for found in ID_TOKEN.finditer(text) if _HOLDS[run := found.group()]]


def clear_run_tests() -> None:
    """Forget which runs passed (benchmarks of a cold process)."""
    _HOLDS.clear()
    _HOLDS_STRONG.clear()


try:
    from gateway.pruning._value_runs import quoted_codes, value_runs, value_spans
    NATIVE = True
except ImportError:  # not built (no compiler where it was installed): the same in Python
    quoted_codes, value_runs, value_spans = python_quoted_codes, python_value_runs, python_value_spans
    NATIVE = False
