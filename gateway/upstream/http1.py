"""A lean HTTP/1.1 client for the forward: pooled keep-alive connections, httptools' parser.

Every request the gateway forwards goes through here (``gateway.upstream.openai_compat``).
aiohttp's ``ClientSession`` spent about 0.1 ms of CPU on a small forward (request and
response objects, cookie jar, tracing hooks, a read timer rescheduled on every packet),
about a third of the gateway's whole cost of a small chat; this client does what the
forward needs and nothing else (``bench/cpu_budget.py``, ``bench/forward_client.py``)::

    client = Http1Client(connect_timeout_s=10)
    response = await client.request("POST", "https://api.openai.com/v1/chat/completions",
                                     {"authorization": "Bearer sk-..."}, body_bytes, read_timeout_s=600)
    response.status, response.headers, response.content_type
    payload = await response.read(limit)        # or: async for chunk in response.chunks(): ...
    response.release()                          # the connection goes back to the pool if it can
    await client.close()

What it does: one request at a time per connection, reused while the server keeps it alive
(idle ones are dropped after ``keepalive_s``); TLS with the system's trust store for https;
a request is written in one piece (head and body); bodies framed by Content-Length, chunked
or by the connection's end; interim 1xx answers skipped; the socket stops being read while a
slow consumer has ``MAX_BUFFERED`` bytes waiting. Errors: ``ConnectionError`` (refused,
reset, closed before the answer ended), ``TimeoutError`` (no connection within
``connect_timeout_s``, or nothing read for ``read_timeout_s``), ``ProtocolError`` (not
HTTP/1.1). Like aiohttp, a POST is never sent twice (the provider may have billed it); an
idempotent request (a stored response read or deleted) that finds its kept-alive connection
closed goes once more on a new one. Credentials in the URL (``https://user:pass@proxy``) go
as Basic auth unless the request has its own ``authorization``. No proxies from the
environment and no cookies, as the aiohttp session it replaces.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import functools
import ssl
import time
from typing import AsyncIterator, Mapping
from urllib.parse import unquote, urlsplit

import httptools

from gateway.telemetry import redact_url

MAX_BUFFERED = 1 << 20   # body bytes held for a slow reader before the socket is paused
MAX_IDLE_PER_ORIGIN = 128
# Sent again on a new connection when a kept-alive one turns out closed before any answer
# (aiohttp's rule); a POST never is: the provider may have taken (and billed) it.
IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS", "PUT", "DELETE"))


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 the parser can read."""


