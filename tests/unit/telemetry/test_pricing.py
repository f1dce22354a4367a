"""PriceBook: litellm's offline map + overrides; exact dollars; unknown models stay unpriced.

Expected amounts are computed from the map entries the tests read, so they
hold for whatever litellm version is installed. At the time of writing:
gpt-4o-mini 1.5e-7 in / 7.5e-8 cached / 6e-7 out; claude-haiku-4-5 1e-6 in /
1e-7 cache read / 1.25e-6 cache write / 5e-6 out.
"""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.telemetry.pricing import Cost, PriceBook, Rates, load_litellm_model_cost
from gateway.telemetry.usage import Usage, usage_from_provider

EXACT = dict(rel=1e-12, abs=0)


def test_openai_usage_without_cached_tokens(book, model_cost):
    e = model_cost["gpt-4o-mini"]
    usage = usage_from_provider({"prompt_tokens": 1000, "completion_tokens": 100})
    cost = book.cost("gpt-4o-mini", usage)
    assert cost.input_usd == pytest.approx(1000 * e["input_cost_per_token"], **EXACT)
    assert cost.cached_read_usd == 0.0 and cost.cache_write_usd == 0.0
    assert cost.output_usd == pytest.approx(100 * e["output_cost_per_token"], **EXACT)
    expected = 1000 * e["input_cost_per_token"] + 100 * e["output_cost_per_token"]
    assert cost.total_usd == pytest.approx(expected, **EXACT)  # 2.1e-4 at 1.5e-7 / 6e-7


def test_openai_usage_with_cached_tokens(book, model_cost):
    e = model_cost["gpt-4o-mini"]
    assert e["cache_read_input_token_cost"] < e["input_cost_per_token"]
    usage = usage_from_provider({"prompt_tokens": 1000, "completion_tokens": 100,
                                 "prompt_tokens_details": {"cached_tokens": 400}})
    cost = book.cost("gpt-4o-mini", usage)
    expected = (600 * e["input_cost_per_token"] + 400 * e["cache_read_input_token_cost"]
                + 100 * e["output_cost_per_token"])
    assert cost.cached_read_usd == pytest.approx(400 * e["cache_read_input_token_cost"], **EXACT)
    assert cost.total_usd == pytest.approx(expected, **EXACT)  # 1.8e-4 at current prices


def test_anthropic_usage_with_cache_read_and_creation(book, model_cost):
    e = model_cost["claude-haiku-4-5"]
    usage = usage_from_provider({"input_tokens": 200, "output_tokens": 80,
                                 "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500})
    cost = book.cost("claude-haiku-4-5", usage)
    assert cost == Cost(
        input_usd=pytest.approx(200 * e["input_cost_per_token"], **EXACT),
        cached_read_usd=pytest.approx(3000 * e["cache_read_input_token_cost"], **EXACT),
        cache_write_usd=pytest.approx(500 * e["cache_creation_input_token_cost"], **EXACT),
        output_usd=pytest.approx(80 * e["output_cost_per_token"], **EXACT),
    )
    expected = (200 * e["input_cost_per_token"] + 3000 * e["cache_read_input_token_cost"]
                + 500 * e["cache_creation_input_token_cost"] + 80 * e["output_cost_per_token"])
    assert cost.total_usd == pytest.approx(expected, **EXACT)  # 1.2250e-3 at current prices


def test_provider_prefixes(book):
    assert book.lookup("openai/gpt-4o-mini").base == book.lookup("gpt-4o-mini").base
    assert book.lookup("anthropic/claude-haiku-4-5").base == book.lookup("claude-haiku-4-5").base
    assert book.lookup("GPT-4o-mini").base == book.lookup("gpt-4o-mini").base


def test_prefix_of_another_host_is_not_priced_as_the_original(book):
    # The bare name exists (as OpenAI's model) but this host may price it differently.
    assert book.lookup("together_ai/gpt-4o-mini") is None


@pytest.mark.parametrize("model", ["no-such-model", "openai/no-such-model", "sample_spec", ""])
def test_unknown_model_is_unpriced(book, model):
    assert book.lookup(model) is None
    assert book.cost(model, Usage(100, 10)) is None


def test_map_entry_without_token_prices_is_unpriced():
    book = PriceBook({"img": {"output_cost_per_image": 0.04, "litellm_provider": "openai"}})
    assert book.lookup("img") is None


def test_override_wins_and_cached_tokens_fall_back_to_input_price(book):
    prices = PriceBook({"gpt-4o-mini": {"input_cost_per_token": 1.0, "output_cost_per_token": 1.0}},
                       {"gpt-4o-mini": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6},
                        "house-model": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}})
    assert prices.lookup("gpt-4o-mini").base == Rates(2e-6, 8e-6, None, None)
    price = prices.lookup("house-model")
    assert not price.has_cached_price
    cost = prices.cost("house-model", Usage(prompt_tokens=1000, completion_tokens=10, cached_read_tokens=600,
                                            cache_write_tokens=100))
    # No cached or write price: the provider bills those tokens as ordinary input.
    assert cost.total_usd == pytest.approx(1000 * 1e-6 + 10 * 2e-6, **EXACT)
    assert cost.cached_read_usd == pytest.approx(600 * 1e-6, **EXACT)


