"""The same facts through every wire format: quality.py's chat fixtures, pruned as Anthropic
Messages or OpenAI Responses bodies through a real gateway's ``/v1/prune``.

    python bench/format_equivalence.py --gateway http://127.0.0.1:8181 --format messages -- \\
        ../shared/data/dev-locomo.jsonl.gz ../shared/data/dev-tau-retail.jsonl.gz --ratio 0.2,0.5 --concurrency 2

A local shim takes quality.py's chat ``/v1/prune`` requests, converts each body into the
format (``tests/support/formats.py``), asks the gateway's ``/v1/prune`` with
``x-sieve-format``, checks the pruned native body by the format's own rules (no orphan
call or result, at most 4 cache breakpoints, no role run the input did not have), and
answers quality.py with the adapter's chat view of it: one evaluator scores all three
formats. The arguments after ``--`` go to quality.py; the native checks print at the end.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from bench.shared import require, shared_bench  # noqa: E402

QUALITY = shared_bench() / "quality.py"

from gateway.wire.formats import WireFormat, adapter_for  # noqa: E402
from tests.support.formats import (chat_to_messages, chat_to_responses, messages_problems,  # noqa: E402
                                   responses_problems)
from tests.support import free_port  # noqa: E402

CONVERT = {WireFormat.MESSAGES: chat_to_messages, WireFormat.RESPONSES: chat_to_responses}


def native_problems(fmt: WireFormat, before: dict, after: dict) -> list[str]:
    """Problems of the pruned body ``after`` that its input ``before`` did not have (by kind)."""
    check = (lambda b: messages_problems(b, first_role=None)) if fmt == WireFormat.MESSAGES else responses_problems
    kinds = Counter(_kind(p) for p in check(before))
    new = []
    for problem in check(after):
        kind = _kind(problem)
        if kinds[kind] > 0:
            kinds[kind] -= 1
        else:
            new.append(problem)
    return new


def _kind(problem: str) -> str:
    return problem.split(": ", 1)[-1].split(" [")[0].split(" '")[0]


class Shim:
    def __init__(self, gateway: str, fmt: WireFormat) -> None:
        self.url = gateway.rstrip("/") + "/v1/prune"
        self.fmt = fmt
        self.client = httpx.Client(timeout=120)
        self.lock = threading.Lock()
        self.bodies = 0
        self.invalid: Counter[str] = Counter()

    def prune(self, chat: dict, headers: dict[str, str]) -> tuple[int, bytes]:
        native = CONVERT[self.fmt](chat)
        reply = self.client.post(self.url, content=orjson.dumps(native),
                                 headers={**headers, "x-sieve-format": self.fmt, "content-type": "application/json"})
        if reply.status_code != 200:
            return reply.status_code, reply.content
        answer = reply.json()
        problems = native_problems(self.fmt, native, answer["request"])
        with self.lock:
            self.bodies += 1
            self.invalid.update(_kind(p) for p in problems)
        view = adapter_for(self.fmt).read(answer["request"]).body
        return 200, orjson.dumps({"request": view, "report": answer["report"]})

    def handler(self) -> type[BaseHTTPRequestHandler]:
        shim = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = orjson.loads(self.rfile.read(int(self.headers["content-length"])))
                steering = {k: v for k, v in self.headers.items() if k.lower().startswith("x-sieve-")}
                status, payload = shim.prune(body, steering)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", required=True, help="the real gateway's base URL")
    ap.add_argument("--format", required=True, choices=[f.value for f in CONVERT])
    ap.add_argument("quality_args", nargs=argparse.REMAINDER, help="-- then quality.py's arguments")
    args = ap.parse_args()
    require(QUALITY, "the quality evaluator (quality.py)")
    shim = Shim(args.gateway, WireFormat(args.format))
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), shim.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rest = [a for a in args.quality_args if a != "--"]
    try:
        status = subprocess.call([sys.executable, str(QUALITY), *rest,
                                  "--gateway", f"http://127.0.0.1:{server.server_address[1]}"], cwd=QUALITY.parent)
    finally:
        server.shutdown()
    invalid = sum(shim.invalid.values())
    print(f"\n{args.format}: {shim.bodies} pruned bodies checked by the format's own rules; "
          f"{shim.bodies - invalid} valid ({100 * (shim.bodies - invalid) / max(shim.bodies, 1):.1f} %)"
          + (f"; problems: {dict(shim.invalid)}" if invalid else ""))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
