"""The token loop in C (``_token_scan``) reads exactly what its Python twin reads.

``token_scan.scan`` and ``tokens`` run in C where the extension is built
(``text_features.NATIVE``), in Python elsewhere; the scorer's features, and so the
pruned bytes, must not depend on which. These tests hold the C functions to the
Python ones (and to the regex) on generated text, on the shapes where a split and
a regex part ways ('#' and '-' at a token's edge, non-ASCII word characters and
separators, CJK, e-mails, quotes and quoted strings), and on the real texts of the shipped dev
sessions: the same tokens, the same counts in the same order, the same entities.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.pruning import text_features, token_scan

native = pytest.importorskip("gateway.pruning._token_scan", reason="the C extension is not built here")

ROOT = Path(__file__).resolve().parents[3]
PIECES = st.sampled_from([
    "a", "Z", "9", "123", "_", "#", "##", "#-", "-", "--", ".", "@", " ", "\n", "\"", "'", ":", ",", "{", "}",
    "é", "中文", "’", "“", "—", "\u00a0", "①", "٣", "²", "ǅ", "İ", "😀", "#W1234567", "e-mail", "noah.ito@example.com",
    "-5", "12.99", "order_id", "a-b", "x#y", "- item", "# H", "Never", "don't", "must not", "error", "failed",
    "painted", "studies", "McDonald", "getUser", "src/a.py", "\"quoted value\"", "不要", "必须", "SFO", "Ünïcode",
])
TEXTS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200)


def same_scan(text: str) -> None:
    memo = text_features._TOKEN_INFO
    ours, theirs = native.scan(text, memo), token_scan.python_scan(text, memo)
    assert ours == theirs
    # Equal dicts and sets may still iterate in another order; the scorer's sums follow it.
    assert list(ours[0].items()) == list(theirs[0].items())
    assert list(ours[2]) == list(theirs[2])
    # Reading plain tokens in C on their first sight (the memos start empty) changes nothing.
    plain = native.scan(text, text_features._WordMemo(text_features._token_info), text_features._PLAIN_WORDS)
    assert plain == theirs and list(plain[0].items()) == list(theirs[0].items()) and list(plain[2]) == list(theirs[2])


def test_the_native_scan_is_in_use_where_it_is_built():
    assert text_features.NATIVE and token_scan.scan is native.scan and token_scan.tokens is native.tokens
    assert token_scan.quoted is native.quoted


@settings(max_examples=1000, deadline=None)
@given(TEXTS)
@example("")
@example("#")
@example("a#")
@example("##a #-a a#b -a-b")
@example("é#中 #é")
def test_tokens_are_the_regex_tokens(text):
    assert native.tokens(text) == token_scan.python_tokens(text) == token_scan.TOKEN.findall(text)


@settings(max_examples=1000, deadline=None)
@given(TEXTS | st.lists(st.sampled_from(['"', "a", "\n", "é", " ", "b" * 30]), max_size=40).map("".join))
@example('""abc"')
@example('"' + "x" * 60 + '"' + "y" * 61 + '"')
@example('"ab"cd"ef"')
def test_quoted_strings_are_the_regex_ones(text):
    assert native.quoted(text) == token_scan.QUOTED.findall(text)


@settings(max_examples=1000, deadline=None)
@given(TEXTS)
@example(" ".join(f"w{i % 3000} é{i % 7} 中{i % 500}-x #{i}" for i in range(9000)))  # the table of tokens grows
def test_scan_sums_what_the_python_scan_sums(text):
    same_scan(text)


def test_scan_calls_the_memo_for_a_token_it_lacks():
    class Memo(dict):
        def __missing__(self, token):
            self[token] = value = ((token.lower(),), (token,) if token[0].isupper() else (), len(token))
            return value

    memo = Memo()
    assert native.scan("Ab ab Ab", memo) == ({"ab": 3}, 3, {"Ab"}, 2)
    assert list(memo) == ["Ab", "ab"]


# Plain tokens (ASCII letters, digits, '_'), shaped to reach every branch of the stemmer
# (its suffixes, "ss", the length floors), of the prefix term and of the entities (ids,
# names, snake_case), beside stopwords, single characters and capitals anywhere.
PLAIN = st.lists(st.sampled_from(list("aeiosdgylnt") + ["ing", "ly", "ed", "ies", "ied", "ss", "s"]),
                 min_size=1, max_size=5).map("".join) | st.from_regex(r"[0-9]{1,8}", fullmatch=True) | \
    st.sampled_from(sorted(text_features.STOPWORDS)).map(lambda w: st.sampled_from([w, w.title(), w.upper()])).flatmap(
        lambda s: s) | st.from_regex(r"[a-z]{1,14}", fullmatch=True) | st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True) | \
    st.lists(st.sampled_from(["_", "a", "b", "Q", "7", "ies", "ing", "s"]), min_size=1, max_size=7).map("".join)


def read_in_c(token: str):
    """What the C scan stores for ``token`` on its first sight, given the plain words."""
    memo = text_features._WordMemo(text_features._token_info)
    native.scan(token, memo, text_features._PLAIN_WORDS)
    return memo[token]


@settings(max_examples=3000, deadline=None)
@given(PLAIN)
@example("studies")
@example("classes")
@example("dies")
@example("happily")
@example("never")
@example("failed")
@example("7")
@example("12")
@example("123")
@example("12345")
@example("Order")
@example("The")
@example("order_id")
@example("_order_id")
@example("order__id")
@example("Order_id")
@example("W42")
@example("item_ids")
@example("getUser")
@example("ORDERS")
def test_the_c_scan_reads_a_plain_token_as_text_features_does(token):
    assert read_in_c(token) == text_features._token_info(token)


def test_the_c_scan_leaves_other_tokens_to_the_memo():
    asked = []

    class Memo(text_features._WordMemo):
        def __missing__(self, token):
            asked.append(token)
            return super().__missing__(token)

    memo = Memo(text_features._token_info)
    native.scan("Order #W42 e-mail café 中文 x-9 order_id 12345", memo, text_features._PLAIN_WORDS)
    assert asked == ["#W42", "e-mail", "café", "中文", "x-9"]
    assert memo == {tok: text_features._token_info(tok) for tok in
                    ["Order", "#W42", "e-mail", "café", "中文", "x-9", "order_id", "12345"]}


def test_the_c_scan_keeps_the_memo_within_its_bound():
    memo = text_features._WordMemo(text_features._token_info, max_entries=2)
    stopwords, flags, _ = text_features._PLAIN_WORDS
    counts = native.scan("alpha bravo charlie delta", memo, (stopwords, flags, 2))
    assert counts == token_scan.python_scan("alpha bravo charlie delta", text_features._WordMemo(text_features._token_info))
    assert list(memo) == ["alpha", "bravo"]


# What analyse reads entity forms of: quoted strings, e-mails, file names; tags ('#', '##'),
# stopwords in any case, short strings, beyond ASCII.
FORM_STRINGS = st.lists(st.sampled_from(["#", "a", "B", "9", " ", ".", "-", "_", "@", "é", "İ", "中", "the", "The"]),
                        max_size=8).map("".join) | \
    st.sampled_from(sorted(text_features.STOPWORDS)).flatmap(lambda w: st.sampled_from([w, w.upper(), "#" + w])) | \
    st.text(max_size=12)


@settings(max_examples=3000, deadline=None)
@given(st.lists(FORM_STRINGS, max_size=6))
def test_entity_forms_are_text_features_forms(strings):
    memo = text_features._WordMemo(text_features._entity_form)
    forms = native.entity_forms(strings, memo, text_features.STOPWORDS, 100)
    assert forms == [text_features._entity_form(s) for s in strings]
    assert memo == {s: text_features._entity_form(s) for s in strings}


def test_entity_forms_leave_strings_beyond_ascii_to_the_memo_within_its_bound():
    asked = []

    class Memo(text_features._WordMemo):
        def __missing__(self, string):
            asked.append(string)
            return super().__missing__(string)

    memo = Memo(text_features._entity_form, max_entries=3)
    strings = ["Order ID", "café", "#W42", "The", "x9"]
    assert native.entity_forms(strings, memo, text_features.STOPWORDS, 3) == \
        token_scan.python_entity_forms(strings, text_features._WordMemo(text_features._entity_form), frozenset(), 0)
    assert asked == ["café"]
    assert list(memo) == ["Order ID", "café", "#W42"]


def test_scan_refuses_a_malformed_memo_entry():
    with pytest.raises(TypeError):
        native.scan("a", {"a": ("a", (), 0)})


def real_texts() -> list[str]:
    """The messages of the shipped dev sessions (tool outputs in JSON, user and agent turns)."""
    texts = []
    for name in ("dev-sessions-coding.jsonl.gz", "dev-sessions-airline.jsonl.gz", "dev-sessions-telecom.jsonl.gz"):
        for line in gzip.open(ROOT / "bench" / "data" / name, "rt"):
            for message in json.loads(line)["messages"]:
                content = message.get("content")
                texts += [content] if isinstance(content, str) else []
                texts += [call["function"]["arguments"] for call in message.get("tool_calls") or []]
    return texts


def test_real_texts_read_alike():
    texts = real_texts()
    assert len(texts) > 1000
    text_features.clear_word_cache()
    for text in texts:
        assert native.tokens(text) == token_scan.python_tokens(text)
        assert native.quoted(text) == token_scan.QUOTED.findall(text)
        same_scan(text)
