"""The reservation estimate: everything a provider bills for a body, never less.

The provider's side is ``tests.support.provider_billing`` (OpenAI's rules, worked out on
their own): for any body of messages, tools, images, schemas and ``n``, the
estimate is at least what it bills.
"""

from __future__ import annotations

import base64
import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.billing.image_tokens import UNLISTED_MODEL_IMAGE_TOKENS, image_size, image_tokens
from gateway.pruning.tokens import TokenCounters
from gateway.billing.reservation_estimate import estimate_reservation, output_cap
from gateway.telemetry.usage_bounds import Charge, bounded_figures, bounded_usage, usage_is_readable
from gateway.telemetry.metrics import UsageAnomaly
from gateway.telemetry.usage import usage_from_provider
from gateway.wire.formats.registry import WireFormat
from tests.support.provider_billing import openai_usage, png_data_url

COUNT = TokenCounters().for_model("gpt-4o").count_text


def estimate(body: dict, default_output: int = 16_384, fmt: WireFormat = WireFormat.CHAT) -> int:
    return estimate_reservation(fmt, body, COUNT, default_output).tokens


def chat_body(**extra) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}], **extra}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.\nUse it for forecasts too.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "array", "items": {"type": "integer"}}}}}}


def test_output_cap_reads_the_first_field_set_and_refuses_junk():
    assert output_cap({"max_completion_tokens": 200, "max_tokens": 50}, ("max_completion_tokens", "max_tokens"),
                      4096) == 200
    assert output_cap({"max_tokens": None}, ("max_tokens",), 4096) == 4096
    assert output_cap({"max_tokens": 50.0}, ("max_tokens",), 1) == 50  # JSON's 50.0 is the integer 50
    for junk in (50.5, "many", -5, True):
        with pytest.raises(InvalidRequest) as info:
            output_cap({"max_tokens": junk}, ("max_tokens",), 1)
        assert info.value.param == "max_tokens"


def test_n_multiplies_the_output_and_must_be_a_positive_integer():
    one = estimate(chat_body(max_tokens=100))
    assert estimate(chat_body(max_tokens=100, n=4)) == one + 300
    assert estimate(chat_body()) - estimate(chat_body(max_tokens=0)) == 16_384  # no cap: the model's default
    for junk in (0, -1, "4", 2.5, False):
        with pytest.raises(InvalidRequest, match="'n' must be"):
            estimate(chat_body(n=junk))


def test_tools_functions_schemas_and_tool_choice_are_counted():
    plain = estimate(chat_body(max_tokens=10))
    with_tools = estimate(chat_body(max_tokens=10, tools=[WEATHER] * 3))
    assert with_tools - plain >= 3 * COUNT(orjson.dumps(WEATHER).decode())
    assert estimate(chat_body(max_tokens=10, functions=[WEATHER["function"]])) > plain + 40
    schema = {"type": "json_schema", "json_schema": {"name": "r", "schema": WEATHER["function"]["parameters"]}}
    assert estimate(chat_body(max_tokens=10, response_format=schema)) > plain + 40
    assert estimate(chat_body(max_tokens=10, tool_choice={"type": "function", "function": {"name": "x"}})) > plain


def test_image_rule_with_and_without_a_known_size():
    # OpenAI's worked examples (tile rule).
    assert image_tokens("gpt-4o", "high", (1024, 1024)) == 765
    assert image_tokens("gpt-4o", "high", (2048, 4096)) == 1105
    assert image_tokens("gpt-4o", "low", (4096, 4096)) == 85
    assert image_tokens("gpt-4o", None, None) == 85 + 8 * 170  # unknown size: the rule's maximum
    assert image_tokens("openai/gpt-4o-mini", "auto", None) == 2833 + 8 * 5667
    assert image_tokens("gpt-4.1-mini", "low", (1024, 1024)) == 1024 * 162 // 100 + 1  # patches ignore detail
    assert image_tokens("gpt-4.1-mini", None, None) == 2489  # 1,536 patches x 1.62
    assert image_tokens("claude-sonnet-4", None, None) == UNLISTED_MODEL_IMAGE_TOKENS
    # The size is read from an inline image; a URL is never fetched.
    body = chat_body(max_tokens=0, messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is it"},
        {"type": "image_url", "image_url": {"url": png_data_url(1024, 1024)}}]}])
    text_only = chat_body(max_tokens=0, messages=[{"role": "user", "content": [{"type": "text", "text": "what is it"}]}])
    assert estimate(body) - estimate(text_only) == 765
    body["messages"][0]["content"][1] = {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}
    assert estimate(body) - estimate(text_only) == 1445


def test_image_size_from_png_gif_jpeg_and_webp_headers():
    assert image_size(base64.b64decode(png_data_url(640, 480).split(",")[1])) == (640, 480)
    assert image_size(b"GIF89a" + struct.pack("<HH", 33, 44) + b"\0" * 8) == (33, 44)
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\0" * 9
    sof0 = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 300, 500) + b"\0" * 10
    assert image_size(b"\xff\xd8" + app0 + sof0) == (500, 300)
    vp8x = b"RIFF\0\0\0\0WEBPVP8X" + b"\0" * 8 + (799).to_bytes(3, "little") + (599).to_bytes(3, "little")
    assert image_size(vp8x) == (800, 600)
    assert image_size(b"not an image") is None


