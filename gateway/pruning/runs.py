"""Splitting a (mostly) ASCII text into runs of word-like characters, in C.

The scorer reads every older unit's text for its tokens, and masks read every
tool output for its ids. A regex scan (``findall``) costs about 25 ns per
character in CPython's engine, whatever the pattern; ``bytes.translate`` (every
separator to a space) followed by ``str.split`` does the same split at about
5 ns per character.

A :class:`RunSplitter` is built from the characters a run may hold besides
``[A-Za-z0-9_]``. It reads texts whose only non-ASCII characters are
separators (curly quotes, dashes: they become spaces first). A non-ASCII word
character (``é``, ``中``) makes it decline: which characters are word characters
is Unicode's business there, so the caller's regex reads those texts::

    RunSplitter("#.+@-").split("mail noah.ito@example.com, order #W42")
    # -> ['mail', 'noah.ito@example.com', 'order', '#W42']
    RunSplitter("#.+@-").split("it’s café")
    # -> None
"""

from __future__ import annotations

import re
import string

_ASCII_WORD = string.ascii_letters + string.digits + "_"
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")  # what is left is a few characters


class RunSplitter:
    """Maximal runs of ``[A-Za-z0-9_]`` and ``extra`` (ASCII characters)."""

    def __init__(self, extra: str) -> None:
        if "?" in extra or not extra.isascii():
            raise ValueError("extra must be ASCII, without '?' (it stands in for non-ASCII separators)")
        kept = {ord(c) for c in _ASCII_WORD + extra}
        # bytes.translate is a table lookup per byte: faster still than str.translate.
        self._table = bytes(b if b in kept else ord(" ") for b in range(256))

    def translated(self, text: str) -> str | None:
        """``text`` with every separator turned into a space; None if it holds a
        non-ASCII word character."""
        if text.isascii():
            encoded = text.encode("ascii")
        else:
            # Chat text is ASCII but for a few punctuation marks (curly quotes,
            # dashes): those are separators, and so is the '?' that stands in for
            # them once encoded.
            if any(c.isalnum() for c in _ASCII_RUNS.sub("", text)):
                return None
            encoded = text.encode("ascii", "replace")
        return encoded.translate(self._table).decode("ascii")

    def split(self, text: str) -> list[str] | None:
        """The runs of ``text``; None if it holds a non-ASCII word character."""
        translated = self.translated(text)
        return translated.split() if translated is not None else None
