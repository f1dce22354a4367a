"""Masks and markers: the deterministic text that stands in for removed content.

No timestamps, no random ids, stable wording: the same decision on the same
message yields the same bytes, so the provider's prompt cache keeps hitting.
Markers stay tiny; a long placeholder eats the saving it announces.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from gateway.pruning.memo import TextMemo
from gateway.pruning.messages import content_text

MASKED_PREFIX = "[sieve: masked"
MAX_KEPT_VALUES = 48

# Values an agent's next call reuses verbatim: ids, codes, amounts, e-mails.
_AMOUNT = re.compile(r"-?\d{1,4}(?:\.\d+)?|-?\d+\.\d{1,2}")
_THREE_DIGITS = re.compile(r"\d\D*\d\D*\d")
# A run of id characters that holds a digit (then kept if it has three): anchored at
# the start of its run and lazy up to the first digit, so a long run of letters is
# passed in linear time, and word-only tokens never reach Python.
_ID_TOKEN = re.compile(r"(?<![#\w.+@\-])[#\w.+@\-]*?\d[#\w.+@\-]*")


def masked_message(message: Mapping[str, Any], tokens: int, fingerprint: str, keep_ids: bool = True) -> dict[str, Any]:
    """The tool message with its bulk replaced; role and tool_call_id stay, so the chain stays valid.

    The exact ids of the output survive in the marker: an old order listing
    shrinks to the order, item and payment ids a later call may still need, at
    a fraction of its size. Amounts and plain words do not survive.
    """
    masked = dict(message)
    values = kept_values(content_text(message.get("content"))) if keep_ids else ()
    kept = f"; ids: {' '.join(values)}" if values else ""
    masked["content"] = f"{MASKED_PREFIX} {tokens} tokens, ref {fingerprint[:8]}{kept}]"
    return masked


def kept_values(text: str) -> list[str]:
    """Id-like values of a tool output (three digits or more; amounts and short
    numbers excluded), first occurrence first, deduplicated, at most
    MAX_KEPT_VALUES."""
    return list(text_ids(text)[:MAX_KEPT_VALUES])


# Every epoch masks, or lists the ids of, the same old outputs again: their ids are
# read once per text. Bounded like the other per-text memos.
_IDS: TextMemo[tuple[str, ...]] = TextMemo(50_000, 8 * 1024 * 1024)


def text_ids(text: str) -> tuple[str, ...]:
    """All id-like values of a text, first occurrence first, deduplicated (memoised)."""
    ids = _IDS.get(text)
    if ids is None:
        seen: dict[str, None] = {}
        for token in _ID_TOKEN.findall(text):
            token = token.strip(".-")
            if token not in seen and _is_id(token):
                seen[token] = None
        ids = _IDS.put(text, tuple(seen))
    return ids


def clear_ids_memo() -> None:
    """Forget the per-text ids (benchmarks of a cold process)."""
    _IDS.clear()


OMITTED_PREFIX = "[sieve: some earlier messages omitted"
DROPPED_MARKER = OMITTED_PREFIX + "]"


def dropped_marker(ids: Sequence[str] = ()) -> dict[str, Any]:
    """The marker before an omitted span, with the exact ids the span held (if any).

    No counts and no positions: the text depends only on what was omitted, and it
    is frozen with the decision, so a later epoch that omits more never changes
    bytes the provider has cached; it adds a marker of its own further down.
    """
    if not ids:
        return {"role": "user", "content": DROPPED_MARKER}
    return {"role": "user", "content": f"{OMITTED_PREFIX}; ids: {' '.join(ids)}]"}


# The newest characters of an omitted span whose ids are considered: a marker holds
# a few dozen ids, and a 100k-token cold history must not be scanned whole for them.
OMITTED_SCAN_CHARS = 60_000
_CONTEXT = 160  # characters either side of an id that say what it is


def omitted_ids(texts: Iterable[tuple[str, bool]], present: set[str], room: int, count_text: Callable[[str], int],
                query: Iterable[str] = ()) -> list[str]:
    """The ids an omitted span leaves behind, as many as ``room`` tokens hold.

    ``texts``: the span's texts, newest first, each with whether it is dialogue
    (a user or assistant message, not a tool output). None the forwarded request
    already carries (``present``, see :func:`ids_in`). Ranked by how many words
    of the current request stand in the id's record (an order listing names
    "laptop" next to the laptop's product id), then by how often the span
    mentions it (dialogue counts double: an id the agent or the user repeats is
    one the task turns on), then newest first. A later call is far more likely
    to reuse an old id than an old sentence, and an id costs a few tokens where
    its message cost hundreds.
    """
    words = tuple(query)
    best: dict[str, list[int]] = {}  # id -> [query words around it, mentions, first seen]
    budget = OMITTED_SCAN_CHARS
    for text, dialogue in texts:
        if budget <= 0:
            break
        text = text[-budget:]
        budget -= len(text)
        lowered = text.lower() if words else ""
        bounds = ("{", "}") if text.lstrip()[:1] in ("{", "[") else ("\n", "\n")
        counted: set[str] = set()
        for match in _ID_TOKEN.finditer(text):
            value = match.group().strip(".-")
            if value in present or not _is_id(value):
                continue
            matches = sum(w in _record(lowered, match.start(), match.end(), *bounds) for w in words) if words else 0
            entry = best.get(value)
            if entry is None:
                entry = best[value] = [matches, 0, len(best)]
            elif matches > entry[0]:  # another mention sits in a more telling record
                entry[0] = matches
            if value not in counted:
                counted.add(value)
                entry[1] += 2 if dialogue else 1
    chosen: list[str] = []
    used = 0
    for value in sorted(best, key=lambda v: (-best[v][0], -best[v][1], best[v][2])):
        cost = count_text(" " + value)
        if used + cost > room:
            break
        chosen.append(value)
        used += cost
    return chosen


def _record(text: str, start: int, end: int, opening: str, closing: str) -> str:
    """What an id stands in: its JSON object (up to the first brace either side) or
    its line, at most _CONTEXT characters either side. An order listing's item names
    its product and options next to its ids."""
    lo, hi = max(0, start - _CONTEXT), end + _CONTEXT
    left, right = text.rfind(opening, lo, start), text.find(closing, end, hi)
    return text[left + 1 if left >= 0 else lo: right if right >= 0 else hi]


def ids_in(texts: Iterable[str]) -> set[str]:
    """Every id-like value of some texts (as :func:`kept_values` reads them)."""
    found: set[str] = set()
    for text in texts:
        found.update(text_ids(text))
    return found


def _is_id(token: str) -> bool:
    return _THREE_DIGITS.search(token) is not None and not _AMOUNT.fullmatch(token)


SUMMARY_PREFIX = "[sieve: summary of omitted messages]"


def marker_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids an omission marker lists (none for a plain one)."""
    content = message.get("content")
    if not is_omission_marker(message) or "; ids: " not in content:
        return []
    return content.split("; ids: ", 1)[1].rstrip("]").split()


def is_omission_marker(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(OMITTED_PREFIX)


def is_marker(message: Mapping[str, Any]) -> bool:
    """An omission marker, or the summary that replaced one."""
    content = message.get("content")
    return is_omission_marker(message) or (
        message.get("role") == "user" and isinstance(content, str) and content.startswith(SUMMARY_PREFIX))


def summary_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{text.strip()}"}


def goal_reminder(goal: str, max_chars: int) -> dict[str, Any]:
    text = " ".join(goal.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return {"role": "user", "content": f"[sieve: task reminder] {text}"}


def is_maskable(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("tool", "function") and isinstance(message.get("content"), (str, list))