def test_responses_and_messages_bodies_count_their_own_fields():
    responses = {"model": "gpt-4o", "instructions": "be brief", "input": "hello", "max_output_tokens": 100,
                 "tools": [{"type": "function", **WEATHER["function"]}]}
    assert estimate(responses, fmt=WireFormat.RESPONSES) > 100 + COUNT(orjson.dumps(WEATHER).decode())
    assert estimate({**responses, "max_output_tokens": None}, 5000, WireFormat.RESPONSES) > 5000
    messages = {"model": "claude-sonnet-4", "max_tokens": 100, "system": "be brief",
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "what is it"},
                    {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}]}]}
    plain = estimate(messages, fmt=WireFormat.MESSAGES)
    assert plain > 100 + UNLISTED_MODEL_IMAGE_TOKENS
    with_tools = estimate({**messages, "tools": [{"name": "w", "input_schema": WEATHER["function"]["parameters"]}]},
                          fmt=WireFormat.MESSAGES)
    assert with_tools - plain > 400  # Anthropic's tool-use system prompt and the schema


def test_usage_is_charged_as_reported_under_a_sanity_ceiling():
    """Issue 28: what the provider billed is charged, however far above the reservation (it was
    "absurd" over 4x and charged the reservation, so what the body does not show ran nearly free);
    only a figure above the per-request ceiling is junk: the ceiling is charged, and flagged."""
    assert bounded_usage(900, 1000) == Charge(900, 900)
    assert bounded_usage(351_023, 1000) == Charge(351_023, 351_023)  # 351x the reservation: billed, so charged
    assert bounded_usage(10**20, 1000, ceiling=10_000_000) == Charge(10_000_000, 10**20, UsageAnomaly.CEILING)
    assert bounded_usage(10**15, 1000, ceiling=10**16) == Charge(10**15 - 1, 10**15, UsageAnomaly.CEILING)
    assert bounded_usage(None, 1000) == Charge(1000, None, UsageAnomaly.JUNK)
    assert usage_is_readable({"prompt_tokens": 10, "completion_tokens": 3.0})
    assert usage_is_readable(None)
    for junk in (-5, "12", float("nan"), True, 1.5):
        assert not usage_is_readable({"prompt_tokens": 10, "completion_tokens": junk})


def test_a_usage_over_the_ceiling_is_scaled_under_it_for_the_metrics():
    usage = usage_from_provider({"prompt_tokens": 1e300, "completion_tokens": 10,
                                 "prompt_tokens_details": {"cached_tokens": 1e299}})
    assert usage is not None and usage.prompt_tokens < 10**15  # a figure JSON and the counters can hold
    bounded = bounded_figures(usage, 1_000)
    assert bounded.prompt_tokens + bounded.completion_tokens <= 1_000
    assert bounded.cached_read_tokens <= bounded.prompt_tokens


FLOOR = 50_000


def floored(body: dict, fmt: WireFormat) -> int:
    return estimate_reservation(fmt, body, COUNT, 100, reference_floor=FLOOR).tokens


def test_content_a_body_only_names_is_reserved_at_the_floor():
    """Issue 28: a file by id, a document by URL, a built-in tool: the provider adds what they hold
    (60,000 tokens a document in the adversarial run), which no body shows."""
    chat_file = {"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "sum it up"}, {"type": "file", "file": {"file_id": "file-abc"}}]}]}
    assert floored(chat_file, WireFormat.CHAT) >= FLOOR
    inline = {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}}
    assert floored({**chat_file, "messages": [{"role": "user", "content": [inline]}]}, WireFormat.CHAT) < FLOOR
    assert floored({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                    "web_search_options": {}}, WireFormat.CHAT) >= FLOOR
    for part in ({"type": "input_file", "file_url": "https://x.example/a.pdf"},
                 {"type": "input_file", "file_id": "file-abc"}):
        body = {"model": "gpt-5", "input": [{"role": "user", "content": [part]}]}
        assert floored(body, WireFormat.RESPONSES) >= FLOOR
    tools = {"model": "gpt-5", "input": "news?", "tools": [{"type": "web_search"}, {"type": "file_search"},
                                                           {"type": "function", "name": "f", "parameters": {}}]}
    assert 2 * FLOOR <= floored(tools, WireFormat.RESPONSES) < 3 * FLOOR
    document = {"type": "document", "source": {"type": "url", "url": "https://x.example/a.pdf"}}
    messages = {"model": "claude-sonnet-4-5", "max_tokens": 10,
                "messages": [{"role": "user", "content": [document, {"type": "text", "text": "sum"}]}]}
    assert floored(messages, WireFormat.MESSAGES) >= FLOOR
    searching = {**messages, "messages": [{"role": "user", "content": "news?"}],
                 "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    assert floored(searching, WireFormat.MESSAGES) >= FLOOR
    assert floored({**messages, "messages": [{"role": "user", "content": "hi"}]}, WireFormat.MESSAGES) < FLOOR


words = st.text(st.sampled_from("abcdefghij klmnop_\n.,:{}\"'"), max_size=80)
properties = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "boolean", "number"])},
                          optional={"description": words, "enum": st.lists(words, min_size=1, max_size=4)}),
    max_size=6)
tools = st.lists(st.builds(
    lambda name, description, props: {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]}}},
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=16), words, properties), max_size=5)
images = st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 5000), st.sampled_from(["low", "high", None]),
                            st.booleans()), max_size=3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(words, min_size=1, max_size=5), tools=tools, images=images,
       n=st.integers(1, 8), max_tokens=st.integers(0, 2000))
def test_the_estimate_covers_what_openai_bills(texts, tools, images, n, max_tokens):
    content: list[dict] = [{"type": "text", "text": t} for t in texts]
    for width, height, detail, inline in images:
        url = png_data_url(width, height) if inline else f"https://img.example/x.png?w={width}&h={height}"
        content.append({"type": "image_url", "image_url": {"url": url, **({"detail": detail} if detail else {})}})
    body = {"model": "gpt-4o", "n": n, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": texts[0]}, {"role": "user", "content": content}],
            **({"tools": tools} if tools else {})}
    assert estimate(body) >= openai_usage(body)["total_tokens"]
