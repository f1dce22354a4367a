"""Clients that never finish their headers (slowloris) lose their connection within
``SIEVE_HEADER_TIMEOUT_S``; headers that keep coming without end are cut off (431); a client
that sends its headers in time, however it splits them, is served as usual.

Raw sockets against the real gateway: ``sieve serve`` as its own process for the slowloris
crowd (the command a deployment runs), the in-process server for the rest.
"""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.integration.budget_helpers import GatewayProcess, write_yaml
from tests.support import openai_client

HEADER_TIMEOUT_S = 1.0
PARTIAL = b"POST /v1/chat/completions HTTP/1.1\r\nHost: sieve\r\nContent-Type: application/json\r\n"


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn.setblocking(False)
    return conn


def read_until_closed(conn: socket.socket, timeout_s: float, trickle: bytes = b"") -> tuple[bytes, float | None]:
    """What the server sent before it closed the connection, and when it closed it (None: still
    open after ``timeout_s``). With ``trickle``, one more header byte goes out every 0.2 s."""
    started, answer, next_send = time.monotonic(), b"", time.monotonic()
    while (now := time.monotonic()) - started < timeout_s:
        if trickle and now >= next_send:
            try:
                conn.send(trickle)
            except OSError:  # closed under us: the reads below say so
                pass
            next_send = now + 0.2
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                return answer, time.monotonic() - started
            if not chunk:
                return answer, time.monotonic() - started
            answer += chunk
    return answer, None


def test_slowloris_connections_are_closed_within_the_header_deadline(tmp_path: Path,
                                                                       upstream: FakeUpstream) -> None:
    config = write_yaml(tmp_path / "sieve.yaml", {"upstream": {"base_url": upstream.base_url}})
    with GatewayProcess(config, {"SIEVE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}) as gw:
        idle = [connect(gw.port) for _ in range(20)]          # open, and never a byte
        stalled = [connect(gw.port) for _ in range(20)]       # half a request, then nothing
        trickling = [connect(gw.port) for _ in range(20)]     # a header byte every 0.2 s, forever
        for conn in stalled + trickling:
            conn.send(PARTIAL + b"X-Slow: ")
        opened = time.monotonic()
        # Meanwhile everyone else is served as usual.
        assert httpx.get(gw.base_url + "/healthz", timeout=5).status_code == 200
        reply = openai_client(gw).chat.completions.create(model="gpt-4o-mini",
                                                          messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
        outcomes = [read_until_closed(c, 5.0) for c in idle + stalled]
        outcomes += [read_until_closed(c, 5.0, trickle=b"a") for c in trickling]
        waited = time.monotonic() - opened
        for conn in idle + stalled + trickling:
            conn.close()
    assert all(closed is not None for _, closed in outcomes), [closed for _, closed in outcomes]
    # Every connection was closed about one deadline after it opened (checked in turn, so the
    # later ones were already closed when their turn came).
    assert waited < HEADER_TIMEOUT_S + 3.0, waited
    assert all(answer == b"" for answer, _ in outcomes[:20])  # idle: closed without a word
    for answer, _ in outcomes[20:]:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"type":"invalid_request_error"' in answer and b"did not arrive within 1 s" in answer


def test_the_next_request_on_a_kept_alive_connection_gets_the_same_deadline(start_gateway) -> None:
    gw = start_gateway(header_timeout_s=HEADER_TIMEOUT_S)
    conn = connect(gw.port)
    conn.setblocking(True)
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: sieve\r\n\r\n")
    first = b""
    while not first.endswith(b'{"status":"ok"}'):  # the head and the body may come in two segments
        chunk = conn.recv(65536)
        assert chunk, first
        first += chunk
    assert first.startswith(b"HTTP/1.1 200")
    conn.setblocking(False)
    conn.send(b"GET /healthz HTTP/1.1\r\nHost: sieve\r\n")  # and the blank line never comes
    answer, closed = read_until_closed(conn, 5.0, trickle=b"X")
    conn.close()
    assert closed is not None and closed < HEADER_TIMEOUT_S + 1.0, closed
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_headers_that_never_end_are_cut_off(start_gateway) -> None:
    """The app's 431 needs whole headers; header bytes that keep coming are cut off at 2 x the
    limit + 16 KiB while they arrive: answered 431 when the client pauses to listen, and a
    flood is closed (reset, its unread bytes discarded)."""
    gw = start_gateway(max_header_bytes=8_192)
    line = b"X-Flood: " + b"f" * 1_000 + b"\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as conn:
        conn.sendall(PARTIAL + line * 40)  # 40 KB: over the bound, then listen
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code":"headers_too_large"' in answer and b"request headers did not end within 32768 bytes" in answer

    flood = connect(gw.port)
    sent, closed, deadline = 0, False, time.monotonic() + 5
    while not closed and time.monotonic() < deadline and sent < 50_000_000:
        try:
            sent += flood.send(line)
        except BlockingIOError:
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    flood.close()
    # Cut off, not read on: what was sent is the bound plus what the kernel buffers of both ends
    # took in before the reset (a few MB on loopback), not the 50 MB the flood would send.
    assert closed and sent < 16_000_000, sent


@pytest.mark.parametrize("pieces", [1, 3])
def test_headers_sent_in_time_are_served(start_gateway, pieces: int) -> None:
    """Headers that arrive within the deadline, whole or in pieces, and a body after them."""
    gw = start_gateway(header_timeout_s=HEADER_TIMEOUT_S)
    body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    request = (PARTIAL + b"Authorization: Bearer sk-test\r\nContent-Length: %d\r\n\r\n" % len(body))
    size = len(request) // pieces + 1
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as conn:
        for start in range(0, len(request), size):
            conn.sendall(request[start:start + size])
            time.sleep(HEADER_TIMEOUT_S / 4)
        time.sleep(HEADER_TIMEOUT_S)  # the body may take longer: its own timeout applies
        conn.sendall(body)
        answer = conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
