"""Provider usage blocks normalise to one Usage whose prompt_tokens is the billed total."""

from __future__ import annotations

import pytest

from gateway.config.settings import prepare_offline_environment
from gateway.telemetry.usage import Usage, usage_from_provider


def test_openai_without_cache():
    u = usage_from_provider({"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100})
    assert u == Usage(prompt_tokens=1000, completion_tokens=100, cached_read_tokens=0, cache_write_tokens=0)


def test_openai_with_cached_tokens_includes_them_in_prompt():
    u = usage_from_provider({"prompt_tokens": 1000, "completion_tokens": 100,
                             "prompt_tokens_details": {"cached_tokens": 400, "audio_tokens": 0}})
    assert u == Usage(1000, 100, 400, 0)
    assert u.uncached_prompt_tokens == 600


def test_openai_null_details():
    u = usage_from_provider({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None})
    assert u == Usage(10, 2, 0, 0)


def test_anthropic_input_tokens_exclude_cache_reads_and_writes():
    u = usage_from_provider({"input_tokens": 200, "output_tokens": 80,
                             "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500})
    assert u == Usage(prompt_tokens=3700, completion_tokens=80, cached_read_tokens=3000, cache_write_tokens=500)
    assert u.uncached_prompt_tokens == 200


def test_anthropic_null_cache_fields():
    u = usage_from_provider({"input_tokens": 12, "output_tokens": 3,
                             "cache_read_input_tokens": None, "cache_creation_input_tokens": None})
    assert u == Usage(12, 3, 0, 0)


def test_litellm_openai_shape_with_anthropic_fields_is_not_double_counted():
    # What litellm returns for an Anthropic call: prompt_tokens already holds
    # input + reads + writes; the same reads/writes appear under three names.
    raw = {"prompt_tokens": 1200, "completion_tokens": 50, "total_tokens": 1250,
           "prompt_tokens_details": {"cached_tokens": 800, "cache_creation_tokens": 300,
                                     "cache_write_tokens": 300},
           "cache_read_input_tokens": 800, "cache_creation_input_tokens": 300}
    assert usage_from_provider(raw) == Usage(1200, 50, 800, 300)


def test_prompt_tokens_that_cannot_include_the_cache_parts_get_them_added():
    # reads + writes > prompt_tokens: prompt_tokens followed Anthropic's meaning.
    raw = {"prompt_tokens": 100, "completion_tokens": 5,
           "cache_read_input_tokens": 500, "cache_creation_input_tokens": 50}
    assert usage_from_provider(raw) == Usage(650, 5, 500, 50)


def test_openai_responses_shape_input_tokens_include_cached():
    raw = {"input_tokens": 1000, "output_tokens": 10, "input_tokens_details": {"cached_tokens": 400}}
    assert usage_from_provider(raw) == Usage(1000, 10, 400, 0)


def test_deepseek_cache_hit_tokens():
    raw = {"prompt_tokens": 900, "completion_tokens": 9, "prompt_cache_hit_tokens": 600,
           "prompt_cache_miss_tokens": 300}
    assert usage_from_provider(raw) == Usage(900, 9, 600, 0)


@pytest.mark.parametrize("raw", [None, {}, {"total_tokens": 5}, "junk", 42])
def test_nothing_readable_gives_none(raw):
    assert usage_from_provider(raw) is None


def test_junk_values_count_as_zero():
    assert usage_from_provider({"prompt_tokens": "x", "completion_tokens": -3}) == Usage(0, 0, 0, 0)


def test_litellm_usage_objects():
    prepare_offline_environment()
    from litellm.types.utils import PromptTokensDetailsWrapper
    from litellm.types.utils import Usage as LitellmUsage

    plain = LitellmUsage(prompt_tokens=10, completion_tokens=5)
    assert usage_from_provider(plain) == Usage(10, 5, 0, 0)
    cached = LitellmUsage(prompt_tokens=1200, completion_tokens=50,
                          prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=800,
                                                                           cache_creation_tokens=300),
                          cache_read_input_tokens=800, cache_creation_input_tokens=300)
    assert usage_from_provider(cached) == Usage(1200, 50, 800, 300)


def test_hour_long_cache_writes_are_told_apart():
    native = usage_from_provider({"input_tokens": 200, "output_tokens": 80, "cache_read_input_tokens": 3000,
                                  "cache_creation_input_tokens": 500,
                                  "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                                     "ephemeral_1h_input_tokens": 400}})
    assert native == Usage(3700, 80, 3000, 500, cache_write_1h_tokens=400)
    # An hour's writes can never be more than the writes (a malformed split is clamped).
    clamped = usage_from_provider({"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 50,
                                   "cache_creation": {"ephemeral_1h_input_tokens": 900}})
    assert clamped.cache_write_1h_tokens == 50


def test_litellm_reports_hour_long_writes_in_its_details():
    prepare_offline_environment()
    from litellm.types.utils import CacheCreationTokenDetails, PromptTokensDetailsWrapper
    from litellm.types.utils import Usage as LitellmUsage

    usage = LitellmUsage(prompt_tokens=1200, completion_tokens=50, cache_read_input_tokens=800,
                         cache_creation_input_tokens=300,
                         prompt_tokens_details=PromptTokensDetailsWrapper(
                             cached_tokens=800, cache_creation_tokens=300,
                             cache_creation_token_details=CacheCreationTokenDetails(ephemeral_1h_input_tokens=300)))
    assert usage_from_provider(usage) == Usage(1200, 50, 800, 300, cache_write_1h_tokens=300)


def test_twelve_hour_cache_writes_in_openai_shapes():
    chat = usage_from_provider({"prompt_tokens": 2000, "completion_tokens": 30,
                                "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 500,
                                                          "cache_write_tokens_details": {"ttl_30m_tokens": 100,
                                                                                         "ttl_12h_tokens": 400}}})
    assert chat == Usage(2000, 30, 1000, 500, cache_write_1h_tokens=0, cache_write_12h_tokens=400)
    # The Responses shape: input_tokens includes its cached reads and its writes.
    responses = usage_from_provider({"input_tokens": 2000, "output_tokens": 30,
                                     "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 500,
                                                              "cache_write_tokens_details": {"ttl_30m_tokens": 500,
                                                                                             "ttl_12h_tokens": 0}}})
    assert responses == Usage(2000, 30, 1000, 500)
    assert responses.uncached_prompt_tokens == 500


def test_litellm_reports_twelve_hour_writes_in_its_details():
    prepare_offline_environment()
    from litellm.types.utils import CacheCreationTokenDetails, PromptTokensDetailsWrapper
    from litellm.types.utils import Usage as LitellmUsage

    usage = LitellmUsage(prompt_tokens=1200, completion_tokens=50,
                         prompt_tokens_details=PromptTokensDetailsWrapper(
                             cached_tokens=800, cache_write_tokens=300,
                             cache_creation_token_details=CacheCreationTokenDetails(ephemeral_30m_input_tokens=100,
                                                                                    ephemeral_12h_input_tokens=200)))
    assert usage_from_provider(usage) == Usage(1200, 50, 800, 300, cache_write_12h_tokens=200)