def test_override_with_cache_prices():
    prices = PriceBook({}, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6,
                                  "cache_read_input_token_cost": 1e-7,
                                  "cache_creation_input_token_cost": 1.25e-6}})
    cost = prices.cost("m", Usage(prompt_tokens=1000, completion_tokens=0, cached_read_tokens=500,
                                  cache_write_tokens=300))
    assert cost.total_usd == pytest.approx(200 * 1e-6 + 500 * 1e-7 + 300 * 1.25e-6, **EXACT)


@pytest.mark.parametrize("spec, message", [
    ({"input_cost_per_token": 1e-6}, "required"),
    ({"input_cost_per_token": 1e-6, "output_cost_per_token": -1}, "non-negative"),
    ({"input_cost_per_token": 1e-6, "output_cost_per_token": "cheap"}, "non-negative"),
    ({"input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6, "input_cost": 1}, "unknown key"),
    ("free", "mapping"),
])
def test_override_table_is_strict(spec, message):
    with pytest.raises(ConfigError, match=message):
        PriceBook({}, {"m": spec})


def test_long_context_tier_applies_above_its_threshold():
    prices = PriceBook({"big": {
        "input_cost_per_token": 3e-6, "output_cost_per_token": 1.5e-5, "cache_read_input_token_cost": 3e-7,
        "input_cost_per_token_above_200k_tokens": 6e-6, "output_cost_per_token_above_200k_tokens": 2.25e-5,
        "input_cost_per_token_above_200k_tokens_priority": 99.0,  # another service tier: ignored
    }})
    at = prices.cost("big", Usage(prompt_tokens=200_000, completion_tokens=10))
    assert at.total_usd == pytest.approx(200_000 * 3e-6 + 10 * 1.5e-5, **EXACT)
    above = prices.cost("big", Usage(prompt_tokens=200_001, completion_tokens=10, cached_read_tokens=1))
    # the tier names no cache-read price, so the base one stays
    assert above.total_usd == pytest.approx(200_000 * 6e-6 + 1 * 3e-7 + 10 * 2.25e-5, **EXACT)


def test_litellm_map_is_cached_per_process():
    assert load_litellm_model_cost() is load_litellm_model_cost()


@pytest.mark.parametrize("model, provider, raw", [
    ("gpt-4o-mini", "openai", {"prompt_tokens": 1000, "completion_tokens": 100,
                               "prompt_tokens_details": {"cached_tokens": 400}}),
    ("claude-haiku-4-5", "anthropic", {"prompt_tokens": 3700, "completion_tokens": 80,
                                       "prompt_tokens_details": {"cached_tokens": 3000,
                                                                 "cache_creation_tokens": 500},
                                       "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500}),
])
def test_same_dollars_as_litellms_own_calculator(book, model, provider, raw):
    import litellm  # already imported by the fixture
    from litellm.types.utils import Usage as LitellmUsage

    prompt_usd, completion_usd = litellm.cost_per_token(model=model, custom_llm_provider=provider,
                                                        usage_object=LitellmUsage(**raw))
    cost = book.cost(model, usage_from_provider(raw))
    assert cost.prompt_usd == pytest.approx(prompt_usd, **EXACT)
    assert cost.output_usd == pytest.approx(completion_usd, **EXACT)


def test_hour_long_cache_writes_cost_their_own_price(book, model_cost):
    e = model_cost["claude-haiku-4-5"]
    assert e["cache_creation_input_token_cost_above_1hr"] > e["cache_creation_input_token_cost"]
    usage = usage_from_provider({"input_tokens": 200, "output_tokens": 80, "cache_creation_input_tokens": 500,
                                 "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                                    "ephemeral_1h_input_tokens": 400}})
    cost = book.cost("claude-haiku-4-5", usage)
    assert cost.cache_write_usd == pytest.approx(100 * e["cache_creation_input_token_cost"]
                                                 + 400 * e["cache_creation_input_token_cost_above_1hr"], **EXACT)
    # A model whose map names no hour price bills those writes at its write price.
    plain = PriceBook({}, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
                                 "cache_creation_input_token_cost": 1.25e-6}})
    assert plain.cost("m", usage).cache_write_usd == pytest.approx(500 * 1.25e-6, **EXACT)
    hourly = PriceBook({}, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
                                  "cache_creation_input_token_cost": 1.25e-6,
                                  "cache_creation_input_token_cost_above_1hr": 2e-6}})
    assert hourly.cost("m", usage).cache_write_usd == pytest.approx(100 * 1.25e-6 + 400 * 2e-6, **EXACT)


def test_hour_long_write_prices_have_long_context_tiers_too():
    book = PriceBook({"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
                            "cache_creation_input_token_cost": 1.25e-6,
                            "cache_creation_input_token_cost_above_1hr": 2e-6,
                            "cache_creation_input_token_cost_above_1hr_above_200k_tokens": 4e-6}})
    price = book.lookup("m")
    assert price.base.cache_write_1h == 2e-6
    assert price.rates_for(250_000).cache_write_1h == 4e-6 and price.rates_for(250_000).cache_write == 1.25e-6


def test_twelve_hour_cache_writes_cost_their_own_price(book, model_cost):
    name = next(m for m, e in model_cost.items() if isinstance(e, dict) and e.get("litellm_provider") == "openai"
                and e.get("cache_creation_input_token_cost_above_12hr") and e.get("cache_creation_input_token_cost"))
    e = model_cost[name]
    usage = usage_from_provider({"prompt_tokens": 2000, "completion_tokens": 30,
                                 "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 500,
                                                           "cache_write_tokens_details": {"ttl_30m_tokens": 100,
                                                                                          "ttl_12h_tokens": 400}}})
    # The 30-minute writes have no price of their own: the ordinary write price.
    assert book.cost(name, usage).cache_write_usd == pytest.approx(
        100 * e["cache_creation_input_token_cost"] + 400 * e["cache_creation_input_token_cost_above_12hr"], **EXACT)


def test_output_limit_of_a_model_comes_from_the_map():
    # What a budget reserves for the answer of a request that sets no max_tokens.
    book = PriceBook({"m": {"max_output_tokens": 16_384, "max_tokens": 8}, "legacy": {"max_tokens": 4096},
                      "junk": {"max_output_tokens": "many"}})
    assert book.max_output_tokens("m") == 16_384
    assert book.max_output_tokens("openai/M") == 16_384
    assert book.max_output_tokens("legacy") == 4096
    assert book.max_output_tokens("junk") is None and book.max_output_tokens("unknown") is None
