"""Reading a scorer model's answer: lenient about the shape, strict about the ids.

::

    parsed = parse_scores(text, expected=[3, 4, 7])   # or ScoreParseError (not JSON at all)
    if parsed.ok:
        parsed.scores        # {3: (5, "order id"), 4: (1, "thanks"), 7: (2, "superseded")}
    else:
        parsed.missing, parsed.extra, parsed.duplicates    # retry once, then fall back

Accepted shapes: a JSON array of objects, a wrapped object (``{"scores": [...]}``
or any single list inside an object), an ``{"<id>": score}`` mapping, JSON
lines, any of those inside a Markdown code fence or after some prose. Ids may
come back as ``3``, ``"3"``, ``"[3]"`` or ``"u3"``; scores as ``4``, ``4.0``,
``"4"`` or ``"4/5"``. A score outside 1-5 counts as missing: the model used
another scale, and guessing the mapping is worse than a retry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import orjson

__all__ = ["ParsedScores", "ScoreParseError", "parse_scores"]

MAX_REASON_CHARS = 80
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_ID = re.compile(r"^\s*\[?\s*[A-Za-z#_]*\s*(\d+)\s*\]?\s*$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_LIST_KEYS = ("scores", "results", "ratings", "messages", "items", "data", "output")
_ID_KEYS = ("id", "message_id", "unit_id", "index", "idx")
_SCORE_KEYS = ("score", "rating", "value", "relevance")


class ScoreParseError(ValueError):
    """The answer holds no recognisable score entries."""


@dataclass(slots=True)
class ParsedScores:
    scores: dict[int, tuple[int, str]] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    extra: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every expected id came back exactly once, and nothing else did."""
        return not (self.missing or self.extra or self.duplicates)


def parse_scores(text: str, expected: Sequence[int]) -> ParsedScores:
    entries = list(_entries(_documents(text or "")))
    if not entries:
        raise ScoreParseError("no score entries in the answer")
    wanted = set(expected)
    out = ParsedScores()
    seen: set[int] = set()
    for raw_id, raw_score, reason in entries:
        uid = _as_id(raw_id)
        if uid is None:
            continue
        if uid in seen:
            if uid in wanted and uid not in out.duplicates:
                out.duplicates.append(uid)
            continue
        seen.add(uid)
        if uid not in wanted:
            out.extra.append(uid)
            continue
        score = _as_score(raw_score)
        if score is not None:
            out.scores[uid] = (score, _reason(reason))
    if not seen:
        raise ScoreParseError("score entries carry no usable id")
    out.missing = [i for i in expected if i not in out.scores]
    return out


def _documents(text: str) -> list[Any]:
    """The JSON values in ``text``: the whole of it, fenced blocks, JSON lines, or the
    outermost bracketed span."""
    fenced = _FENCE.findall(text)
    candidates = fenced if fenced else [text]
    docs: list[Any] = []
    for chunk in candidates:
        chunk = chunk.strip()
        value = _loads(chunk)
        if value is not _FAIL:
            docs.append(value)
            continue
        lines = [_loads(line.strip().rstrip(",")) for line in chunk.splitlines() if line.strip()]
        parsed = [v for v in lines if v is not _FAIL and isinstance(v, (dict, list))]
        if parsed:
            docs.extend(parsed)
            continue
        for opener, closer in (("[", "]"), ("{", "}")):
            start, stop = chunk.find(opener), chunk.rfind(closer)
            if 0 <= start < stop:
                value = _loads(chunk[start:stop + 1])
                if value is not _FAIL:
                    docs.append(value)
                    break
    return docs


_FAIL = object()


def _loads(chunk: str) -> Any:
    if not chunk:
        return _FAIL
    try:
        return orjson.loads(chunk)
    except orjson.JSONDecodeError:
        return _FAIL


def _entries(docs: Iterable[Any]) -> Iterable[tuple[Any, Any, Any]]:
    """(id, score, reason) triples from any accepted shape."""
    for doc in docs:
        if isinstance(doc, list):
            for item in doc:
                yield from _item(item)
        elif isinstance(doc, dict):
            inner = _inner_list(doc)
            if inner is not None:
                for item in inner:
                    yield from _item(item)
            elif _first(doc, _ID_KEYS) is not None:
                yield from _item(doc)
            else:  # {"3": 4, "4": {"score": 1, "reason": "..."}}
                for key, value in doc.items():
                    if isinstance(value, dict):
                        yield key, _first(value, _SCORE_KEYS), value.get("reason")
                    else:
                        yield key, value, None


def _inner_list(doc: dict) -> list | None:
    for key in _LIST_KEYS:
        if isinstance(doc.get(key), list):
            return doc[key]
    lists = [v for v in doc.values() if isinstance(v, list)]
    return lists[0] if len(lists) == 1 else None


def _item(item: Any) -> Iterable[tuple[Any, Any, Any]]:
    if isinstance(item, dict):
        yield _first(item, _ID_KEYS), _first(item, _SCORE_KEYS), item.get("reason")
    elif isinstance(item, list) and len(item) >= 2:  # [id, score, reason?]
        yield item[0], item[1], item[2] if len(item) > 2 else None


def _first(d: dict, keys: Sequence[str]) -> Any:
    for key in keys:
        if key in d:
            return d[key]
    return None


def _as_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = _ID.match(value)
        return int(m.group(1)) if m else None
    return None


def _as_score(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        m = _NUMBER.search(value)
        if m is None:
            return None
        value = float(m.group(0))
    if not isinstance(value, (int, float)):
        return None
    score = int(round(value))
    return score if 1 <= score <= 5 else None


def _reason(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return " ".join(value.split())[:MAX_REASON_CHARS]
