"""A text's tokens, and their features summed over it: the inner loop of ``analyse``;
and its quoted strings (``quoted``), the one regex of ``analyse`` that reads all of a JSON text.

The local scorer reads every unit of a conversation with
``text_features.analyse``. Its loop over tokens runs in C when the extension
``_token_scan`` is built (``pip install`` compiles it where a C compiler is;
docs/speed.md): about three times fewer instructions for ``analyse``. This
module is the same loop in Python, the fallback where it is not built, and
the reference the C code is tested against (tests/unit/pruning/test_token_scan.py)::

    counts, length, entities, flags = scan("order #W42 failed", token_info, plain_words)

``token_info`` maps a token to its (terms, entities, flags), computed on a
miss by its ``__missing__`` (text_features's memo); the C scan reads a plain
word or number itself on a miss, by the rule ``plain_words`` gives it (the
stopwords, the words' flags, the memo's bound). ``NATIVE`` tells which of the
two runs.
"""

from __future__ import annotations

import re
from collections import _count_elements
from typing import Mapping

from gateway.pruning.runs import RunSplitter

TOKEN = re.compile(r"#?\w[\w\-]*", re.UNICODE)
# The same split in C for ASCII texts (runs.py).
_TOKEN_RUNS = RunSplitter("#-")

# A quoted string, up to 60 characters: a JSON key or value an agent may reuse.
QUOTED = re.compile(r"\"([^\"\n]{2,60})\"")
python_quoted = QUOTED.findall

TokenInfo = tuple[tuple[str, ...], tuple[str, ...], int]
# (stopwords, word -> flags, the memo's bound): what the C scan reads a plain token with.
PlainWords = tuple[frozenset[str], dict[str, int], int]


def python_tokens(text: str) -> list[str]:
    """``TOKEN.findall(text)``, about twice as fast on (mostly) ASCII text."""
    split = _TOKEN_RUNS.translated(text)
    if split is None:
        return TOKEN.findall(text)
    if "#" in split:
        # Each '#' starts a token ("a#b" is "a", "#b"), but only before a word
        # character: a bare "#" is nothing, "#-x" is "x" (then as a leading '-').
        split = split.replace("#", " #").replace("#-", " -").replace("# ", "  ")
        if split.endswith("#"):
            split = split[:-1]
    if "-" in split:
        # A token cannot start with '-' ("- item", "-5").
        while " -" in split:
            split = split.replace(" -", "  ")
        split = split.lstrip("-")
    return split.split()


def python_scan(text: str, token_info: Mapping[str, TokenInfo],
                plain_words: PlainWords | None = None) -> tuple[dict[str, int], int, set[str], int]:
    """Each term's occurrences in ``text``, their sum, the entities, the flags or-ed.
    ``plain_words`` is for the C scan, which reads a plain word or number ``token_info``
    lacks itself (``_token_scan.c``); here the memo's ``__missing__`` reads every token."""
    counts: dict[str, int] = {}
    found: set[str] = set()
    flags = 0
    # Count tokens first (in C): JSON keys and common words repeat a lot, so the
    # per-token work below runs once per distinct token. Plain dict arithmetic:
    # Counter's __missing__ is a Python call per new key (and its constructor, Python
    # code with an ABC check, costs more than the count of a short text).
    distinct: dict[str, int] = {}
    _count_elements(distinct, python_tokens(text))
    for tok, n in distinct.items():
        t, e, f = token_info[tok]
        for term in t:
            counts[term] = counts.get(term, 0) + n
        if e:
            found.update(e)
        flags |= f
    return counts, sum(counts.values()), found, flags


def python_entity_forms(strings: list[str], memo: Mapping[str, str | None], stopwords: frozenset[str],
                        max_entries: int) -> list[str | None]:
    """The entity form of each string (quoted strings, e-mails, file names) through ``memo``,
    whose ``__missing__`` computes a form (text_features's). ``stopwords`` and ``max_entries``
    are for the C twin, which reads an ASCII string the memo lacks itself."""
    return list(map(memo.__getitem__, strings))


try:
    from gateway.pruning._token_scan import entity_forms, quoted, scan, tokens
    NATIVE = True
except ImportError:  # not built (no compiler where it was installed): the same in Python
    quoted, scan, tokens, entity_forms = python_quoted, python_scan, python_tokens, python_entity_forms
    NATIVE = False
