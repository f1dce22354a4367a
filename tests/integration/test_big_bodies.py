"""Big bodies under the real gateway: their prunes share a bytes-in-flight budget
(``SIEVE_MAX_PRUNE_BYTES_IN_FLIGHT``) instead of all running at once, and the heap is trimmed
once the last of them is freed. The latency of small chats beside them is measured by
``bench/big_bodies.py`` (figures in BENCHMARKS.md)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from gateway.exchange.big_bodies import THREAD_THRESHOLD_BYTES
from tests.support.conversations import agent_history
from tests.support import wait_until

BUDGET = 1_000_000


def test_big_prunes_take_turns_within_their_budget_and_memory_is_given_back(start_gateway, upstream) -> None:
    gw = start_gateway(max_prune_bytes_in_flight=BUDGET)
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": agent_history(130)})
    assert THREAD_THRESHOLD_BYTES < len(body) <= BUDGET < 2 * len(body)  # big, and two do not fit together
    big = gw.services.big_bodies
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(big.in_flight)
            time.sleep(0.002)

    def send(i: int) -> httpx.Response:
        return gw.post("/v1/chat/completions", content=body,
                       headers={"content-type": "application/json", "x-sieve-conversation-id": f"big-{i}"})

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(send, range(4)))
    finally:
        done.set()
        watcher.join()
    assert [r.status_code for r in responses] == [200] * 4
    assert all(int(r.headers["x-sieve-forwarded-tokens"]) < int(r.headers["x-sieve-original-tokens"])
               for r in responses)  # each was pruned
    assert max(seen) == len(body), max(seen)  # one prune at a time, never two bodies' worth
    assert wait_until(lambda: big.alive == 0 and big.trims >= 1, timeout_s=10), (big.alive, big.trims)


def test_a_refused_big_body_gives_its_memory_back_too(start_gateway, upstream) -> None:
    """Parsing a big body costs memory whether or not it is pruned: the heap is trimmed after a
    refusal as well."""
    gw = start_gateway(max_request_chars=100_000)
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": agent_history(130)})
    response = gw.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "messages_too_large"
    big = gw.services.big_bodies
    assert wait_until(lambda: big.alive == 0 and big.trims == 1, timeout_s=10), (big.alive, big.trims)
    assert upstream.requests == []
