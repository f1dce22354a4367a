"""The messages each conversation sent last, as JSON, so that a warm step fingerprints only its new ones.

Every prune fingerprints every message (``gateway.pruning.messages.fingerprint``): a
stored plan is replayed only while the history still starts with the messages it was
decided on, and a client that edits an earlier message must be seen to have done so.
An agent resends its whole history at every step, and one message at a time (its JSON,
then a lookup that hashes those bytes) that was 6 M instructions on a 100k-token
history, two fifths of a warm step's prune. Here the messages are written once, as one
list (1.9 M), and compared byte for byte with the list the conversation's previous
request sent: when the new list starts with the old one less its closing bracket, and
a comma or that bracket follows, it holds the same messages first, value for value,
and their fingerprints are the old ones; only the messages after them are fingerprinted.
An edited, removed or reordered earlier message (or the same one with its keys in
another order) is a byte of difference: then every message is fingerprinted, as before::

    recent = RecentMessages(max_bytes=32 * 1024 * 1024)
    fingerprints = recent.fingerprints(key, body["messages"])   # == [fingerprint(m) for m in messages]

A memo of a pure function, keyed by what it is computed from: the answer never depends
on the store, on the plan, or on which replica served the conversation before. Bounded
by the bytes of the lists kept (a 100k-token history is ~410 KB; its fingerprints add
about a seventh); a list over a quarter of the bound is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping, Sequence

import orjson

from gateway.pruning import fingerprint

__all__ = ["RecentMessages"]


class RecentMessages:
    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.reused = 0  # fingerprints taken from the previous request instead of computed
        self._kept: OrderedDict[str, tuple[bytes, tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()  # called from the pipeline's thread for a large body

    def __len__(self) -> int:
        return len(self._kept)

    def fingerprints(self, key: str, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """``fingerprint(m)`` of each of ``messages`` (the request of conversation ``key``),
        those the conversation's previous request sent first taken from it; ``messages``
        are then kept as the conversation's last."""
        written = orjson.dumps(messages)
        with self._lock:
            previous = self._kept.get(key)
        known: tuple[str, ...] = ()
        if previous is not None and _starts_with(written, previous[0]):
            known = previous[1]
            self.reused += len(known)
        found = [*known, *(fingerprint(m) for m in messages[len(known):])]
        self._remember(key, written, found)
        return found

    def forget(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def _remember(self, key: str, written: bytes, found: list[str]) -> None:
        size = len(written)
        with self._lock:
            self._drop(key)
            if size > self.max_bytes // 4 or not found:
                return  # one giant history would push every other out
            self._kept[key] = (written, tuple(found))
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (evicted, _) = self._kept.popitem(last=False)
                self.bytes -= len(evicted)

    def _drop(self, key: str) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self.bytes -= len(old[0])


def _starts_with(written: bytes, earlier: bytes) -> bool:
    """``written`` (a JSON list) holds the items of ``earlier`` (one, non-empty) first. The same
    bytes leave a JSON reader in the same state: after ``earlier`` less its closing bracket it
    has read the same items, the last one whole if the list goes on (a comma) or ends there
    (the bracket), as a message's closing brace always tells; a bare number would not."""
    end = len(earlier) - 1
    return len(written) > end and written[end] in b",]" and written.startswith(memoryview(earlier)[:end])
