"""The calls an omission marker lists: what the agent ran in the span it stands for.

An agent's next call copies its own earlier calls more than anything else: the file it
viewed and the lines it read, the record it fetched, the test it ran. Their outputs are
what a span is dropped for (hundreds of tokens each); the calls themselves are a few
dozen, and the ids a marker lists say only part of them (a path, not the line range
the agent read in it: a count is not an id). So a marker lists its span's short calls
that say more than their ids, those with a number no id of theirs carries (a line, an
offset, a count the agent chose), as the agent sent them: the tool's name and its
arguments as given, whatever the tool and its schema (nothing in them is parsed or
rewritten), one a line, the newest first as far as the room allows. A call whose numbers
are all in its ids (a path, an order id) is said by the ids, at less cost, and leaves
their room to the outputs' ids; a long call is content the agent wrote (a file, a
script): its values still reach the marker's ids, its text stays behind ``sieve_expand``.

The lines depend only on the span's own messages, and the marker is frozen with the
decision that placed it (``gateway.pruning.markers``): stable between epochs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import re

import orjson

from gateway.pruning.compression import CALLS_HEAD, IDS_HEAD
from gateway.pruning.ids import text_ids

MAX_CALL_TOKENS = 48  # a call longer than this is content, not a locator
# The calls' room beside the ids': 1/CALLS_SHARE of theirs (``omitted_ids_tokens``), and at
# most 1/(CALLS_SHARE + 1) of what the target leaves (``markers.with_omitted_ids``). A third:
# the numbers of a call that its output shows are listed with the ids already (``ids._Tally``'s
# referred numbers), so a call line says less that they do not.
CALLS_SHARE = 3
_NUMBER = re.compile(r"[0-9]+")


def says_more_than_ids(line: str) -> bool:
    """Whether a call line holds a number that none of its ids carries."""
    numbers = _NUMBER.findall(line)
    if not numbers:
        return False
    ids = text_ids(line)
    return any(not any(n in v for v in ids) for n in numbers)


def call_lines(message: Mapping[str, Any]) -> list[str]:
    """Each call of ``message`` on one line: its name, a space, its arguments as sent
    (a JSON string as written; arguments given as a value, their compact JSON). A call
    whose arguments hold a raw line break, or the marker's own heads, has no line: it
    could not be told apart from the next one."""
    calls = message.get("tool_calls")
    fns = [(c or {}).get("function") or {} for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        fns.append(legacy)
    lines = []
    for fn in fns:
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        text = args if isinstance(args, str) else orjson.dumps(args).decode() if args is not None else ""
        line = f"{fn.get('name') or ''} {text.strip()}".strip()
        if line and "\n" not in line and CALLS_HEAD.strip() not in line and IDS_HEAD.strip() not in line:
            lines.append(line)
    return lines


def omitted_calls(messages: Iterable[Mapping[str, Any]], present: set[str], room: int,
                  count_text: Callable[[str], int]) -> list[str]:
    """The call lines a marker lists, within ``room`` tokens: ``messages`` newest first
    (the span's), each call up to MAX_CALL_TOKENS that says more than its ids, none the
    forwarded request already
    makes (``present``: the call lines of its kept messages) and none twice; returned
    oldest first, in the order the agent made them."""
    chosen: list[str] = []
    seen = set(present)
    used = count_text(CALLS_HEAD)
    for message in messages:
        for line in reversed(call_lines(message)):
            if line in seen or not says_more_than_ids(line):
                continue
            seen.add(line)
            cost = count_text(line) + 1  # its line break
            if cost > MAX_CALL_TOKENS + 1:
                continue
            if used + cost > room:
                continue  # an older, shorter call may still fit
            chosen.append(line)
            used += cost
    return chosen[::-1]
