"""A throwaway real ``redis-server`` on a free loopback port, for tests and benchmarks.

::

    with RedisServer() as server:          # or server.start() / server.stop()
        stores = RedisStores.from_url(server.url)
        server.kill()                       # SIGKILL: an outage
        server.start()                      # back on the same port, empty
        server.pause(); server.resume()     # SIGSTOP/SIGCONT: a hung server

Tests that need one are marked ``needs_redis``; a fixture that starts one calls
``skip_without_redis()`` first.

Persistence is off (``--save '' --appendonly no``) and the data dir is a temp
dir removed on stop, so a restart comes back empty, like a crashed cache.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import pytest

from tests.support import free_port

NOT_INSTALLED = "redis-server is not installed"


def redis_server_binary() -> str | None:
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)


# For a test, or a module's pytestmark, that needs a redis-server.
needs_redis = pytest.mark.skipif(redis_server_binary() is None, reason=NOT_INSTALLED)


def skip_without_redis() -> None:
    """For a fixture that starts a redis-server (a mark on a fixture has no effect)."""
    if redis_server_binary() is None:
        pytest.skip(NOT_INSTALLED)


class RedisServer:
    def __init__(self, port: int | None = None, binary: str | None = None, startup_timeout_s: float = 10.0) -> None:
        found = binary or redis_server_binary()
        if found is None:
            raise RuntimeError("redis-server not found on PATH (apt-get install redis-server)")
        self.binary = found
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> "RedisServer":
        if self.running:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="sieve-redis-"))
        self._log = open(self._dir / "redis.log", "wb")
        self._proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self._dir), "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"],
            # A file, not a pipe: nobody reads a pipe during a long run, and a full one would block Redis.
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._dir / "redis.log").read_text(errors="replace")
                self._cleanup()
                raise RuntimeError(f"redis-server exited at start-up on port {self.port}: {err.strip()}")
            if self._pong():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer PING on port {self.port} within {self.startup_timeout_s}s")

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL, no shutdown: what a crashed or partitioned Redis looks like to clients."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._cleanup()

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers (a hung server, not a dead one)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._cleanup()

    def restart(self) -> "RedisServer":
        self.kill()
        return self.start()

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
