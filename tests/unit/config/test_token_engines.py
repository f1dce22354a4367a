"""The two counting engines count the same: rs-bpe is a faster way to the same numbers.

The cap is a promise in tiktoken's counts (the tokenizer providers and clients
use), so rs-bpe may only replace it where it agrees token for token. These
tests hold the engines equal on text built to find disagreements: BPE merges
across scripts, digit runs, whitespace runs, contractions, special-token text
and lone surrogates.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ConfigError
from gateway.pruning.tokens import TokenCounter, TokenCounters, text_counter
from gateway.config.settings import Settings

pytest.importorskip("rs_bpe.bpe", reason="rs-bpe has wheels for Linux x86-64 and arm64 only")

ENCODINGS = ("o200k_base", "cl100k_base")

# Pieces where BPE pre-tokenizers differ most: letters of several scripts,
# marks, digits in runs, whitespace in runs, contractions, symbols, emoji.
PIECES = st.sampled_from([
    "a", "Z", "0", "7", " ", "  ", "\n", "\n\n", "\t", "\r\n", ".", ",", "'", "\"", "-", "_", "#", "@", "/",
    "{", "}", "[", "]", ":", "'s", "'LL", "'re", "é", "ß", "ﬁ", "中", "文", "д", "я", "١", "Ⅻ", "１２",
    "😀", "👍🏽", "\u200b", "\u0301", "\u00a0", "’", "<|endoftext|>", "<|im_start|>", "x̃", "ab",
])
TEXTS = st.lists(PIECES, max_size=60).map("".join) | st.text(max_size=200)

EDGE_CASES = [
    "",
    "<|endoftext|> is plain text here",
    "a" * 5_000,
    " " * 3_000 + "x",
    "\n" * 1_000 + "y",
    "1" * 4_000,
    "😀" * 500,
    "don't 'S 'LL I'M we'VE",
    "Привет, мир! Как дела?",
    "订单 #W4219264 已发货，请勿重复下单。",
    json.dumps({"order_id": "#W4219264", "items": [{"item_id": "6469567736", "price": 47.84}]}),
    "a\ud800b",           # a lone surrogate: JSON can carry one
    "\udfff" * 3,
]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_engines_agree_on_edge_cases(encoding: str) -> None:
    fast, reference = text_counter(encoding, "rs-bpe"), text_counter(encoding, "tiktoken")
    for text in EDGE_CASES:
        assert fast(text) == reference(text), repr(text[:60])


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_engines_agree_on_any_text(text: str) -> None:
    for encoding in ENCODINGS:
        assert text_counter(encoding, "rs-bpe")(text) == text_counter(encoding, "tiktoken")(text), encoding


def test_a_counter_keeps_the_engine_it_was_given() -> None:
    message = {"role": "user", "content": "Привет, hello <|endoftext|>",
               "tool_calls": [{"function": {"name": "find", "arguments": "{\"q\": \"лампа\"}"}}]}
    counts = {engine: TokenCounters(engine=engine).for_model("gpt-4o-mini") for engine in ("rs-bpe", "tiktoken")}
    assert {engine: c.engine for engine, c in counts.items()} == {"rs-bpe": "rs-bpe", "tiktoken": "tiktoken"}
    assert counts["rs-bpe"].message_counts(message) == counts["tiktoken"].message_counts(message)
    with pytest.raises(ValueError, match="rs-bpe, tiktoken"):
        TokenCounter("cl100k_base", engine="sentencepiece")


def test_the_engine_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env({"SIEVE_TOKEN_ENGINE": "TikToken"}).token_engine == "tiktoken"
    assert Settings.from_env({"SIEVE_TOKEN_ENGINE": "rs-bpe"}).token_engine == "rs-bpe"
    assert Settings.from_env({}).token_engine is None
    with pytest.raises(ConfigError, match="SIEVE_TOKEN_ENGINE must be one of rs-bpe, tiktoken"):
        Settings.from_env({"SIEVE_TOKEN_ENGINE": "fast"})
    # Asked for by name on a machine without it: a start-up error that says so, not a traceback later.
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rs_bpe" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match="rs-bpe is not installed"):
        Settings.from_env({"SIEVE_TOKEN_ENGINE": "rs-bpe"})
