"""The token counter's memo: exact counts, bounded in entries and in characters."""

from __future__ import annotations

import tiktoken

from gateway.pruning.tokens import TokenCounter


def test_counts_match_tiktoken_and_are_memoised() -> None:
    counter = TokenCounter("cl100k_base")
    text = "Order #W6729841 ships to 12 Main St."
    assert counter.count_text(text) == len(tiktoken.get_encoding("cl100k_base").encode_ordinary(text))
    assert counter.count_text(text) == counter.count_text(text)
    assert len(counter._cache) == 1


def test_the_memo_is_bounded_by_characters() -> None:
    counter = TokenCounter("cl100k_base", cache_size=1_000_000, cache_chars=100_000)
    texts = [f"message {i:04d} " + "lorem ipsum " * 40 for i in range(2_000)]
    for text in texts:
        counter.count_text(text)
    assert counter._chars == sum(len(t) for t in counter._cache) <= 100_000
    assert list(counter._cache) == texts[-(100_000 // len(texts[0])):]  # the newest stay


def test_a_giant_text_is_counted_but_not_kept() -> None:
    counter = TokenCounter("cl100k_base", cache_chars=1_000)
    counter.count_text("small text")
    giant = "word " * 1_000
    assert counter.count_text(giant) == len(tiktoken.get_encoding("cl100k_base").encode_ordinary(giant))
    assert list(counter._cache) == ["small text"]
