"""Cheap text features the local scorer reads: terms, entities, constraints.

Everything here is deterministic and allocation-light, because it runs over
every older unit of a conversation at each pruning epoch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from itertools import chain

# NATIVE (is the token loop in C?) and tokens are read from here too.
from gateway.pruning.token_scan import NATIVE, entity_forms, quoted, scan, tokens  # noqa: F401

_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves yes yeah oh ok okay hey hi hello thanks thank really also got get like
one go going know think well lot much s t d ll m re ve let us im
""".split())

# User constraints: what the agent must (not) do, in English and Chinese.
_CONSTRAINT = re.compile(
    r"\b(?:do not|don't|dont|never|always|must|must not|mustn't|should not|shouldn't|make sure|"
    r"only use|avoid|no more than|at most|at least|without|instead of|not allowed|forbidden|required)\b"
    r"|不要|别|必须|一定要|务必|总是|永远|禁止|不得|不能|只能|请勿",
    re.IGNORECASE,
)
# A failed call: the next step retries it or works around it, so it is worth a little more.
_ERROR = re.compile(r"\b(?:error|exception|failed|failure|not found|invalid|denied|traceback)\b", re.IGNORECASE)


def stem(word: str) -> str:
    """A light suffix stripper: enough to match 'painted' with 'paint'."""
    if len(word) <= 4 or word[-1] not in "sdgy" or word.isdigit():  # every suffix ends in one of these
        return word
    for suffix, keep in (("ingly", 5), ("ings", 4), ("ing", 3), ("edly", 4), ("ied", 3), ("ies", 3),
                         ("ed", 2), ("es", 2), ("ly", 2), ("s", 1)):
        if word.endswith(suffix) and len(word) - keep >= 3:
            base = word[:-keep]
            if suffix in ("ied", "ies"):
                return base + "y"
            if suffix == "s" and word.endswith("ss"):
                return word
            return base
    return word


class _WordMemo(dict):
    """A memo of per-word work: ``memo[word]`` (or ``map(memo.__getitem__, words)``, in
    C) costs a Python call only for a word seen for the first time (``__missing__``).
    Chat and tool vocabularies are small, so it stays warm across conversations; bounded."""

    def __init__(self, compute, max_entries: int = 500_000) -> None:
        super().__init__()
        self._compute = compute
        self._max_entries = max_entries

    def __missing__(self, word):
        value = self._compute(word)
        if len(self) < self._max_entries:
            self[word] = value
        return value


def _terms_of_word(word: str) -> tuple[str, ...]:
    """The terms of one lower-cased word."""
    if not word.isascii() and _CJK.search(word):
        chars = [c for c in word if _CJK.match(c)]
        return tuple(a + b for a, b in zip(chars, chars[1:])) or tuple(chars)
    if word in STOPWORDS or len(word) < 2:
        return ()
    stemmed = stem(word)
    # A coarse prefix term lets 'campfire' meet 'camping' at a lower weight.
    return (stemmed, "~" + stemmed[:4]) if len(stemmed) >= 4 else (stemmed,)


_WORD_TERMS = _WordMemo(_terms_of_word)  # chat vocabularies are small


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed content words; CJK runs become character bigrams."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        out.extend(_WORD_TERMS[word])
    return out


def term_counts(text: str) -> Counter:
    return Counter(terms(text))


# One pass of tokens feeds terms, entities and the constraint/error gates; each
# distinct token is classified once (memoised), so a text costs a split plus a
# dictionary lookup per token (token_scan.py, in C where it is built: NATIVE).


