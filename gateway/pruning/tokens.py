"""Token counting, offline, cached per message content.

The count is the contract of ``x-sieve-target-tokens``: per message, the
tokens of its text content + tool-call names + argument strings, plus 4.
Tool schemas are not counted.

::

    counter = TokenCounters().for_model("gpt-4o-mini")   # o200k_base (+ cl100k_base, see below)
    counter.count_message({"role": "user", "content": "hi"})   # -> 5 (the target rule's count)
    counter.model_tokens({"role": "user", "content": "hi"})    # -> 5 (the model's own, reported)

The target is a promise, so counting for it is conservative (the *target
rule*): for the o200k families a text counts as the larger of its o200k_base
and cl100k_base token counts (they differ by ~3 % on English chat). A client or
a dashboard that counts with the older, more common cl100k_base never sees the
target exceeded.

What is reported (headers, metrics, savings, budgets) is the model's own
encoding (:meth:`TokenCounter.model_tokens`): what the provider bills. Counting
savings with the larger count would overstate them by those ~3 %. Both counts
come from one memo entry, so the second costs nothing.

Counting engine: rs-bpe (Rust bindings of GitHub's ``bpe`` algorithm, both
vocabularies built in, nothing downloaded) counts without building a token
list: 2-3x faster than tiktoken on agent histories, with the same counts
(``tests/unit/test_token_engines.py`` holds them equal on edge cases and fuzzed
text; BENCHMARKS.md on every text of the dev data too). Where rs-bpe is not
installed (it has wheels for Linux x86-64 and arm64 only), tiktoken counts;
``SIEVE_TOKEN_ENGINE`` chooses one outright (``ENGINES``).

tiktoken must never download its vocabularies: the process points it at the
files litellm ships before anything counts
(``gateway.config.prepare_offline_environment``: the CLI, the tests' conftest
and the bench scripts call it first). This module stays pure and does not.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from gateway.pruning.memo import TextMemo
from gateway.pruning.messages import message_token_text
from gateway.pruning.token_pieces import PieceCounter

ENGINES = ("rs-bpe", "tiktoken")  # how text is counted (SIEVE_TOKEN_ENGINE picks one)
PER_MESSAGE_OVERHEAD = 4

# Families tokenized with o200k_base; everything else falls back to cl100k_base.
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")


def encoding_name_for(model: str) -> str:
    name = model.rsplit("/", 1)[-1].lower()
    return "o200k_base" if name.startswith(_O200K_PREFIXES) else "cl100k_base"


# 16 Mi characters: the histories of about 40 conversations of 100k tokens.
DEFAULT_CACHE_CHARS = 16 * 1024 * 1024


def default_engine() -> str:
    """rs-bpe where it is installed (see above), else tiktoken."""
    try:
        import rs_bpe.bpe  # noqa: F401
    except ImportError:
        return "tiktoken"
    return "rs-bpe"


_COUNTERS: dict[tuple[str, str], Callable[[str], int]] = {}


def text_counter(encoding_name: str, engine: str) -> Callable[[str], int]:
    """``text -> tokens`` for one encoding (loaded once per process). Special-token
    text inside user content counts as plain text, as tiktoken's ``encode_ordinary``."""
    key = (encoding_name, engine)
    count = _COUNTERS.get(key)
    if count is None:
        count = _COUNTERS[key] = _rs_bpe_counter(encoding_name) if engine == "rs-bpe" else \
            _tiktoken_counter(encoding_name)
    return count


def _tiktoken_counter(encoding_name: str) -> Callable[[str], int]:
    import tiktoken  # noqa: PLC0415 - only the fallback engine needs it (and its import time)

    encode = tiktoken.get_encoding(encoding_name).encode_ordinary
    return lambda text: len(encode(text))


def _rs_bpe_counter(encoding_name: str) -> Callable[[str], int]:
    from rs_bpe.bpe import openai as rs_bpe_openai

    count = getattr(rs_bpe_openai, encoding_name)().count

    def count_text(text: str) -> int:
        try:
            return count(text)
        except UnicodeEncodeError:
            # A lone surrogate (JSON allows "\ud800") is not UTF-8: repair it the way
            # tiktoken does before it encodes, so both engines count the same.
            return count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))

    # rs-bpe's own count, for a caller that repairs on UnicodeEncodeError itself
    # (token_pieces: one Python call less per piece it counts).
    count_text.raw = count  # type: ignore[attr-defined]
    return count_text


class TokenCounter:
    """Counts message tokens with one encoding (two under the target rule); memoises text counts.

    The memo is keyed by the token text itself (a dict lookup hashes it once) and
    bounded in entries and characters (:class:`gateway.pruning.memo.TextMemo`).
    """

    def __init__(self, encoding_name: str = "cl100k_base", cache_size: int = 200_000,
                 cache_chars: int = DEFAULT_CACHE_CHARS, engine: str | None = None) -> None:
        self.encoding_name = encoding_name
        self.engine = engine or default_engine()
        if self.engine not in ENGINES:
            raise ValueError(f"token engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        model = text_counter(encoding_name, self.engine)
        # Each distinct space-led piece of the texts is counted once (token_pieces: the same numbers).
        if encoding_name == "cl100k_base":
            self._counts = PieceCounter(model)
        else:
            both = PieceCounter(model, text_counter("cl100k_base", self.engine))
            self._counts = lambda text: (max(counts := both(text)), counts[0])
        # text -> (tokens under the target rule, tokens in the model's own encoding)
        self._cache: TextMemo[tuple[int, int]] = TextMemo(cache_size, cache_chars)

    def _pair(self, text: str) -> tuple[int, int]:
        pair = self._cache.get(text)
        if pair is None:
            pair = self._cache.put(text, self._counts(text) if text else (0, 0))
        return pair

    def count_text(self, text: str) -> int:
        """Tokens of a text under the target rule (the larger count, see above)."""
        return self._pair(text)[0]

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of a message under the target rule: what ``x-sieve-target-tokens`` bounds."""
        return self._pair(message_token_text(message))[0] + PER_MESSAGE_OVERHEAD

    def count_messages(self, messages: list[Mapping[str, Any]]) -> int:
        return sum(self.count_message(m) for m in messages)

    def model_tokens(self, message: Mapping[str, Any]) -> int:
        """Tokens of a message in the model's own encoding: what is reported and billed."""
        return self._pair(message_token_text(message))[1] + PER_MESSAGE_OVERHEAD

    def message_counts(self, message: Mapping[str, Any]) -> tuple[int, int]:
        """Both counts of a message (target rule, model encoding), its text read once."""
        target_rule, model = self._pair(message_token_text(message))
        return target_rule + PER_MESSAGE_OVERHEAD, model + PER_MESSAGE_OVERHEAD


class TokenCounters:
    """One shared counter per encoding (so caches are shared across requests)."""

    def __init__(self, cache_size: int = 200_000, engine: str | None = None) -> None:
        self._by_encoding: dict[str, TokenCounter] = {}
        self._cache_size = cache_size
        self.engine = engine or default_engine()

    def warm(self) -> None:
        """Load both encodings up front (a few hundred ms, once per process)."""
        self.for_model("gpt-4o").count_text("warm")
        self.for_model("other").count_text("warm")

    def for_model(self, model: str) -> TokenCounter:
        name = encoding_name_for(model)
        counter = self._by_encoding.get(name)
        if counter is None:
            counter = self._by_encoding[name] = TokenCounter(name, self._cache_size, engine=self.engine)
        return counter
