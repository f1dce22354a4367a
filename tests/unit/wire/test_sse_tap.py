"""The SSE tap relays any byte stream, however it is split into chunks, and reads usage on the way."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.wire.sse import MAX_HELD_BYTES, SSEUsageTap

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def event(payload, sep: bytes = b"\n") -> bytes:
    return b"data: " + orjson.dumps(payload) + sep + sep


def delta(text: str, sep: bytes = b"\n", finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}, sep)


def stream(sep: bytes = b"\n") -> list[bytes]:
    return [delta("a", sep), b": comment" + sep + sep, b"data: {not json" + sep + sep, delta("b", sep, "stop"),
            event({"choices": [], "usage": USAGE}, sep), b"data: [DONE]" + sep + sep]


def run(tap: SSEUsageTap, data: bytes, cuts: list[int]) -> tuple[bytes, list[bytes]]:
    pieces, start = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        pieces.append(data[start:cut])
        start = cut
    outs = [tap.feed(p) for p in pieces]
    return b"".join(outs) + tap.flush(), outs


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=30), crlf=st.booleans(),
       strip=st.booleans())
def test_any_split_relays_the_same_bytes(cuts, crlf, strip):
    events = stream(b"\r\n" if crlf else b"\n")
    data = b"".join(events)
    tap = SSEUsageTap(strip)
    out, pieces = run(tap, data, [c for c in cuts if c < len(data)])
    assert out == (b"".join(e for e in events if b'"usage"' not in e) if strip else data)
    assert tap.usage == USAGE and tap.finished and tap.delta_events == 2
    for piece in pieces:  # only whole events ever go out
        assert piece == b"" or piece.endswith(b"\n\n") or piece.endswith(b"\r\n\r\n")


def test_a_last_event_without_its_blank_line_goes_out_at_the_end_and_is_read():
    tap = SSEUsageTap(strip_usage_chunk=False)
    last = event({"choices": [], "usage": USAGE}).rstrip(b"\n")
    assert tap.feed(delta("a") + last) == delta("a")
    assert tap.flush() == last and tap.usage == USAGE
    stripping = SSEUsageTap(strip_usage_chunk=True)
    assert stripping.feed(delta("a") + last) + stripping.flush() == delta("a")


def test_a_torn_event_is_held_and_never_sent_unless_flushed():
    tap = SSEUsageTap(strip_usage_chunk=False)
    assert tap.feed(delta("a") + delta("b")[:10]) == delta("a")
    assert not tap.finished  # no finish_reason, no [DONE]: the caller ends with an error, not flush()


def test_bytes_without_any_event_boundary_are_not_held_forever():
    tap = SSEUsageTap(strip_usage_chunk=False)
    blob = b"x" * (64 * 1024)
    sent = b"".join(tap.feed(blob) for _ in range(MAX_HELD_BYTES // len(blob) + 2))
    assert 0 < len(sent) and len(sent) + len(tap.flush()) == len(blob) * (MAX_HELD_BYTES // len(blob) + 2)


def test_the_providers_error_event_is_noticed_and_passed_on():
    tap = SSEUsageTap(strip_usage_chunk=True)
    error = event({"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}})
    quoted = delta('he said "error" twice')  # the word in content is not an error event
    assert tap.feed(quoted) == quoted and tap.error is None
    assert tap.feed(error) == error and tap.error["message"] == "overloaded"
