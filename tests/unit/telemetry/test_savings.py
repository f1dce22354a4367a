"""The savings record: counterfactual − actual − scorer, honestly, and negative when it is."""

from __future__ import annotations

import pytest

from gateway.telemetry.pricing import PriceBook
from gateway.telemetry.savings import OriginalPrompt, cached_prefix_messages, savings_for_request
from gateway.telemetry.usage import Usage, usage_from_provider

EXACT = dict(rel=1e-12, abs=1e-18)

# A fixed price table, so the numbers below are literal dollars.
FIXED = PriceBook({}, {"cachey": {"input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7,
                                  "cache_read_input_token_cost": 7.5e-8},
                       "flat": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}})

# The previous unpruned request was messages a..d; this one adds e, f.
TOKENS = [2000, 3000, 3000, 1000, 500, 500]  # 10,000 message tokens
FPS = ["a", "b", "c", "d", "e", "f"]
PREVIOUS = ["a", "b", "c", "d"]


def test_pruning_that_breaks_the_cached_prefix_is_a_net_loss_in_literal_dollars():
    # Sieve dropped b (3,000 tokens): 7,000 message tokens forwarded, +200 tokens of
    # tool schemas. The provider saw a new prefix, so nothing was read from cache.
    usage = Usage(prompt_tokens=7200, completion_tokens=100, cached_read_tokens=0)
    r = savings_for_request(FIXED, model="cachey", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000, usage=usage,
                            scorer_usd=5e-5)
    # Unpruned: 10,200 prompt tokens, of which a..d (9,000) + the 200 overhead were cached.
    assert (r.counterfactual_prompt_tokens, r.counterfactual_cached_tokens) == (10_200, 9_200)
    # 1,000 × 1.5e-7 + 9,200 × 7.5e-8 + 100 × 6e-7 = 0.00015 + 0.00069 + 0.00006
    assert r.counterfactual_usd == pytest.approx(0.00090, **EXACT)
    # 7,200 × 1.5e-7 + 100 × 6e-7 = 0.00108 + 0.00006
    assert r.actual_usd == pytest.approx(0.00114, **EXACT)
    # 0.00090 − 0.00114 − 0.00005: 3,000 tokens "saved", 29 hundredths of a cent lost.
    assert r.net_usd == pytest.approx(-0.00029, **EXACT)
    assert r.net_usd < 0 and r.saved_tokens == 3000 and r.priced


def test_broken_prefix_on_the_real_map_anthropic_shape(book, model_cost):
    e = model_cost["claude-haiku-4-5"]
    i, rd, wr, o = (e["input_cost_per_token"], e["cache_read_input_token_cost"],
                    e["cache_creation_input_token_cost"], e["output_cost_per_token"])
    # The pruned request was written to cache afresh (7,000 tokens), none read.
    usage = usage_from_provider({"input_tokens": 200, "output_tokens": 100,
                                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 7000})
    r = savings_for_request(book, model="anthropic/claude-haiku-4-5", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000,
                            usage=usage, scorer_usd=1e-4)
    # Counterfactual: 10,200 prompt; 9,200 read; writes capped at its uncached 1,000; 0 plain input.
    assert (r.counterfactual_prompt_tokens, r.counterfactual_cached_tokens,
            r.counterfactual_cache_write_tokens) == (10_200, 9_200, 1_000)
    cf = 9200 * rd + 1000 * wr + 100 * o
    actual = 200 * i + 7000 * wr + 100 * o
    assert r.counterfactual_usd == pytest.approx(cf, **EXACT)   # 0.00267 at current prices
    assert r.actual_usd == pytest.approx(actual, **EXACT)       # 0.00945
    assert r.net_usd == pytest.approx(cf - actual - 1e-4, **EXACT)  # −0.00688
    assert r.net_usd < 0