@functools.lru_cache(maxsize=256)
def _split(url: str) -> tuple[tuple[str, str, int], str, bytes, str | None]:
    """(origin, request target, Host header value, Basic credentials from the URL) of an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {redact_url(url)!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    default = port == (443 if parts.scheme == "https" else 80)
    basic = None
    if parts.username is not None:  # https://user:pass@proxy: Basic auth, as aiohttp sent it
        userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        basic = "Basic " + base64.b64encode(userinfo.encode("latin-1")).decode("ascii")
    return (parts.scheme, parts.hostname, port), target, (host if default else f"{host}:{port}").encode("idna"), basic


class _Connection(asyncio.Protocol):
    """One socket and the answer being read on it."""

    def __init__(self, origin: tuple[str, str, int]) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.headed = False       # the final (non-1xx) head is in
        self.complete = False     # the whole answer is in
        self.framed = False       # the body has a length or chunks (else: the connection's end)
        self.keep_alive = False   # as the head says (the parser forgets once the message ends)
        self.error: BaseException | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"the upstream's answer is not valid HTTP/1.1 ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.headed and not self.framed and not self.complete and self.error is None:
            self.complete = True  # a body that ends with the connection
            self._wake()
        elif not self.complete:
            self._fail(ConnectionError("the upstream closed the connection before its answer ended"))

    def eof_received(self) -> bool:
        return False  # close our side too

    # -- httptools callbacks ----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self.headers = []  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            return
        self.status, self.headed = status, True
        self.keep_alive = self._parser.should_keep_alive()
        self.framed = any(n.lower() in ("content-length", "transfer-encoding") for n, _ in self.headers) \
            or status in (204, 304)
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > MAX_BUFFERED and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.headed:
            return  # the end of an interim answer
        self.complete = True
        self._wake()

    # -- the reader's side --------------------------------------------------------------------
    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until something arrives (or the connection fails), at most ``timeout_s``."""
        if self.error is not None:
            raise self.error
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout_s, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if self.error is not None:
            raise self.error

    def take(self) -> bytes | None:
        """The body bytes held (pieces that arrived together go on together), or None."""
        chunks = self._chunks
        if not chunks:
            return None
        piece = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered -= len(piece)
        if self._paused and self._buffered <= MAX_BUFFERED // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return piece

    @property
    def reusable(self) -> bool:
        return (self.complete and self.error is None and not self.lost and self.transport is not None
                and not self.transport.is_closing() and self.keep_alive)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Http1Response:
    """An answer whose head is in; its body is read with :meth:`read` or :meth:`chunks`, and
    :meth:`release` (or :meth:`close`) ends it, whatever happened."""

    def __init__(self, client: Http1Client, conn: _Connection, read_timeout_s: float) -> None:
        self._client, self._conn, self._timeout = client, conn, read_timeout_s
        self.status = conn.status
        self.headers = conn.headers
        self._done = False

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for n, v in self.headers if n.lower() == name), None)

    @property
    def content_type(self) -> str:
        value = self.header("content-type") or ""
        return value.split(";", 1)[0].strip().lower()

    @property
    def content_length(self) -> int | None:
        value = self.header("content-length")
        return int(value) if value is not None and value.strip().isdigit() else None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (TimeoutError after ``read_timeout_s`` without a byte)."""
        conn = self._conn
        while True:
            piece = conn.take()
            if piece is not None:
                yield piece
            elif conn.complete:
                return
            else:
                await conn.wait(self._timeout)

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    def release(self) -> None:
        """The connection back to the pool when its answer was read whole, else closed."""
        if self._done:
            return
        self._done = True
        if self._conn.reusable:
            self._client._give_back(self._conn)
        else:
            self._close_transport()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._close_transport()

    def _close_transport(self) -> None:
        if self._conn.transport is not None:
            self._conn.transport.close()


class Http1Client:
    def __init__(self, *, connect_timeout_s: float, keepalive_s: float = 60.0) -> None:
        self._connect_timeout = connect_timeout_s
        self._keepalive = keepalive_s
        self._idle: dict[tuple[str, str, int], collections.deque[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def request(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
                      read_timeout_s: float) -> Http1Response:
        """Send the request and wait for the answer's head (not its body)."""
        origin, target, host, basic = _split(url)
        if basic is not None and "authorization" not in headers:
            headers = {**headers, "authorization": basic}
        request = _head(method, target, host, headers, body) + (body or b"")
        conn = self._idle_connection(origin)
        if conn is not None and method in IDEMPOTENT:
            try:  # a kept-alive connection the server closed meanwhile: once more on a new one, as aiohttp
                return await self._exchange(conn, request, read_timeout_s)
            except ConnectionError:
                if conn.headed:
                    raise
        return await self._exchange(conn if conn is not None and method not in IDEMPOTENT
                                    else await self._connect(origin), request, read_timeout_s)

    async def _exchange(self, conn: _Connection, request: bytes, read_timeout_s: float) -> Http1Response:
        try:
            conn.transport.write(request)  # type: ignore[union-attr]
            while not conn.headed:
                await conn.wait(read_timeout_s)
        except BaseException:
            if conn.transport is not None:
                conn.transport.close()
            raise
        return Http1Response(self, conn, read_timeout_s)

    def _idle_connection(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        oldest = time.monotonic() - self._keepalive
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            if not conn.lost and conn.idle_since >= oldest and not conn.transport.is_closing():  # type: ignore[union-attr]
                conn._reset()
                return conn
            conn.transport.close()  # type: ignore[union-attr]
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        if self._closed:
            raise ConnectionError("the upstream client is closed")
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            tls = self._ssl = self._ssl or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(lambda: _Connection(origin), host, port, ssl=tls,
                                                   server_hostname=host if tls else None)
        return conn

    def _give_back(self, conn: _Connection) -> None:
        if self._closed:
            conn.transport.close()  # type: ignore[union-attr]
            return
        conn.idle_since = time.monotonic()
        idle = self._idle.setdefault(conn.origin, collections.deque())
        idle.append(conn)
        oldest = conn.idle_since - self._keepalive
        while idle and (len(idle) > MAX_IDLE_PER_ORIGIN or idle[0].idle_since < oldest):
            idle.popleft().transport.close()  # type: ignore[union-attr]

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().transport.close()  # type: ignore[union-attr]


def _head(method: str, target: str, host: bytes, headers: Mapping[str, str], body: bytes | None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), b"Host: ", host, b"\r\n"]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: %d\r\n" % len(body or b""))
    if "accept" not in headers:
        lines.append(b"Accept: */*\r\n")  # what aiohttp sent when the caller named none
    for name, value in headers.items():
        line = f"{name}: {value}\r\n"
        if line.count("\r") != 1 or line.count("\n") != 1 or ":" in name:
            raise ValueError(f"header {name!r} holds a line break or a colon: not sent")
        try:
            lines.append(line.encode("latin-1"))  # a header as it arrived (Starlette reads them as Latin-1)
        except UnicodeEncodeError:
            lines.append(line.encode("utf-8"))
    lines.append(b"\r\n")
    return b"".join(lines)