# E-mails and file names start where a run of their characters starts (the lookbehinds):
# unanchored, every position of a long run would rescan the rest of it (quadratic; a
# 40k-character word took seconds).
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+\.[\w.-]+")
_EXTENSIONS = r"(?:py|js|ts|tsx|jsx|go|rs|java|kt|c|h|cpp|rb|php|json|ya?ml|md|txt|csv|html|css|sh|sql|toml|cfg|ini|log|xml)\b"
_FILE = re.compile(r"(?<![\w\-])[\w\-]+\." + _EXTENSIONS)
_FILE_GATE = re.compile(r"\." + _EXTENSIONS)
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
# str.isdigit on an ASCII token, in C (isdigit also takes '²' and '①': other tokens keep it)
_ASCII_DIGIT = re.compile(r"[0-9]").search

_CONSTRAINT_WORDS = frozenset("never always must mustn shouldn dont avoid without forbidden required".split())
_CONSTRAINT_PHRASE_WORDS = frozenset("not don sure only most least instead more".split())
_ERROR_WORDS = frozenset("error exception failed failure found invalid denied traceback".split())
_F_CONSTRAINT, _F_PHRASE, _F_ERROR = 1, 2, 4
# A word's flags: a constraint word, else a word of a constraint phrase; and an error word.
_WORD_FLAGS = {w: (_F_CONSTRAINT if w in _CONSTRAINT_WORDS else _F_PHRASE if w in _CONSTRAINT_PHRASE_WORDS else 0)
               | (_F_ERROR if w in _ERROR_WORDS else 0)
               for w in _CONSTRAINT_WORDS | _CONSTRAINT_PHRASE_WORDS | _ERROR_WORDS}
# Every match of _CONSTRAINT that no single flagged word explains contains one of
# these (lower-cased). Substring tests run in C at memory speed; the regex scans
# a long JSON output at every position, which cost 20 ms per 100k tokens.
_PHRASE_HINTS = ("do not", "don't", "must not", "mustn't", "should not", "shouldn't", "make sure",
                 "only use", "no more than", "at most", "at least", "instead of", "not allowed")


@dataclass(frozen=True, slots=True)
class TextInfo:
    counts: dict[str, int]   # term -> occurrences
    length: int              # number of terms
    entities: frozenset[str]
    constraint: bool
    error: bool

    @property
    def terms(self) -> list[str]:
        return [term for term, n in self.counts.items() for _ in range(n)]


def _entity_form(token: str) -> str | None:
    token = token.lower()
    if len(token) < 3 or token in STOPWORDS:
        return None
    return token.lstrip("#") if token.startswith("#") and len(token) > 3 else token


def _token_info(tok: str) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """A token's terms, entities and constraint/error flags."""
    if tok.isascii():
        # The commonest kinds, read here as the general path below reads them: a word
        # in lower case (no entity) and a number (an entity from three digits on).
        if tok.isalpha() and tok.islower():
            return _WORD_TERMS[tok], (), _WORD_FLAGS.get(tok, 0)
        if tok.isdigit():
            return _WORD_TERMS[tok], (tok,) if len(tok) >= 3 else (), 0
    lowered = tok.lower()
    if "-" in tok or "#" in tok or not tok.isascii():
        words = _WORD.findall(lowered)
        terms_: tuple[str, ...] = tuple(chain.from_iterable(map(_WORD_TERMS.__getitem__, words)))
        flags = 0
        for w in words:
            flags |= _WORD_FLAGS.get(w, 0)
    else:  # one plain word: most tokens
        terms_, flags = _WORD_TERMS[lowered], _WORD_FLAGS.get(lowered, 0)
    if _ASCII_DIGIT(tok) is not None if tok.isascii() else any(c.isdigit() for c in tok):
        parts = [tok]                                        # ids, numbers, codes
    else:
        parts = [part for part in tok.lstrip("#").split("-")
                 if (len(part) >= 3 and part[0].isupper() and part.isascii() and part.isalpha())  # names (weak)
                 or ("_" in part and _SNAKE.fullmatch(part))]                                       # snake_case ids
    return terms_, tuple(filter(None, map(_entity_form, parts))), flags


