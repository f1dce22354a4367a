"""Cheap text features the local scorer reads: terms, entities, constraints.

Everything here is deterministic and allocation-light, because it runs over
every older unit of a conversation at each pruning epoch.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

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

# Entities: things an agent's next call reuses verbatim.
_ENTITY = re.compile(
    r"[\w.+-]+@[\w-]+\.[\w.-]+"                                   # e-mail
    r"|#?[A-Za-z_]*\d[\w\-]*"                                     # ids, numbers, codes
    r"|[\w\-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|c|h|cpp|rb|php|json|ya?ml|md|txt|csv|html|css|sh|sql|toml|cfg|ini|log|xml)\b"
    r"|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"                       # snake_case identifiers
    r"|\"[^\"\n]{2,60}\""                                        # quoted names
    r"|\b[A-Z][a-zA-Z]{2,}\b"                                     # capitalised names (weak)
)

# User constraints: what the agent must (not) do, in English and Chinese.
_CONSTRAINT = re.compile(
    r"\b(?:do not|don't|dont|never|always|must|must not|mustn't|should not|shouldn't|make sure|"
    r"only use|avoid|no more than|at most|at least|without|instead of|not allowed|forbidden|required)\b"
    r"|不要|别|必须|一定要|务必|总是|永远|禁止|不得|不能|只能|请勿",
    re.IGNORECASE,
)
_ERROR = re.compile(r"\b(?:error|exception|failed|failure|not found|invalid|denied|traceback)\b", re.IGNORECASE)


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """A light suffix stripper: enough to match 'painted' with 'paint'."""
    if len(word) <= 4 or word.isdigit():
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


_WORD_TERMS: dict[str, tuple[str, ...]] = {}


def _word_terms(word: str) -> tuple[str, ...]:
    """The terms of one lower-cased, non-CJK word (memoised: chat vocabularies are small)."""
    got = _WORD_TERMS.get(word)
    if got is None:
        if word in STOPWORDS or len(word) < 2:
            got = ()
        else:
            stemmed = stem(word)
            # A coarse prefix term lets 'campfire' meet 'camping' at a lower weight.
            got = (stemmed, "~" + stemmed[:4]) if len(stemmed) >= 4 else (stemmed,)
        if len(_WORD_TERMS) < 500_000:
            _WORD_TERMS[word] = got
    return got


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed content words; CJK runs become character bigrams."""
    out: list[str] = []
    words = _WORD.findall(text.lower())
    if _CJK.search(text) is None:
        for word in words:
            out.extend(_word_terms(word))
        return out
    for word in words:
        if _CJK.search(word):
            chars = [c for c in word if _CJK.match(c)]
            out.extend(a + b for a, b in zip(chars, chars[1:]))
            out.extend(chars if len(chars) == 1 else ())
            continue
        out.extend(_word_terms(word))
    return out


def term_counts(text: str) -> Counter:
    return Counter(terms(text))


_TOKEN = re.compile(r"#?\w[\w\-]*", re.UNICODE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_QUOTED = re.compile(r"\"([^\"\n]{2,60})\"")
_FILE = re.compile(
    r"[\w\-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|c|h|cpp|rb|php|json|ya?ml|md|txt|csv|html|css|sh|sql|toml|cfg|ini|log|xml)\b")
_FILE_GATE = re.compile(r"\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|c|h|cpp|rb|php|json|ya?ml|md|txt|csv|html|css|sh|sql|toml|cfg|ini|log|xml)\b")
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _add_entity(found: set, token: str) -> None:
    token = token.lower()
    if len(token) >= 3 and token not in STOPWORDS:
        found.add(token.lstrip("#") if token.startswith("#") and len(token) > 3 else token)


def entities(text: str) -> frozenset[str]:
    """Things an agent's next call reuses verbatim: ids and numbers (any token with
    a digit), e-mails, file names, snake_case identifiers, quoted and capitalised names."""
    found: set[str] = set()
    if "@" in text:
        for m in _EMAIL.findall(text):
            _add_entity(found, m)
    if '"' in text:
        for m in _QUOTED.findall(text):
            _add_entity(found, m)
    if _FILE_GATE.search(text):
        for m in _FILE.findall(text):
            _add_entity(found, m)
    for tok in _TOKEN.findall(text):
        first = tok[1] if tok[0] == "#" and len(tok) > 1 else tok[0]
        if any(c.isdigit() for c in tok):
            _add_entity(found, tok)
        elif first.isupper():
            word = tok.lstrip("#")
            if len(word) >= 3 and word.isalpha() and word.isascii():
                _add_entity(found, word)
            elif "-" in word:
                for part in word.split("-"):
                    if len(part) >= 3 and part[0].isupper() and part.isalpha() and part.isascii():
                        _add_entity(found, part)
        elif "_" in tok and _SNAKE.fullmatch(tok):
            _add_entity(found, tok)
    return frozenset(found)


def has_constraint(text: str) -> bool:
    return _CONSTRAINT.search(text) is not None


def looks_like_error(text: str) -> bool:
    return _ERROR.search(text[:2000]) is not None


# "Name: text" transcripts (group chats, meeting notes), optionally after a
# bracketed time stamp: the speaker is who the message is by.
_SPEAKER = re.compile(r"^(?:\[[^\]\n]{1,60}\]\s*)?([A-Z][\w'.-]{1,30}(?: [A-Z][\w'.-]{1,30})?):\s")


def speaker(text: str) -> str | None:
    m = _SPEAKER.match(text)
    return m.group(1).lower() if m else None
