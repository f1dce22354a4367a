"""A text's count summed over its space-led pieces is the count of the whole text.

``token_pieces.PieceCounter`` counts each distinct piece once and adds; the target
is a promise in those numbers, so the sum must be the whole text's count in both
encodings and with both engines, whatever the text. These tests hold it so on
text built around the cut (spaces after whitespace, newlines, tabs, Unicode
spaces, contractions, digit runs, '/' after a newline, symbols, scripts without
spaces) and on every message text of the shipped dev sessions; and they check the
pieces are counted once each, ids of one shape once together, and that the memo
stays bounded.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.pruning import token_pieces
from gateway.pruning.messages import message_token_text
from gateway.pruning.token_pieces import PieceCounter
from gateway.pruning.tokens import text_counter

ROOT = Path(__file__).resolve().parents[3]
ENGINES = ("rs-bpe", "tiktoken")
PIECES = st.sampled_from([
    " ", "  ", " \n", "\n ", "\n", "\r\n", "\t", "\t ", "\u00a0", "\u00a0 ", "\u3000", "\u2028", "\x1c", "\x0b",
    "a", "Z", "ab", "Hello", "0", "123", "4567", ".", ",", ":", "\"", "{", "}", "[", "]", "/", "./", "'s", "'LL",
    "'re", "é", "中文", "д", "😀", "\u0301", "\u200b", "’", "<|endoftext|>", "#W4219264", "\"order_id\":",
    # Digits, counted by their shape in ASCII text: beside letters, symbols, whitespace and
    # other scripts' numerals (which a text beyond ASCII keeps as they are).
    "9", "07", "1.5", "$12", "x1", "1e5", "12\n", "\t7", "-3", "2²", "٣", "１", "½", "Ⅻ",
])
# ASCII text thick with digits: the texts whose digits are written 0 before they are counted.
DIGITS = st.text(alphabet=" \n\t\r0123456789.,:;-+/\"'#$%_()[]{}abcdexyzABXYZ", max_size=200)
TEXTS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200) | DIGITS


def whole(text: str, engine: str) -> tuple[int, int]:
    return text_counter("o200k_base", engine)(text), text_counter("cl100k_base", engine)(text)


@pytest.fixture(scope="module", params=ENGINES)
def engine(request) -> str:
    if request.param == "rs-bpe":
        pytest.importorskip("rs_bpe.bpe", reason="rs-bpe has wheels for Linux x86-64 and arm64 only")
    return request.param


@settings(max_examples=400, deadline=None)
@given(text=TEXTS)
@example(text="")
@example(text=" ")
@example(text="a  b")
@example(text="x\n y")
@example(text="it 's a  '  s")
@example(text="end.\n /path and 12 345 6789")
@example(text="a\ud800 b")
@example(text='{"id": "4582956489", "price": 1234.05, "at": "2024-05-01T10:00:00"}')
@example(text="1\t\t22 333 4444\n\n55555 ,666666")
def test_the_sum_of_the_pieces_is_the_whole_count(engine: str, text: str) -> None:
    # A fresh counter (the memo empty) and a warm one (the pieces seen in other texts) agree with the whole.
    warm = _WARM.setdefault(engine, PieceCounter(*(text_counter(e, engine) for e in ("o200k_base", "cl100k_base"))))
    cold = PieceCounter(text_counter("o200k_base", engine), text_counter("cl100k_base", engine))
    assert cold(text) == warm(text) == whole(text, engine)


_WARM: dict[str, PieceCounter] = {}


def test_the_dev_sessions_texts_count_as_whole_texts(engine: str) -> None:
    texts = {message_token_text(m) for name in ("airline", "coding", "telecom")
             for line in gzip.open(ROOT / f"bench/data/dev-sessions-{name}.jsonl.gz", "rt")
             for m in json.loads(line)["messages"]}
    counter = PieceCounter(text_counter("o200k_base", engine), text_counter("cl100k_base", engine))
    assert [counter(t) for t in texts] == [whole(t, engine) for t in texts]


def test_each_distinct_piece_is_counted_once() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text)

    counter = PieceCounter(count)
    counted.clear()  # what it counted to check the digits (none are one token here: they stay)
    assert counter('{"id": 1, "id": 2}') == (18, 18)
    assert counter('{"id": 2}') == (9, 9)
    assert counted == ['{"id":', " 1,", ' "id":', " 2}"]  # the second text's pieces were all seen
    # A space after whitespace may sit inside a pre-token: that text is counted whole.
    counted.clear()
    assert counter("a  b") == (4, 4) and counted[-1] == "a  b"


def test_ids_of_one_shape_are_counted_once(engine: str) -> None:
    counted: list[str] = []

    def recording(encoding: str):
        count = text_counter(encoding, engine)

        def record(text: str) -> int:
            counted.append(text)
            return count(text)
        return record

    counter = PieceCounter(recording("o200k_base"), recording("cl100k_base"))
    assert counter._digits_alike  # each string of one to three digits is one token in both
    counted.clear()
    first = '{"order_id": "#W4582956", "amount": 196.15}'
    assert counter(first) == whole(first, engine)
    assert counted and all(not set(text) & set("123456789") for text in counted)  # written 0
    counted.clear()
    second = '{"order_id": "#W3613716", "amount": 235.13}'
    assert counter(second) == whole(second, engine)
    assert counted == []  # the same shape: nothing counted anew
    beyond_ascii = "’ 4582956"
    assert counter(beyond_ascii) == whole(beyond_ascii, engine) and " 4582956" in counted  # digits kept


def test_the_memo_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(token_pieces, "MAX_PIECES", 10)
    counter = PieceCounter(len)
    text = " ".join(f"w{i}" for i in range(50)) + " " + "x" * (token_pieces.MAX_PIECE_CHARS + 1)
    assert counter(text) == (len(text), len(text))
    assert len(counter._spaced) <= 10 and all(len(p) <= token_pieces.MAX_PIECE_CHARS for p in counter._spaced)
