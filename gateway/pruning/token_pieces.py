"""A text's token counts in two encodings, summed over its space-led pieces, each distinct piece counted once.

A history repeats its words (a JSON output's keys, a record's ids, the words of
a policy) far more than its texts: the texts of a cold 100k-token prune hold
38k pieces but 6k distinct ones (a fifth of their characters). BPE counting
costs per pre-token (~2.5k instructions under rs-bpe, per encoding), so a text
is cut at its spaces, and each piece is counted once per counter and then looked up.

Why the sum is the count. Both encodings (o200k_base, cl100k_base; their
pre-tokenizer patterns are in tiktoken's ``openai_public.py``) encode each
pre-token on its own, and no pre-token holds a character other than whitespace
followed by a space: whitespace runs are pre-tokens of their own, and a word or
a run of symbols takes at most one leading character (a space among them) and
ends in letters, marks, symbols, ``\\r``, ``\\n`` or ``/``. So a space after a
non-whitespace character starts a pre-token whatever follows, the scan restarts
there as on a text of its own (the patterns look ahead only from within a
whitespace run, never behind), and the text's count is the sum of its pieces'.
A space after whitespace (``"a  b"``, ``"x\\n y"``) may be inside a pre-token:
a piece ending in whitespace (Python's ``isspace``, a superset of the patterns'
``\\s``), or empty, is *marked*, and a text with one is counted whole.
``tests/unit/pruning/test_token_pieces.py`` holds the sums to the whole counts,
both engines, on text built to break them and on the dev data's texts.

One lookup per piece, in C (``sum(map(...))``): each piece's two counts are
kept in one int, the first encoding's in the low 32 bits and the second's
above them (``_SECOND``). A marked piece stops the sum at once (``_Uncuttable``):
the pieces after it are not counted for nothing (indented code marks most of a file
view's texts, which would otherwise be counted twice, by pieces and whole).

Digits counted by their shape. Half the distinct pieces of an agent's history hold
digits (ids, prices, dates: ``"4582956489",``), most of them new to the memo though
their shapes are not. In both patterns a digit is only ever in a pre-token of one
to three digits (``\\p{N}{1,3}``, taken from the start of a run of digits; no other
alternative holds a ``\\p{N}``, and each treats all digits alike), so changing a digit
for another moves no pre-token boundary. Where every string of one to three ASCII digits
is one token (``_digits_alike``: checked on each counter itself, not assumed of its
vocabulary), an ASCII text counts as it does with its digits written 0, and is
counted so: ``' "4582956489",'`` and ``' "3613716226",'`` are one memo entry. A text
beyond ASCII keeps its digits (a digit beside another script's numeral, '1²', shares
a pre-token with it, whose count the check does not cover).
"""

from __future__ import annotations

from functools import lru_cache
from itertools import islice
from typing import Callable

_SECOND = 32      # the second encoding's count sits above the first's (texts of < 2**32 tokens)
_LOW = (1 << _SECOND) - 1
# Long pieces (a minified JSON, a base64 blob) rarely repeat and would hold their text:
# counted, not kept. The entries bound keeps a replica's memory flat: at most ~9 MB a memo
# (four per process: two encodings, heads and the rest), ~5 MB with a history's usual
# pieces; a cold 100k-token prune fills ~7k entries.
MAX_PIECE_CHARS = 64
MAX_PIECES = 50_000


# ASCII digits written 0 (see the module's docstring): on the text's bytes, a table
# lookup a byte in C (str.translate looks each distinct character up in a dict, per call).
_ZEROED = bytes.maketrans(b"123456789", b"000000000")


# Per counter, once a process: counters are per encoding and engine (``tokens.text_counter``),
# a few; the bound is for counters made per call.
@lru_cache(maxsize=64)
def _digits_alike(count: Callable[[str], int]) -> bool:
    """Is each string of one to three ASCII digits one token for ``count``? The
    strings of one width joined by spaces are pre-tokens alternating with single
    spaces, each one token at least: the text counts one token a pre-token exactly
    when every string is a token of its own. Three counts a counter."""
    return all(count(" ".join(f"{n:0{width}d}" for n in range(10 ** width))) == 2 * 10 ** width - 1
               for width in (1, 2, 3))


class _Uncuttable(Exception):
    """A piece the text may not be cut after: the text is counted whole."""


class _Pieces(dict):
    """piece -> its two counts packed (see the module's docstring), filled on first sight.
    ``lead`` is what the piece stood after in its text: a space, or nothing for the
    text's first piece."""

    __slots__ = ("_first", "_second", "_lead", "_first_raw", "_second_raw")

    def __init__(self, first: Callable[[str], int], second: Callable[[str], int] | None, lead: str) -> None:
        super().__init__()
        self._first, self._second, self._lead = first, second, lead
        # The engine's own count where the counter exposes it (``tokens.text_counter``: rs-bpe's,
        # which raises on a lone surrogate): one Python call less per new piece and encoding.
        self._first_raw = getattr(first, "raw", first)
        self._second_raw = getattr(second, "raw", second)

    def __missing__(self, piece: str) -> int:
        text = self._lead + piece
        # Ending in whitespace (a space after a space: an empty piece) it may not be cut after.
        # The text's first piece empty (it starts with a space) counts nothing and stays unmarked.
        if text[-1:].isspace():
            raise _Uncuttable
        try:
            first = self._first_raw(text)
            packed = first + ((first if self._second is None else self._second_raw(text)) << _SECOND)
        except UnicodeEncodeError:  # a lone surrogate: the counter's own repair
            first = self._first(text)
            packed = first + ((first if self._second is None else self._second(text)) << _SECOND)
        if len(piece) <= MAX_PIECE_CHARS:
            if len(self) >= MAX_PIECES:
                self.clear()
            self[piece] = packed
        return packed


class PieceCounter:
    """``text -> (first, second)``: its tokens in two encodings (``second`` None: the
    first's counts twice), the same numbers as counting the whole text with each."""

    def __init__(self, first: Callable[[str], int], second: Callable[[str], int] | None = None) -> None:
        self._first, self._second = first, second
        self._heads = _Pieces(first, second, "")
        self._spaced = _Pieces(first, second, " ")
        self._digits_alike = _digits_alike(first) and (second is None or _digits_alike(second))

    def __call__(self, text: str) -> tuple[int, int]:
        if self._digits_alike and text.isascii():  # its digits counted by their shape (module docstring)
            text = text.encode().translate(_ZEROED).decode()
        pieces = text.split(" ")
        try:
            packed = sum(map(self._spaced.__getitem__, islice(pieces, 1, None)), self._heads[pieces[0]])
        except _Uncuttable:
            first = self._first(text)
            return first, self._second(text) if self._second is not None else first
        return packed & _LOW, packed >> _SECOND
