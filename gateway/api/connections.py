"""The HTTP protocol each client connection is served with: uvicorn's, with a deadline and a
size bound on every request's headers (``gateway.api.app.uvicorn_config`` installs it).

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``, armed after a
response and cancelled by the first byte that follows) and the app bounds the body
(``SIEVE_BODY_TIMEOUT_S``), but nothing bounds the headers: a client that opens a
connection and sends a header line every few seconds (slowloris) holds the connection,
its file descriptor and its buffers for as long as it likes, and a few hundred such
clients exhaust a replica without sending a single request. Its default parser
(httptools) has no size bound on headers either. So each connection gets a deadline
for its headers, counted from the connection's opening or the end of the previous
response: ``SIEVE_HEADER_TIMEOUT_S``, then 408 and the connection is closed (closed
without a word when not one byte of a request arrived). Header bytes that keep coming
without the headers ending are cut off at :func:`raw_header_bound` (431). The
``SIEVE_MAX_HEADER_BYTES`` check of complete headers stays the app's
(:mod:`gateway.api.access`), with its OpenAI-shaped 431.
"""

from __future__ import annotations

import asyncio

import orjson
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from gateway.errors import HeadersTooLarge, RequestTimeout, SieveError

# Room for the request line and the ": " and CRLF of every header line beyond the
# headers' own bytes, which is all SIEVE_MAX_HEADER_BYTES counts.
REQUEST_LINE_ALLOWANCE = 16 * 1024


def raw_header_bound(max_header_bytes: int) -> int:
    """Bytes a client may send before its headers end: twice the headers' own limit and the
    request line, so that headers merely over the limit still reach the app's precise 431."""
    return 2 * max_header_bytes + REQUEST_LINE_ALLOWANCE


def header_bound_protocol(timeout_s: float, max_bytes: int,
                          base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``base``: httptools where installed, else h11) with a deadline
    and a size bound on each request's headers."""

    class HeaderBoundProtocol(base):  # type: ignore[misc, valid-type]
        _deadline: asyncio.TimerHandle | None = None
        _pending_bytes = 0  # bytes received while the headers are still incomplete

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(HeadWithBody(transport, self.loop))  # type: ignore[arg-type]
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._awaiting_headers():
                self._pending_bytes = 0
                return
            self._pending_bytes += len(data)
            if self._pending_bytes > max_bytes and not self.transport.is_closing():
                self._refuse(HeadersTooLarge(f"request headers did not end within {max_bytes} bytes"))

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._awaiting_headers():
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _awaiting_headers(self) -> bool:
            # Both of uvicorn's parsers start a new cycle when a request's headers are complete.
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._pending_bytes = 0
            self._deadline = self.loop.call_later(timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self._awaiting_headers() or self.transport.is_closing():
                return  # the headers came in time; the request is the app's now
            if self._pending_bytes:
                self._refuse(RequestTimeout(f"request headers did not arrive within {timeout_s:g} s"))
            else:
                self.transport.close()  # an idle connection: nothing to answer

        def _refuse(self, error: SieveError) -> None:
            self.transport.write(_raw_error(error))
            self.transport.close()

    return HeaderBoundProtocol


class HeadWithBody:
    """A connection's transport whose response heads wait for the body's first bytes (or the
    end of the loop's turn), so that an answer leaves in one write, not two.

    uvicorn writes a response's head when the app starts it and the body when it sends it,
    one socket write each; the app sends both in the same turn of the loop, so the head
    waits microseconds, and a write on loopback (a system call, the peer woken) costs more
    than the rest of the head's handling. Bytes always leave in the order written; a head
    whose body comes later (a stream's first event) leaves at the end of the turn."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 1"):  # a final head
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    # What uvicorn calls on every request, without __getattr__'s detour.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()  # type: ignore[attr-defined]

    def resume_reading(self) -> None:
        self._transport.resume_reading()  # type: ignore[attr-defined]

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _raw_error(error: SieveError) -> bytes:
    """An OpenAI-shaped error as a whole HTTP/1.1 response, for a request the app never sees."""
    body = orjson.dumps(error.body())
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (error.status, _REASONS[error.status], len(body)))
    return head + body
