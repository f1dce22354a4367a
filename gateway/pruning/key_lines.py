"""The few lines of a masked tool output that bear on the current step.

Query-focused extraction, the "key facts of tool results" of a compaction
summary: a mask keeps the exact ids of the output it replaces, and when the
output also holds lines that name what the current step is about (the symbol
the user asks for, the file and line a search just hit, the record the user
wants changed), those few lines stay too, verbatim. The next step copies
exact text from an output it saw earlier far more often than it re-reads the
whole output, and the lines that share the current step's rarest words are
where that text sits, whatever the domain (a definition line of code, the
address record of an order, the row of a log that failed).

A line is a line of the output; in a long line (a JSON document on one line)
it is the innermost short object around the word, so a record is kept, not a page.
Words locate a line only while they are rare: a word on many lines of the
output (``self``, a path prefix every hit starts with) or in many of the
conversation's outputs names a kind of thing, not the place the step needs::

    KeyLineMasks(conv, masked).mask(j)   # message j's mask with its key lines, or None
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from gateway.pruning.compression import masked_message
from gateway.pruning.conversation import KIND_USER, Conversation
from gateway.pruning.messages import content_text
from gateway.pruning.text_features import query_words

MIN_KEY_LINE_ROOM = 12  # tokens: less holds no key line (a mask's "; lines:" and one short line)
MAX_KEY_LINE_MASKS = 24  # the most relevant masks looked at for key lines: each costs a scan of its output

MAX_FOCUS_WORDS = 48         # the current step's words looked for in each output
MAX_KEY_LINES = 3            # per mask: a mask repeats on every later step
MAX_KEY_CHARS = 240          # per mask, about 60 tokens: a mask stays a fraction of its output
MAX_LINE_CHARS = 160         # a kept line is cut to this (a minified page is no key line)
RARE_SHARE = 4               # a locator is in at most 1/RARE_SHARE of the outputs
MAX_LINES_PER_WORD = 3       # a word on more lines of one output locates nothing there
FOCUS_TEXT_CHARS = 8_000     # of the current step: its head says what it is about

_LONG_LINE = 200


class KeyLineMasks:
    """The key lines of some of a conversation's outputs (``candidates``) for its
    current step. Rarity is counted over the tool outputs before the current step
    (the current step's own outputs are where its words come from, and would count
    every word once more), for the focus words some candidate holds."""

    __slots__ = ("_conv", "_outputs", "_lowered", "_rarity")

    def __init__(self, conv: Conversation, candidates: Sequence[int]) -> None:
        step_start = conv.units[-1].start if conv.units else 0
        self._conv = conv
        self._outputs = {j: content_text(conv.messages[j].get("content")) for j in candidates
                         if j < step_start and conv.messages[j].get("role") in ("tool", "function")}
        self._lowered = {j: text.lower() for j, text in self._outputs.items()}
        held = [w for w in focus_words(current_step(conv)) if any(w in text for text in self._lowered.values())]
        others = [content_text(m.get("content")).lower() for m in conv.messages[:step_start]
                  if m.get("role") in ("tool", "function")] if held else []
        self._rarity = output_rarity(held, others)

    def mask(self, j: int) -> dict[str, Any] | None:
        """Message ``j``'s mask with its key lines (the same ids and ref as its plain
        mask); None when its output holds none."""
        if j not in self._outputs or not self._rarity:
            return None
        lines = key_lines(self._outputs[j], self._lowered[j], self._rarity)
        if not lines:
            return None
        conv = self._conv
        return masked_message(conv.messages[j], conv.tokens[j], conv.fingerprints[j], lines=lines)


def current_step(conv: Conversation) -> str:
    """What the current step is about: the last unit; with the newest user request when
    it is a tool round working on that request; with the turn before it when it is a
    user message (a reply such as "yes, go ahead" means what it answers)."""
    if not conv.units:
        return ""
    last = conv.units[-1]
    if last.kind == KIND_USER:
        before = conv.units[-2].text if len(conv.units) > 1 else ""
        return last.text + "\n" + before
    return conv.current_request + "\n" + last.text


def focus_words(text: str) -> tuple[str, ...]:
    """The distinct words of the current step, lower-cased, in order of first
    occurrence: identifiers, names and numbers of two characters or more, no
    stopwords. Numbers stay (a line number, a code): they are the most exact locators."""
    return query_words(text, MAX_FOCUS_WORDS, numbers=True, chars=FOCUS_TEXT_CHARS)


def output_rarity(focus: Sequence[str], outputs: Sequence[str]) -> dict[str, int]:
    """Per focus word that is rare among ``outputs`` (lower-cased), how many contain
    it. A word in more than a quarter of a conversation's outputs (a package name,
    a field every record has) names a kind of thing, and locates nothing: it is left
    out (and no longer looked for once it is known to be common)."""
    most = max(1, len(outputs) // RARE_SHARE)
    counts = dict.fromkeys(focus, 0)
    live = list(focus)
    for text in outputs:
        common = False
        for word in live:
            if word in text:
                counts[word] += 1
                common = common or counts[word] > most
        if common:
            live = [w for w in live if counts[w] <= most]
            if not live:
                break
    return {w: n for w, n in counts.items() if 0 < n <= most}


def key_lines(text: str, lowered: str, rarity: Mapping[str, int], max_chars: int = MAX_KEY_CHARS) -> list[str]:
    """At most MAX_KEY_LINES lines (records) of ``text`` that hold the rarest focus
    words (the keys of ``rarity``), within ``max_chars``, in their order in ``text``;
    none when no such word is in it. ``lowered`` is ``text.lower()`` (built once per output)."""
    present = [w for w in rarity if w in lowered]
    if not present or len(lowered) != len(text):  # a case change that moves offsets: no lines
        return []
    pattern = re.compile(r"(?<![^\W_])(?:" + "|".join(map(re.escape, present)) + r")(?![^\W_])")
    spans: dict[tuple[int, int], set[str]] = {}
    for match in pattern.finditer(lowered):
        spans.setdefault(_record_span(lowered, match.start()), set()).add(match.group())
    per_word: dict[str, int] = {}
    for found in spans.values():
        for w in found:
            per_word[w] = per_word.get(w, 0) + 1
    weight = {w: 1.0 / (k * rarity[w]) for w, k in per_word.items() if k <= MAX_LINES_PER_WORD}
    max_chars = min(max_chars, len(text) // 4)  # the mask stays a fraction of what it replaces
    ranked = sorted(((sum(weight.get(w, 0.0) for w in found), span) for span, found in spans.items()),
                    key=lambda s: (-s[0], s[1]))
    chosen: list[tuple[int, int]] = []
    used = 0
    for score, span in ranked:
        if score <= 0 or len(chosen) >= MAX_KEY_LINES:
            break
        size = min(span[1] - span[0], MAX_LINE_CHARS)
        if used + size <= max_chars:
            chosen.append(span)
            used += size
    return [_cut(text[a:b].rstrip()) for a, b in sorted(chosen)]


def _record_span(lowered: str, pos: int) -> tuple[int, int]:
    """The line around ``pos``; in a long line (a JSON document on one line), the
    innermost object around it when that object is short, else a stretch around it."""
    start = lowered.rfind("\n", 0, pos) + 1
    end = lowered.find("\n", pos)
    end = len(lowered) if end < 0 else end
    if end - start <= _LONG_LINE:
        return start, end
    opening = lowered.rfind("{", start, pos)
    closing = lowered.find("}", pos, end)
    if opening >= 0 and closing >= 0 and closing - opening < _LONG_LINE and lowered.find("}", opening, pos) < 0:
        return opening, closing + 1
    # A stretch from the word before to a word end: whole words, not a cut one.
    a, b = max(start, pos - _LONG_LINE // 4), min(end, pos + _LONG_LINE // 2)
    space = lowered.find(" ", a, pos)
    last = lowered.rfind(" ", pos, b)
    return (space + 1 if space >= 0 else pos), (last if last > pos else b)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def key_line_masks(conversation: Conversation, ranked: Sequence[int], room: int,
                   count: Callable[[Mapping[str, Any]], int],
                   masked_forms: Mapping[int, Mapping[str, Any]]) -> tuple[dict[int, dict[str, Any]], int]:
    """Fresh masks, most relevant first, upgraded with their key lines while ``room`` (tokens)
    lasts: each upgrade that fits whole; returns the upgraded masks and the room left."""
    order = list(ranked)[:MAX_KEY_LINE_MASKS]
    finder = KeyLineMasks(conversation, order)
    chosen: dict[int, dict[str, Any]] = {}
    for j in order:
        if room < MIN_KEY_LINE_ROOM:
            break
        upgraded = finder.mask(j)
        extra = count(upgraded) - count(masked_forms[j]) if upgraded is not None else 0
        if 0 < extra <= room:
            chosen[j], room = upgraded, room - extra
    return chosen, room
