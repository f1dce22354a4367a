"""Smaller hardening: what counts as loopback for an open gateway, and the conversation-id limit.

The open-gateway refusal runs `sieve serve` (it refuses before binding); the
header limit goes through the gateway under uvicorn.
"""

from __future__ import annotations

import pytest

from gateway.cli import main
from gateway.config.settings import Settings
from gateway.wire.headers import MAX_CONVERSATION_ID_BYTES
from tests.support import bearer

ACME = "sk-sieve-acme-0123456789abcdef"
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("host", ["127.0.0.1.nip.io", "127.evil.example", "localhost.evil.example", "0.0.0.0",
                                  "::", "10.1.2.3"])
def test_an_open_gateway_refuses_anything_but_a_loopback_address(host: str, capsys, monkeypatch) -> None:
    monkeypatch.delenv("SIEVE_ALLOW_OPEN", raising=False)
    assert not Settings(host=host).bind_is_loopback
    assert main(["serve", "--host", host, "--port", "8199"]) == 2
    assert f"refusing to listen on {host}" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST",
                                  "::ffff:127.0.0.1"])
def test_loopback_addresses_are_recognised(host: str) -> None:
    assert Settings(host=host).bind_is_loopback


def conversation(gw, value: bytes):
    # Raw bytes on the wire: a client that sends a non-ASCII id sends it as UTF-8.
    return gw.post("/v1/prune", json=CHAT, headers=[(b"authorization", f"Bearer {ACME}".encode()),
                                                     (b"x-sieve-conversation-id", value)])


def test_the_conversation_id_limit_is_in_bytes_and_says_so(start_gateway) -> None:
    gw = start_gateway(virtual_keys=({"key": ACME, "org": "acme"},))
    assert conversation(gw, b"a" * MAX_CONVERSATION_ID_BYTES).status_code == 200
    too_long = conversation(gw, b"a" * (MAX_CONVERSATION_ID_BYTES + 1))
    assert too_long.status_code == 400
    assert too_long.json()["error"]["message"] == (f"x-sieve-conversation-id is {MAX_CONVERSATION_ID_BYTES + 1} "
                                                   f"bytes; the limit is {MAX_CONVERSATION_ID_BYTES} bytes")
    # 300 characters, 600 bytes in UTF-8: refused, and the message counts what was sent.
    accented = conversation(gw, ("é" * 300).encode())
    assert accented.status_code == 400
    assert "is 600 bytes" in accented.json()["error"]["message"]
    assert accented.json()["error"]["param"] == "x-sieve-conversation-id"
    assert conversation(gw, ("é" * 256).encode()).status_code == 200  # 512 bytes: at the limit
