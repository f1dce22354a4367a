"""The Anthropic and Responses taps relay any split of their streams byte for byte and read usage,
the end and errors from the format's own events."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamUnavailable
from gateway.telemetry.usage import usage_from_provider
from gateway.wire.event_taps import AnthropicEventTap, ResponsesEventTap

START_USAGE = {"input_tokens": 40, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000,
               "output_tokens": 1}
RESPONSE_USAGE = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 800}, "output_tokens": 23}


def ev(name: str, payload: dict, sep: bytes = b"\n") -> bytes:
    return b"event: " + name.encode() + sep + b"data: " + orjson.dumps({"type": name, **payload}) + sep + sep


def anthropic_stream(sep: bytes = b"\n") -> list[bytes]:
    return [ev("message_start", {"message": {"id": "msg_1", "content": [], "usage": START_USAGE}}, sep),
            ev("ping", {}, sep),
            ev("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}, sep),
            ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": 'say "message_stop"'}},
               sep),
            ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": " and \"error\""}}, sep),
            ev("content_block_stop", {"index": 0}, sep),
            ev("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 17}}, sep),
            ev("message_stop", {}, sep)]


def responses_stream(sep: bytes = b"\n") -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [], "error": None}
    done = {**response, "status": "completed", "usage": RESPONSE_USAGE}
    return [ev("response.created", {"sequence_number": 0, "response": response}, sep),
            ev("response.output_text.delta", {"sequence_number": 1, "delta": '"response.completed"'}, sep),
            ev("response.output_text.delta", {"sequence_number": 2, "delta": "!"}, sep),
            ev("response.completed", {"sequence_number": 3, "response": done}, sep)]


def run(tap, data: bytes, cuts: list[int]) -> bytes:
    pieces, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        pieces.append(data[start:cut])
        start = cut
    return b"".join(tap.feed(p) for p in pieces) + tap.flush()


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=900), max_size=30), crlf=st.booleans())
def test_anthropic_any_split_relays_the_same_bytes_and_reads_usage(cuts, crlf):
    data = b"".join(anthropic_stream(b"\r\n" if crlf else b"\n"))
    tap = AnthropicEventTap()
    assert run(tap, data, [c for c in cuts if c < len(data)]) == data
    assert tap.finished and tap.error is None and tap.delta_events == 2
    usage = usage_from_provider(tap.usage)
    # message_delta's output count replaces message_start's; the cache parts add to input_tokens.
    assert (usage.prompt_tokens, usage.completion_tokens) == (40 + 300 + 2000, 17)
    assert (usage.cached_read_tokens, usage.cache_write_tokens) == (2000, 300)


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=900), max_size=30), crlf=st.booleans())
def test_responses_any_split_relays_the_same_bytes_and_reads_usage(cuts, crlf):
    data = b"".join(responses_stream(b"\r\n" if crlf else b"\n"))
    tap = ResponsesEventTap()
    assert run(tap, data, [c for c in cuts if c < len(data)]) == data
    assert tap.finished and tap.error is None and tap.delta_events == 2 and tap.sequence == 3
    usage = usage_from_provider(tap.usage)
    assert (usage.prompt_tokens, usage.cached_read_tokens, usage.completion_tokens) == (900, 800, 23)


def test_an_anthropic_stream_without_message_stop_is_not_finished():
    tap = AnthropicEventTap()
    events = anthropic_stream()
    tap.feed(b"".join(events[:-1]))
    assert not tap.finished and tap.usage["output_tokens"] == 17  # what was reported is still charged


def test_the_providers_own_error_events_are_noticed():
    anthropic = AnthropicEventTap()
    anthropic.feed(ev("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}))
    assert anthropic.error == {"type": "overloaded_error", "message": "Overloaded"}
    failed = ResponsesEventTap()
    failed.feed(ev("response.failed", {"sequence_number": 4, "response": {
        "id": "r", "status": "failed", "error": {"code": "server_error", "message": "boom"}}}))
    assert failed.error == {"code": "server_error", "message": "boom"} and not failed.finished
    flat = ResponsesEventTap()
    flat.feed(ev("error", {"code": "rate_limit_exceeded", "message": "slow", "param": None, "sequence_number": 0}))
    assert flat.error["code"] == "rate_limit_exceeded"


def test_sieves_error_event_in_each_format():
    broken = UpstreamUnavailable("the upstream stream broke")
    anthropic = AnthropicEventTap().error_event(broken)
    assert anthropic.startswith(b"event: error\ndata: ") and anthropic.endswith(b"\n\n")
    assert orjson.loads(anthropic.split(b"data: ", 1)[1]) == {"type": "error", "error": {
        "type": "api_error", "message": "the upstream stream broke", "code": "upstream_unavailable"}}
    before_created = ResponsesEventTap().error_event(broken)
    assert orjson.loads(before_created.split(b"data: ", 1)[1]) == {
        "type": "error", "code": "upstream_unavailable", "message": "the upstream stream broke", "param": None,
        "sequence_number": 0}
    tap = ResponsesEventTap()
    tap.feed(b"".join(responses_stream()[:3]))
    failed = orjson.loads(tap.error_event(broken).split(b"data: ", 1)[1])
    assert failed["type"] == "response.failed" and failed["sequence_number"] == 3
    assert failed["response"]["id"] == "resp_1" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "upstream_unavailable", "message": "the upstream stream broke"}
