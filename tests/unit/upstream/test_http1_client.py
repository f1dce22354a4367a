"""The forward's HTTP/1.1 client (gateway.upstream.http1) against real sockets on 127.0.0.1.

Each server here is an asyncio TCP server that reads one request head (and its declared
body) at a time and answers with the bytes a test scripts, so framings, interim answers,
cut connections and stalls are exactly what the client sees."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest

from gateway.upstream.http1 import Http1Client, ProtocolError

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # (request) -> keep the connection?


async def _serve(answer: Answer) -> tuple[asyncio.base_events.Server, str, list[bytes], list[int]]:
    requests: list[bytes] = []
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + (await reader.readexactly(length) if length else b"")
                requests.append(request)
                if not await answer(request, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the test ended
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions?x=1", requests, connections


def _whole(body: bytes, extra: bytes = b"") -> Answer:
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + extra
                     + b"content-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        return True
    return answer


async def test_a_request_is_written_in_one_piece_and_the_connection_is_reused():
    server, url, requests, connections = await _serve(_whole(b'{"ok":true}'))
    client = Http1Client(connect_timeout_s=5)
    try:
        for _ in range(3):
            resp = await client.request("POST", url, {"content-type": "application/json", "x-api-key": "k"},
                                        b'{"a":1}', read_timeout_s=5)
            assert (resp.status, resp.content_type, await resp.read()) == (200, "application/json", b'{"ok":true}')
            resp.release()
    finally:
        await client.close()
        server.close()
    assert len(connections) == 1
    head, _, body = requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?x=1 HTTP/1.1"
    assert b"Host: 127.0.0.1:" in head and b"Content-Length: 7" in head and b"x-api-key: k" in lines
    assert body == b'{"a":1}'


async def test_chunked_and_close_delimited_bodies_are_read_whole_and_a_closed_one_is_not_reused():
    async def chunked(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"5\r\ndata:\r\n3\r\n 1\n\r\n0\r\n\r\n")
        return True

    async def until_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        return False

    for answer, expected, reused in ((chunked, b"data: 1\n", True), (until_close, b"all of it", False)):
        server, url, _, connections = await _serve(answer)
        client = Http1Client(connect_timeout_s=5)
        try:
            for _ in range(2):
                resp = await client.request("GET", url, {}, None, read_timeout_s=5)
                assert b"".join([c async for c in resp.chunks()]) == expected
                resp.release()
        finally:
            await client.close()
            server.close()
        assert len(connections) == (1 if reused else 2)


async def test_an_interim_answer_is_skipped():
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nx-a: b\r\ncontent-length: 2\r\n\r\nok")
        return True

    server, url, _, _ = await _serve(answer)
    client = Http1Client(connect_timeout_s=5)
    try:
        resp = await client.request("POST", url, {}, b"{}", read_timeout_s=5)
        assert (resp.status, resp.headers, await resp.read()) == (201, [("x-a", "b"), ("content-length", "2")], b"ok")
        resp.release()
    finally:
        await client.close()
        server.close()


async def test_a_cut_body_a_stall_and_garbage_fail_and_the_connection_is_dropped():
    async def cut(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        return False

    async def stall(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await asyncio.sleep(2)
        return False

    async def garbage(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SMTP ready\r\n\r\n")
        return True

    for answer, error in ((cut, ConnectionError), (stall, TimeoutError), (garbage, ProtocolError)):
        server, url, _, _ = await _serve(answer)
        client = Http1Client(connect_timeout_s=5)
        try:
            with pytest.raises(error):
                resp = await client.request("POST", url, {}, b"{}", read_timeout_s=0.3)
                try:
                    await resp.read()
                finally:
                    resp.release()
            assert not any(client._idle.values())
        finally:
            await client.close()
            server.close()


async def test_a_refused_connection_is_a_connection_error_and_a_line_break_in_a_header_is_refused():
    server, url, _, _ = await _serve(_whole(b"{}"))
    server.close()
    await server.wait_closed()
    client = Http1Client(connect_timeout_s=5)
    with pytest.raises(ConnectionError):
        await client.request("GET", url, {}, None, read_timeout_s=1)
    server, url, requests, _ = await _serve(_whole(b"{}"))
    try:
        with pytest.raises(ValueError):
            await client.request("POST", url, {"x-a": "b\r\nx-injected: 1"}, b"{}", read_timeout_s=1)
        assert requests == []
    finally:
        await client.close()
        server.close()


async def test_a_big_answer_read_slowly_pauses_the_socket_and_arrives_whole():
    body = bytes(range(256)) * (12 * 1024)  # 3 MiB, past MAX_BUFFERED
    server, url, _, _ = await _serve(_whole(body))
    client = Http1Client(connect_timeout_s=5)
    try:
        resp = await client.request("GET", url, {}, None, read_timeout_s=5)
        got = []
        async for chunk in resp.chunks():
            got.append(chunk)
            await asyncio.sleep(0)  # a consumer slower than loopback
        assert b"".join(got) == body
        resp.release()
        assert len(client._idle[next(iter(client._idle))]) == 1
    finally:
        await client.close()
        server.close()


async def test_url_credentials_go_as_basic_auth_unless_the_request_has_its_own():
    server, url, requests, _ = await _serve(_whole(b"{}"))
    with_credentials = url.replace("http://", "http://us%40er:p%3Ass@")
    client = Http1Client(connect_timeout_s=5)
    try:
        for headers in ({}, {"authorization": "Bearer sk-own"}):
            resp = await client.request("POST", with_credentials, headers, b"{}", read_timeout_s=5)
            await resp.read()
            resp.release()
    finally:
        await client.close()
        server.close()
    assert b"authorization: Basic dXNAZXI6cDpzcw==\r\n" in requests[0]  # base64 of "us@er:p:ss"
    assert b"authorization: Bearer sk-own\r\n" in requests[1] and b"Basic" not in requests[1]


async def test_a_read_whose_kept_alive_connection_was_closed_goes_again_and_a_post_does_not():
    seen: dict[int, int] = {}

    async def second_request_unanswered(request: bytes, writer: asyncio.StreamWriter) -> bool:
        seen[id(writer)] = seen.get(id(writer), 0) + 1
        if seen[id(writer)] > 1:
            return False  # an idle connection's keep-alive ran out as the request arrived: closed, no answer
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        return True

    for method in ("GET", "POST"):
        server, url, requests, connections = await _serve(second_request_unanswered)
        client = Http1Client(connect_timeout_s=5)
        body = None if method == "GET" else b"{}"
        try:
            resp = await client.request(method, url, {}, body, read_timeout_s=5)
            await resp.read()
            resp.release()
            if method == "POST":
                with pytest.raises(ConnectionError):
                    await client.request(method, url, {}, body, read_timeout_s=5)
                assert len(requests) == 2
            else:
                resp = await client.request(method, url, {}, body, read_timeout_s=5)
                assert await resp.read() == b"ok"
                resp.release()
                assert (len(requests), len(connections)) == (3, 2)
        finally:
            await client.close()
            server.close()
