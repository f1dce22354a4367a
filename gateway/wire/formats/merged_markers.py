"""Omission markers that end up side by side in a native body, merged into one.

The pipeline puts one marker before each omitted span. In the chat view two
markers are separate messages; written back in a native format, pieces of one
role merge into one turn (Messages) and markers queue before the next kept item
(Responses), so two spans whose kept messages between them were dropped leave two
markers side by side, often the same text twice. One marker says it as well,
listing every id either listed, so the model reads one notice and loses no id::

    merged_marker_texts(["[sieve: ... omitted; ids: a b]", "[sieve: ... omitted; ids: b c]", "hi"])
    # ["[sieve: ... omitted; ids: a b c]", "hi"]

With ``sieve_expand`` on, each marker names the ref of its span
(``gateway.pruning.marker_refs.with_ref``); the merged one names both, so the model
can still ask for either span (the expander's ref index is the chat view's, where
both markers are)::

    "[sieve: ... omitted, ref 1a2b3c4d, ref 5e6f7a8b, sieve_expand restores it; ids: a b c]"
"""

from __future__ import annotations

import re
from typing import Sequence

from gateway.pruning import REF_CHARS, dropped_marker, is_omission_marker, marker_calls, marker_ids, with_ref

_REF = re.compile(rf", ref ([0-9a-f]{{{REF_CHARS}}})\b")


def is_marker_text(text: object) -> bool:
    return isinstance(text, str) and is_omission_marker({"role": "user", "content": text})


def merged_marker_text(first: str, second: str) -> str:
    """One marker for two adjacent ones: the first's calls and ids, then the second's new
    ones; and their refs, the first's first, when they name any."""
    one, two = {"role": "user", "content": first}, {"role": "user", "content": second}
    ids = marker_ids(one)
    ids += [i for i in marker_ids(two) if i not in ids]
    calls = marker_calls(one)
    calls += [c for c in marker_calls(two) if c not in calls]
    merged = dropped_marker(ids, calls)
    refs = _refs(first)
    refs += [r for r in _refs(second) if r not in refs]
    return (with_ref(merged, *refs) if refs else merged)["content"]


def _refs(marker: str) -> list[str]:
    """The refs a marker names (before its ids: an id may read like a ref)."""
    return _REF.findall(marker.split("; ids: ", 1)[0].split("; calls:", 1)[0])


def merged_marker_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` with every run of adjacent omission markers merged into one."""
    out: list[str] = []
    for text in texts:
        if out and is_marker_text(out[-1]) and is_marker_text(text):
            out[-1] = merged_marker_text(out[-1], text)
        else:
            out.append(text)
    return out
