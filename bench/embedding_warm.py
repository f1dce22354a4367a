"""Warm a gateway's embedding vectors with the dev data, as an agent's earlier steps would.

    python bench/embedding_warm.py --gateway http://127.0.0.1:P FIXTURES_OR_SESSIONS...

``quality.py`` sends each case to ``/v1/prune`` once, cold: under ``scorer: embedding``
a history the background worker has not embedded is scored by the local scorer alone,
so a cold run measures the fallback. In a live conversation every message before the
current step was carried by an earlier request and embedded since. This sends every
case's request (a session file: every session's whole history) once to
``/v1/prune`` with ``x-sieve-strategy: none`` (nothing decided) and a conversation id
of its own (its plan is stored under a key the evaluators never read: their cases stay
independent), so the messages only reach the worker; then it waits until ``sieve_embedding_queue_messages``
is 0. The evaluators run afterwards then see each history embedded, and each case's
question embedded on its own request path, as in a live conversation.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx


def bodies(path: str):
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                yield item["request"] if "request" in item else {"model": item.get("model", "gpt-4o-mini"),
                                                                   "messages": item["messages"]}


def queue_depth(client: httpx.Client, url: str) -> float:
    for line in client.get(url + "/metrics").text.splitlines():
        if line.startswith("sieve_embedding_queue_messages "):
            return float(line.split()[1])
    raise SystemExit("the gateway exports no sieve_embedding_queue_messages: is its policy scorer: embedding?")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    url = args.gateway.rstrip("/")
    client = httpx.Client(timeout=300)
    started, sent = time.perf_counter(), 0
    def send(numbered: tuple[int, dict]) -> httpx.Response:
        headers = {"x-sieve-strategy": "none", "x-sieve-conversation-id": f"embedding-warm-{numbered[0]}"}
        return client.post(url + "/v1/prune", json=numbered[1], headers=headers)

    for path in args.files:
        with ThreadPoolExecutor(args.concurrency) as pool:
            for resp in pool.map(send, enumerate(bodies(path), start=sent)):
                resp.raise_for_status()
                sent += 1
        print(f"{path}: sent, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    while queue_depth(client, url) > 0:
        time.sleep(2)
    print(f"{sent} requests; every message embedded after {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
