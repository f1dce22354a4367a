"""A provider's answer on its way back: ``Reply``, and the one loop that relays a stream.

Both the forward (``exchange/forward.py``) and the pass-through routes
(``exchange/passthrough.py``) relay a provider's events through their format's tap
(``gateway.wire.INGRESSES[fmt].tap()``), so the rules live here once: only whole events
go out; a stream that breaks, or closes cleanly without the format's end (``[DONE]`` or
a finish_reason, ``message_stop``, ``response.completed``), ends with the format's error
event; a provider's own in-stream error is relayed as it came::

    reply = Reply(200, headers, stream=relay_stream(response, tap, StreamEnd(), on_end=account))
    # account(end) runs once the stream is over: end.completed, .provider_error, .failure
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Awaitable, Callable

from gateway.errors import SieveError, UpstreamUnavailable
from gateway.upstream import UpstreamResponse
from gateway.wire import SSEUsageTap

INCOMPLETE = ("the upstream stream ended without [DONE], a finish_reason or the format's end event: "
              "the answer is incomplete")


@dataclass(slots=True)
class Reply:
    """The answer to relay: a whole body, or a stream whose ``on_close`` must run however
    it ends (even when it never started: the client left first, or shutdown)."""

    status: int
    headers: dict[str, str]
    body: bytes | None = None
    stream: AsyncGenerator[bytes, None] | None = None
    on_close: Callable[[], None] | None = None


@dataclass(slots=True)
class StreamEnd:
    """How a relayed stream ended: whole, with the provider's own error event, or cut
    (``failure``: the error Sieve told the client in the format's error event)."""

    completed: bool = False
    provider_error: bool = False
    failure: SieveError | None = None
    disconnected: bool = False  # the client went away (or the server cut the stream) first


async def relay_stream(response: UpstreamResponse, tap: SSEUsageTap, end: StreamEnd,
                       on_event: Callable[[], Awaitable[bool]] | None = None,
                       on_end: Callable[[StreamEnd], None] | None = None) -> AsyncGenerator[bytes, None]:
    """The provider's events as the tap passes them; ``on_event`` runs after each chunk is
    read until it answers True (the forward claims a stored response's id as soon as the
    stream names it),
    ``on_end`` once the stream is over, however it ended (the caller's accounting)."""
    try:
        assert response.chunks is not None
        async for chunk in response.chunks:
            out = tap.feed(chunk)
            if on_event is not None and await on_event():
                on_event = None  # it has done what it waited for
            if out:
                yield out
        tail = tap.flush()
        if tail:
            yield tail
        if tap.error is not None:
            end.provider_error = True  # the provider told the client itself, in-stream
        elif not tap.finished:
            # A clean close is no proof of a whole answer (no chunked framing, a proxy cut it).
            raise UpstreamUnavailable(INCOMPLETE)
        else:
            end.completed = True
    except SieveError as exc:
        # The incomplete event the tap still holds is dropped: the client gets whole events,
        # then one whole error event.
        end.failure = exc
        yield tap.error_event(exc)
    except (asyncio.CancelledError, GeneratorExit):
        end.disconnected = True
        raise
    finally:
        if on_end is not None:
            on_end(end)


def close_quietly(release: Any) -> None:
    """Give a provider's connection back; one that already died needs nothing."""
    try:
        release.release()
    except Exception:  # noqa: BLE001 - closing a dead connection
        pass
