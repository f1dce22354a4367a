"""Which requests say that more steps of their conversation follow (``gateway.wire.continuation``)."""

from __future__ import annotations

from gateway.wire.continuation import more_steps_follow
from gateway.wire.formats import WireFormat

CACHE = {"type": "ephemeral"}
TURNS = [{"role": "user", "content": "hi"}]


def test_a_named_conversation_goes_on_in_every_format():
    for fmt in WireFormat:
        assert more_steps_follow({"model": "m"}, fmt, "conv-1")
        assert not more_steps_follow({"model": "m"}, fmt)


def test_openai_formats_go_on_with_a_prompt_cache_key():
    for fmt in (WireFormat.CHAT, WireFormat.RESPONSES):
        assert more_steps_follow({"model": "m", "prompt_cache_key": "session-7"}, fmt)
        for junk in ("", None, 7, {"k": 1}):
            assert not more_steps_follow({"model": "m", "prompt_cache_key": junk}, fmt)
    # An Anthropic field means nothing on an OpenAI body.
    assert not more_steps_follow({"model": "m", "cache_control": CACHE}, WireFormat.CHAT)


def test_anthropic_goes_on_with_a_breakpoint_anywhere():
    marked = [
        {"cache_control": CACHE, "messages": TURNS},
        {"system": [{"type": "text", "text": "s", "cache_control": CACHE}], "messages": TURNS},
        {"tools": [{"name": "t", "input_schema": {}, "cache_control": CACHE}], "messages": TURNS},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": CACHE}]}]},
    ]
    for body in marked:
        assert more_steps_follow(body, WireFormat.MESSAGES), body
    unmarked = [
        {"system": "s", "messages": TURNS},
        {"system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": "yes"}]}, 3]},
        {"prompt_cache_key": "k", "messages": TURNS},  # an OpenAI field means nothing here
    ]
    for body in unmarked:
        assert not more_steps_follow(body, WireFormat.MESSAGES), body