def test_hour_long_writes_are_priced_as_such_on_both_sides(book, model_cost):
    e = model_cost["claude-haiku-4-5"]
    rd, wr, hr, o = (e["cache_read_input_token_cost"], e["cache_creation_input_token_cost"],
                     e["cache_creation_input_token_cost_above_1hr"], e["output_cost_per_token"])
    # As above, but the client asked for an hour's cache: 6,000 of the 7,000 writes live 1 h.
    usage = usage_from_provider({"input_tokens": 200, "output_tokens": 100, "cache_creation_input_tokens": 7000,
                                 "cache_creation": {"ephemeral_5m_input_tokens": 1000,
                                                    "ephemeral_1h_input_tokens": 6000}})
    r = savings_for_request(book, model="anthropic/claude-haiku-4-5", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000,
                            usage=usage, scorer_usd=0.0)
    # The unpruned request would have written its uncached 1,000; counted as the cheaper
    # 5-minute writes while the actual request had as many (the saving stays a lower bound).
    assert r.counterfactual_cache_write_tokens == 1000
    assert r.counterfactual_usd == pytest.approx(9200 * rd + 1000 * wr + 100 * o, **EXACT)
    assert r.actual_usd == pytest.approx(200 * e["input_cost_per_token"] + 1000 * wr + 6000 * hr + 100 * o, **EXACT)
    # Only hour-long writes: the counterfactual's are hour-long too.
    hourly = usage_from_provider({"input_tokens": 200, "output_tokens": 100, "cache_creation_input_tokens": 7000,
                                  "cache_creation": {"ephemeral_1h_input_tokens": 7000}})
    r = savings_for_request(book, model="anthropic/claude-haiku-4-5", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000,
                            usage=hourly, scorer_usd=0.0)
    assert r.counterfactual_usd == pytest.approx(9200 * rd + 1000 * hr + 100 * o, **EXACT)


def test_twelve_hour_writes_follow_the_same_rule():
    book = PriceBook({}, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
                                "cache_read_input_token_cost": 1e-7, "cache_creation_input_token_cost": 1.25e-6,
                                "cache_creation_input_token_cost_above_12hr": 2.5e-6}})
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100,
                                 "prompt_tokens_details": {"cache_write_tokens": 7000,
                                                           "cache_write_tokens_details": {"ttl_30m_tokens": 600,
                                                                                          "ttl_12h_tokens": 6400}}})
    r = savings_for_request(book, model="m", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000, usage=usage, scorer_usd=0.0)
    # 1,000 counterfactual writes: 600 as the actual short ones, the other 400 as 12-hour ones.
    assert r.counterfactual_cache_write_tokens == 1000
    assert r.counterfactual_usd == pytest.approx(9200 * 1e-7 + 600 * 1.25e-6 + 400 * 2.5e-6 + 100 * 2e-6, **EXACT)
    assert r.actual_usd == pytest.approx(200 * 1e-6 + 600 * 1.25e-6 + 6400 * 2.5e-6 + 100 * 2e-6, **EXACT)


def test_pruning_that_keeps_the_cached_prefix_saves(book, model_cost):
    e = model_cost["gpt-4o-mini"]
    i, rd, o = e["input_cost_per_token"], e["cache_read_input_token_cost"], e["output_cost_per_token"]
    # An earlier epoch masked c; its frozen, byte-identical prefix was cached: 5,000 + 200.
    usage = usage_from_provider({"prompt_tokens": 7200, "completion_tokens": 100,
                                 "prompt_tokens_details": {"cached_tokens": 5200}})
    r = savings_for_request(book, model="openai/gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000,
                            usage=usage, scorer_usd=0.0)
    cf = 1000 * i + 9200 * rd + 100 * o
    actual = 2000 * i + 5200 * rd + 100 * o
    assert r.counterfactual_usd == pytest.approx(cf, **EXACT)
    assert r.actual_usd == pytest.approx(actual, **EXACT)
    assert r.net_usd == pytest.approx(cf - actual, **EXACT)
    assert r.net_usd > 0


