"""The split-based token and id readers read exactly what their regexes read.

``runs.RunSplitter`` replaces a regex scan with ``bytes.translate`` + ``split``
on the hot path of every cold prune. It is only a faster way to the same
tokens: the scorer's features and the ids in masks and markers must not move
(they are part of frozen, cached bytes). These tests hold the fast readers equal
to the regexes on the shapes where a split and a regex part ways: '#' and '-'
at the edge of a token, non-ASCII separators and word characters, ids inside
e-mails and amounts.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.pruning import ids, token_scan, value_runs
from gateway.pruning.runs import RunSplitter
from gateway.pruning.values import is_strong, values_of

PIECES = st.sampled_from([
    "a", "Z", "9", "123", "4567", "_", "#", "##", "#-", "-", "--", ".", "+", "@", "?", " ", "\n", "\t",
    "\x1c", "\"", ":", ",", "{", "}", "é", "中", "’", "“", "—", "\u00a0", "\u2003", "①", "٣", "²", "ǅ", "İ",
    "😀", "#W1234567", "e-mail", "x@y.com", "-5", "1.5", "12.99", "order_id", "a-b", "x#y", "- item", "# H",
    "/", "$", "://", "SFO", "ZK4P2M", "getUser", "a.py", "14:30", "$5", "\"k\": ",
])
TEXTS = st.lists(PIECES, max_size=50).map("".join) | st.text(max_size=120)

EDGE_CASES = [
    "", "#", "-", "#-", "-#", "##a", "#-a", "a#", "a#b", "a-", "-a-b", "# Heading", "- item\n- other",
    "x -5 and -12.5", "order #W4219264 (watches)", "it’s the “metal” strap — #W1", "café #W1234 ①②③",
    "noah.ito4296@example.com", "{\"price\": -12.5, \"item_id\": \"9112290483\"}", "İstanbul 12345",
    "see src/app/main.py:42 and https://example.com/a/b", "flight SFO→JFK, locator ZK4P2M at 14:30", "$12.50 USD",
]


def regex_ids(text: str, *, field_keys: bool = False) -> tuple[str, ...]:
    """The reading the split replaces: every run that may hold a value, read by the value
    rule, JSON keys left out (kept with ``field_keys``)."""
    seen: dict[str, None] = {}
    keys = ids._field_keys(text) if not field_keys else frozenset()
    if "\\" in text:  # a quoted JSON string's escapes split like the space they stand for
        text = value_runs.ESCAPE.sub("  ", text)
    for token in value_runs.ID_TOKEN.findall(text):
        for value in values_of(token):
            if value not in seen and value not in keys:
                seen[value] = None
    return tuple(seen)


def test_runs_split_at_separators_and_keep_the_extra_characters():
    splitter = RunSplitter("#.+@-")
    assert splitter.split("mail noah.ito@example.com, order #W42") == ["mail", "noah.ito@example.com", "order", "#W42"]
    assert splitter.split("it’s “x” — y") == ["it", "s", "x", "y"]  # non-ASCII punctuation separates
    assert splitter.split("it’s café") is None  # a non-ASCII word character: the caller's regex decides


def test_question_mark_cannot_be_a_run_character():
    with pytest.raises(ValueError):
        RunSplitter("?")


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_read_as_the_regexes_do(text):
    ids.clear_ids_memo()
    assert token_scan.python_tokens(text) == token_scan.TOKEN.findall(text)
    assert ids.text_ids(text) == regex_ids(text)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_tokens_are_the_regex_tokens(text):
    assert token_scan.python_tokens(text) == token_scan.TOKEN.findall(text)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_ids_are_the_regex_ids(text):
    ids.clear_ids_memo()
    assert ids.text_ids(text) == regex_ids(text)


@settings(max_examples=600, deadline=None)
@given(st.one_of(TEXTS, st.sampled_from(EDGE_CASES + ['{"a/b": "x@y.io", "path": "src/a.py", "c/d": 1}'])))
def test_strong_ids_are_the_ids_that_name_one_record(text):
    """Masks read only runs with a digit, '@' or '/': the same values, in the same order, as
    reading every run and keeping those values.is_strong accepts; read before or after text_ids."""
    ids.clear_ids_memo()
    alone = ids.strong_ids(text)
    assert alone == tuple(filter(is_strong, regex_ids(text)))
    ids.text_ids(text)
    assert ids.strong_ids(text) == alone


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXTS, max_size=6))
@example(['#-a"://'])
def test_ids_in_is_the_union_of_each_texts_ids(texts):
    # Field names included: what a forward shows is present, key or value ('#-a":' drew this).
    assert ids.ids_in(texts) == set().union(*(regex_ids(t, field_keys=True) for t in texts))


KEY_PIECES = st.sampled_from([
    "\"", "'", ":", "\":", "':", " ", "\n", "-", "- ", "{", "}", ",", "a", "b1", "x@y.io", "src/a.py", "line_2",
    "address1", "14:30", "http://h/p", "#W1", "order_id", "é", "  ", "k: v", "\t",
])
KEY_TEXTS = st.lists(KEY_PIECES, max_size=40).map("".join)


@settings(max_examples=1000, deadline=None)
@given(KEY_TEXTS, st.lists(st.sampled_from(["a", "b1", "x@y.io", "src/a.py", "line_2", "address1", "14:30",
                                            "http://h/p", "order_id", "k", "v", "a:b", "b"]), max_size=8, unique=True))
@example('"a":":line_2":', ["line_2"])
@example("a':b'", ["a"])
def test_keys_looked_up_one_by_one_are_the_keys_collected(text, values):
    # A few values that may be field names (no digit, or a numbered word) are looked up in
    # the text (``_keys_among``); many, every key of the text is collected (``_field_keys``):
    # the same keys either way.
    values = [v for v in values if ids._DIGIT(v) is None or ids._FIELD_NUMBER(v)]
    assert ids._keys_among(text, values) == frozenset(values) & ids._field_keys(text)

