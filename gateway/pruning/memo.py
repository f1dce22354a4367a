"""A memo keyed by message text, bounded in entries and in characters.

Token counts and scorer features are memoised per text so that the next turn of
a conversation, which resends the same history, costs a dict lookup per
message. Each entry keeps its text alive (and features weigh about ten bytes
per character of it), so an entry bound alone would let a few hundred long
histories hold gigabytes; the character bound is what keeps a replica's memory
flat::

    memo = TextMemo(max_entries=200_000, max_chars=32 * 1024 * 1024)
    value = memo.get(text)
    if value is None:
        value = memo.put(text, compute(text))

Safe enough across threads (large requests are pruned in a worker thread): a
race can only evict an extra entry or count a text twice, and the character
count is kept from drifting by checking membership before adding.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class TextMemo(Generic[V]):
    def __init__(self, max_entries: int, max_chars: int) -> None:
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, text: object) -> bool:
        return text in self._entries

    def __iter__(self):
        return iter(list(self._entries))

    @property
    def chars(self) -> int:
        return self._chars

    def get(self, text: str) -> V | None:
        value = self._entries.get(text)
        if value is not None:
            try:  # not contextlib.suppress: a hit is a dict lookup, the context manager was 10 of them
                self._entries.move_to_end(text)
            except KeyError:  # evicted meanwhile by another thread
                pass
        return value

    def put(self, text: str, value: V) -> V:
        if len(text) > self._max_chars // 4:
            return value  # one giant text would flush everything else
        entries = self._entries
        if text not in entries:
            self._chars += len(text)
        entries[text] = value
        while len(entries) > self._max_entries or self._chars > self._max_chars:
            try:
                evicted, _ = entries.popitem(last=False)
            except KeyError:  # emptied meanwhile by another thread
                break
            self._chars -= len(evicted)
        return value

    def clear(self) -> None:
        self._entries.clear()
        self._chars = 0