def test_unchanged_request_has_counterfactual_equal_to_actual(book):
    usage = Usage(prompt_tokens=10_200, completion_tokens=100, cached_read_tokens=8_960)
    r = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=10_000, usage=usage,
                            scorer_usd=2e-5)
    assert r.counterfactual_usd == r.actual_usd
    assert r.counterfactual_cached_tokens == 8_960
    assert r.net_usd == pytest.approx(-2e-5, **EXACT)


def test_pruned_flag_overrides_the_token_inference(book):
    usage = Usage(prompt_tokens=10_200, completion_tokens=100)
    r = savings_for_request(book, model="gpt-4o-mini", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=10_000, usage=usage, pruned=True)
    assert r.counterfactual_cached_tokens == 9_200  # the counterfactual is modelled, not copied


def test_unpriced_model():
    r = savings_for_request(FIXED, model="mystery-1", original=OriginalPrompt(TOKENS, FPS, None), forwarded_tokens=7000,
                            usage=Usage(7200, 100), scorer_usd=3e-5)
    assert not r.priced
    assert (r.counterfactual_usd, r.actual_usd) == (0.0, 0.0)
    assert r.net_usd == pytest.approx(-3e-5, **EXACT)  # the scorer was paid regardless
    assert (r.original_tokens, r.forwarded_tokens, r.completion_tokens) == (10_000, 7000, 100)


def test_no_usage_reported_is_unpriced():
    r = savings_for_request(FIXED, model="cachey", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=None)
    assert not r.priced and r.net_usd == 0.0


def test_model_without_cached_price_gets_no_counterfactual_cache():
    usage = Usage(prompt_tokens=7200, completion_tokens=100, cached_read_tokens=0)
    r = savings_for_request(FIXED, model="flat", original=OriginalPrompt(TOKENS, FPS, PREVIOUS),
                            forwarded_tokens=7000, usage=usage)
    assert r.counterfactual_cached_tokens == 0
    assert r.counterfactual_usd == pytest.approx(10_200 * 1e-6 + 100 * 2e-6, **EXACT)
    assert r.net_usd == pytest.approx(3000 * 1e-6, **EXACT)


def test_counterfactual_never_caches_less_than_the_actual_request():
    # No previous request known, but the provider cached a shared 1,024-token prefix.
    usage = Usage(prompt_tokens=7200, completion_tokens=0, cached_read_tokens=1024)
    r = savings_for_request(FIXED, model="cachey", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=usage)
    assert r.counterfactual_cached_tokens == 1024
    assert r.net_usd == pytest.approx(3000 * 1.5e-7, **EXACT)


def test_negative_overhead_does_not_inflate_the_counterfactual():
    # Our per-message estimate ran 100 tokens above the provider's count.
    usage = Usage(prompt_tokens=6900, completion_tokens=0)
    r = savings_for_request(FIXED, model="flat", original=OriginalPrompt(TOKENS, FPS, None),
                            forwarded_tokens=7000, usage=usage)
    assert r.overhead_tokens == 0
    assert r.counterfactual_prompt_tokens == 9900
    assert r.net_usd == pytest.approx(3000 * 1e-6, **EXACT)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        savings_for_request(FIXED, model="flat", original=OriginalPrompt([1, 2], ["a"], None),
                            forwarded_tokens=3, usage=Usage(3, 0))


@pytest.mark.parametrize("original, previous, n", [
    (["a", "b", "c"], None, 0),
    (["a", "b", "c"], [], 0),
    (["a", "b", "c"], ["a", "b"], 2),
    (["a", "b", "c"], ["a", "x", "c"], 1),
    (["a", "b"], ["a", "b", "c"], 2),  # the client removed its last message
    (["x", "b"], ["a", "b"], 0),
])
def test_cached_prefix_is_whole_leading_messages(original, previous, n):
    assert cached_prefix_messages(original, previous) == n
