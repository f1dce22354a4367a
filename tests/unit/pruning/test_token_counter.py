"""Per-text memos: exact counts, bounded in entries and in characters."""

from __future__ import annotations

import tiktoken

from gateway.pruning.memo import TextMemo
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounter


def test_counts_match_tiktoken_and_are_memoised() -> None:
    counter = TokenCounter("cl100k_base")
    text = "Order #W6729841 ships to 12 Main St."
    assert counter.count_text(text) == len(tiktoken.get_encoding("cl100k_base").encode_ordinary(text))
    assert counter.count_text(text) == counter.count_text(text)
    assert len(counter._cache) == 1


def test_the_memo_keeps_the_newest_texts_within_its_character_bound() -> None:
    memo: TextMemo[int] = TextMemo(max_entries=1_000_000, max_chars=100_000)
    texts = [f"message {i:04d} " + "lorem ipsum " * 40 for i in range(2_000)]
    for text in texts:
        memo.put(text, len(text))
    assert memo.chars == sum(len(t) for t in memo) <= 100_000
    assert list(memo) == texts[-(100_000 // len(texts[0])):]
    assert memo.get(texts[0]) is None and memo.get(texts[-1]) == len(texts[-1])


def test_the_memo_keeps_its_entry_bound_and_recency() -> None:
    memo: TextMemo[int] = TextMemo(max_entries=3, max_chars=1_000)
    for text in ("a", "b", "c"):
        memo.put(text, 1)
    memo.get("a")            # used: now the newest
    memo.put("d", 1)
    assert list(memo) == ["c", "a", "d"]  # "b", the least recently used, went first
    memo.put("d", 2)         # a repeated put does not count its characters twice
    assert memo.chars == 3


def test_a_giant_text_is_computed_but_not_kept() -> None:
    counter = TokenCounter("cl100k_base", cache_chars=1_000)
    counter.count_text("small text")
    giant = "word " * 1_000
    assert counter.count_text(giant) == len(tiktoken.get_encoding("cl100k_base").encode_ordinary(giant))
    assert list(counter._cache) == ["small text"]


def test_scorer_features_are_bounded_by_characters_too() -> None:
    scorer = LocalScorer(cache_chars=50_000)
    for i in range(500):
        scorer.features(f"order #{i} " + "refund the lamp please " * 20)
    assert scorer._cache.chars <= 50_000 and 100 <= len(scorer._cache) < 500