_TOKEN_INFO = _WordMemo(_token_info)
# What the C scan reads a plain word or number with on its first sight, as _token_info
# would (_token_scan.c): no Python call for most of a conversation's distinct tokens.
_PLAIN_WORDS = (STOPWORDS, _WORD_FLAGS, _TOKEN_INFO._max_entries)
# Quoted strings, e-mails, file names -> entity form: JSON repeats its keys and
# values. Up to 60 characters each, so fewer of them (about 20 MiB at the bound).
_ENTITY_FORMS = _WordMemo(_entity_form, max_entries=100_000)


def _entity_forms(strings: list[str]) -> list[str | None]:
    """``[_ENTITY_FORMS[s] for s in strings]``; in C where it is built, an ASCII string
    the memo lacks is read there (``token_scan.entity_forms``), without a Python call."""
    return entity_forms(strings, _ENTITY_FORMS, STOPWORDS, _ENTITY_FORMS._max_entries)


def clear_word_cache() -> None:
    """Forget the per-word memos (benchmarks of a cold process)."""
    _TOKEN_INFO.clear()
    _ENTITY_FORMS.clear()
    _WORD_TERMS.clear()


def analyse(text: str) -> TextInfo:
    """Terms, entities, constraint and error flags of a text in one pass."""
    counts, length, found, flags = scan(text, _TOKEN_INFO, _PLAIN_WORDS)
    if "@" in text:
        # An e-mail holds no whitespace: only the words with an '@' are scanned (the pattern
        # backtracks over every word it starts at, a few hundred instructions a character).
        found.update(_entity_forms(_EMAIL.findall(" ".join(w for w in text.split() if "@" in w))))
    if '"' in text:
        found.update(_entity_forms(quoted(text)))
    if _FILE_GATE.search(text):
        found.update(_entity_forms(_FILE.findall(text)))
    found.discard(None)
    cjk = not text.isascii() and _CJK.search(text) is not None
    constraint = bool(flags & _F_CONSTRAINT) or (
        (cjk or (bool(flags & _F_PHRASE) and _has_phrase_hint(text))) and _CONSTRAINT.search(text) is not None)
    error = bool(flags & _F_ERROR) and _ERROR.search(text[:2000]) is not None
    return TextInfo(counts, length, frozenset(found), constraint, error)


def query_words(text: str, limit: int = 64, *, numbers: bool = False, chars: int = 20_000) -> tuple[str, ...]:
    """The first ``limit`` distinct content words of the first ``chars`` of a request,
    lower-cased, stopwords left out, numbers too unless ``numbers``. Bounded: each is
    looked for around every candidate id, or in every output."""
    seen: dict[str, None] = {}
    for word in _WORD.finditer(text[:chars].lower()):
        word = word.group()
        if len(word) >= 2 and word not in STOPWORDS and (numbers or not word.isdigit()):
            seen.setdefault(word)
            if len(seen) >= limit:
                break
    return tuple(seen)


def _has_phrase_hint(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in _PHRASE_HINTS)


def entities(text: str) -> frozenset[str]:
    """Things an agent's next call reuses verbatim: ids and numbers (any token with
    a digit), e-mails, file names, snake_case identifiers, quoted and capitalised names."""
    return analyse(text).entities


def has_constraint(text: str) -> bool:
    return _CONSTRAINT.search(text) is not None


def looks_like_error(text: str) -> bool:
    return _ERROR.search(text[:2000]) is not None


# Transcripts (group chats, meeting notes, chat logs) name who each message is by:
# "Name: text", or "<Name> text" as IRC-style logs do, optionally after a time stamp
# in brackets or parentheses.
_NAME = r"[A-Z][\w'.-]{1,30}(?: [A-Z][\w'.-]{1,30})?"
_SPEAKER = re.compile(rf"^(?:[\[(][^\])\n]{{1,60}}[\])]\s*)?(?:({_NAME}):\s|<({_NAME})>\s)")


def speaker(text: str) -> str | None:
    m = _SPEAKER.match(text)
    return (m.group(1) or m.group(2)).lower() if m else None
