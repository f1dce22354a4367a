"""A text's count summed over its space-led pieces is the count of the whole text.

``token_pieces.PieceCounter`` counts each distinct piece once and adds; the target
is a promise in those numbers, so the sum must be the whole text's count in both
encodings and with both engines, whatever the text. These tests hold it so on
text built around the cut (spaces after whitespace, newlines, tabs, Unicode
spaces, contractions, digit runs, '/' after a newline, symbols, scripts without
spaces) and on every message text of the shipped dev sessions; and they check the
pieces are counted once each, and that the memo stays bounded.
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
])
TEXTS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200)


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
    assert counter('{"id": 1, "id": 2}') == (18, 18)
    assert counter('{"id": 2}') == (9, 9)
    assert counted == ['{"id":', " 1,", ' "id":', " 2}"]  # the second text's pieces were all seen
    # A space after whitespace may sit inside a pre-token: that text is counted whole.
    counted.clear()
    assert counter("a  b") == (4, 4) and counted[-1] == "a  b"


def test_the_memo_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(token_pieces, "MAX_PIECES", 10)
    counter = PieceCounter(len)
    text = " ".join(f"w{i}" for i in range(50)) + " " + "x" * (token_pieces.MAX_PIECE_CHARS + 1)
    assert counter(text) == (len(text), len(text))
    assert len(counter._spaced) <= 10 and all(len(p) <= token_pieces.MAX_PIECE_CHARS for p in counter._spaced)
