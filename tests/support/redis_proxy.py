"""A TCP proxy in front of a real redis-server that loses what a fault test asks it to.

It runs on 127.0.0.1 in a background thread; the gateway is pointed at ``proxy.url``.
Commands are recognised by a script's SHA-1 in the bytes a client sends (redis-py
runs registered scripts with ``EVALSHA <sha>``)::

    with RedisProxy(redis) as proxy:
        proxy.drop_reply(settle_sha, times=2)    # Redis runs it; the reply never arrives
        proxy.delay_command(reserve_sha, 3.0)    # Redis gets it 3 s late (after the client gave up)
        proxy.url

A dropped reply closes the client's connection once Redis has answered (the
command took effect), as a network cut or a killed connection would. A delayed
command reaches Redis after the delay even if the client has gone: a Redis that
hung with the command in its socket and ran it once it woke up.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from tests.support.redis_server import RedisServer
from tests.support import free_port


@dataclass
class _Fault:
    sha: bytes
    times: int
    delay_s: float = 0.0
    seen: int = 0  # how many commands it caught
    done: int = 0  # how many of them reached Redis


@dataclass
class RedisProxy:
    redis: RedisServer
    port: int = field(default_factory=free_port)
    drops: list[_Fault] = field(default_factory=list)
    delays: list[_Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_reply(self, sha: str, times: int = 1) -> _Fault:
        fault = _Fault(sha.encode(), times)
        with self._lock:
            self.drops.append(fault)
        return fault

    def delay_command(self, sha: str, delay_s: float, times: int = 1) -> _Fault:
        fault = _Fault(sha.encode(), times, delay_s)
        with self._lock:
            self.delays.append(fault)
        return fault

    def _catch(self, faults: list[_Fault], data: bytes) -> _Fault | None:
        with self._lock:
            for fault in faults:
                if fault.seen < fault.times and fault.sha in data:
                    fault.seen += 1
                    return fault
        return None

    async def _pipe_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.redis.port)
        drop = asyncio.Event()

        async def upstream() -> None:
            while data := await reader.read(65536):
                delayed = self._catch(self.delays, data)
                if delayed is not None:
                    await asyncio.sleep(delayed.delay_s)
                    delayed.done += 1
                elif self._catch(self.drops, data) is not None:
                    drop.set()
                up_writer.write(data)
                await up_writer.drain()
            # The client hung up; what it sent has gone to Redis (a delayed command too).
            await asyncio.sleep(0.2)
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if drop.is_set():
                    with self._lock:
                        for fault in self.drops:
                            fault.done = fault.seen
                    writer.transport.abort()  # the command ran; its reply is lost with the connection
                    up_writer.close()
                    return
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(upstream(), downstream(), return_exceptions=True)

    def start(self) -> "RedisProxy":
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            server = loop.run_until_complete(asyncio.start_server(self._pipe_client, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()
            server.close()
            loop.close()

        self._thread = threading.Thread(target=run, name="redis-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "RedisProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
