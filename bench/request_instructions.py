"""CPU instructions per request, counted (not timed): this tree against another revision.

    python bench/request_instructions.py --against 99e55f9 [--requests 10,60] [--modes none,prune]
    python bench/request_instructions.py --against main --payload small --route messages --modes none

On a noisy 2-core machine a few percent of CPU per request drown in the noise of
timed runs; an instruction count does not. Each side runs the real gateway
(``python -m gateway.cli serve``, uvicorn, real sockets) under valgrind's
callgrind, with the route's fake upstream as its own process (not counted). A client
sends the agent payload of ``bench/overhead.py`` (~20k tokens, 103 messages; ``--payload
small``: its two-message chat; ``--payload history100k``: the 100k-token history of
``bench/warm_step.py``, 410 KiB, pruned to 30 % in mode ``prune``) in the route's format, sequentially, ``N`` times, then stops the server; the count of a run with the
smaller ``N`` is subtracted from the larger, so start-up and shutdown cancel out
and what is left, divided by the difference, is the gateway's own instructions
per request. Modes: ``none`` (``x-sieve-strategy: none``: the framework, wire
checks, forwarding and accounting) and ``prune`` (a conversation pruned to 8,000
tokens, warm after its first request: the frozen replay of an agent loop). A revision is
checked out as ``bench/ab.py`` does (``bench/.cache/ab-<commit>``), and each tree runs its own
default policy with ``sieve_expand`` off where the tree has it.

Needs valgrind (Debian's package). A run takes about a minute per side and mode.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ab import checkout, policies_of  # noqa: E402
from bench.overhead import agent_request, small_request  # noqa: E402
from bench.overhead_routes import ROUTES, Route  # noqa: E402
from tests.support import free_port, wait_until  # noqa: E402

MODES = {"none": {"x-sieve-strategy": "none"},
         "prune": {"x-sieve-conversation-id": "bench-instructions", "x-sieve-target-tokens": "8000"}}


def count(tree: Path, upstream_port: int, route: Route, requests: int, headers: dict[str, str], body: bytes) -> int:
    """Instructions callgrind counted in one gateway process that served ``requests`` requests."""
    python = os.path.realpath(sys.executable)  # the interpreter itself, not a shim valgrind would trace instead
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-m", "gateway.cli", "serve",
             "--port", str(port)], cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, **route.sieve_env(upstream_port), "PYTHONPATH": str(tree),
                 "SIEVE_POLICIES_DIR": str(policies_of(tree))})
        try:
            _wait_ready(port, server)
            # Under callgrind the first, cold request of the 100k history took over 120 s here.
            with httpx.Client(timeout=900) as client:
                for _ in range(requests):
                    response = client.post(f"http://127.0.0.1:{port}{route.path}", content=body,
                                           headers={"content-type": "application/json",
                                                    "authorization": "Bearer sk-bench", **headers})
                    response.raise_for_status()
            time.sleep(2)  # the deferred accounting of the last request
        finally:
            server.send_signal(signal.SIGTERM)
            stderr = server.communicate(timeout=600)[1].decode()
    collected = [line for line in stderr.splitlines() if "Collected :" in line]
    if not collected:
        raise SystemExit(f"callgrind reported no count for {tree}:\n{stderr[-2000:]}")
    return int(collected[-1].rsplit(":", 1)[1].replace(",", "").strip())


def warm_step_history(tokens: int = 100_000, ratio: float = 0.3) -> tuple[dict, int]:
    """The chat body of ``bench/warm_step.py`` and its target (``ratio`` of its tokens)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gateway.config.settings import prepare_offline_environment
    prepare_offline_environment()
    import prune_speed
    from gateway.pruning.tokens import TokenCounters
    counter = TokenCounters().for_model("gpt-4o-mini")
    messages = prune_speed.history_of(tokens, counter)
    return {"model": "gpt-4o-mini", "messages": messages}, int(counter.count_messages(messages) * ratio)


def _wait_ready(port: int, server: subprocess.Popen) -> None:
    def ready() -> bool:
        if server.poll() is not None:
            raise SystemExit("the gateway exited under valgrind:\n" + server.stderr.read().decode()[-2000:])
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    if not wait_until(ready, timeout_s=600, interval_s=0.5):  # start-up under valgrind is slow
        raise SystemExit("the gateway did not start under valgrind")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision or tree path to compare with")
    ap.add_argument("--requests", default="10,60", help="the two request counts whose difference is measured")
    ap.add_argument("--modes", default="none,prune", help="comma list of " + ",".join(MODES))
    ap.add_argument("--payload", choices=("agent", "small", "history100k"), default="agent")
    ap.add_argument("--route", choices=tuple(ROUTES), default="chat")
    args = ap.parse_args()
    low, high = (int(n) for n in args.requests.split(","))
    route = ROUTES[args.route]
    modes = dict(MODES)
    if args.payload == "history100k":
        chat, target = warm_step_history()
        modes["prune"] = {**MODES["prune"], "x-sieve-target-tokens": str(target)}
    else:
        chat = agent_request(20_000)[0] if args.payload == "agent" else small_request()
    body = orjson.dumps(route.payload(chat))
    other = Path(args.against).resolve() if Path(args.against).is_dir() else checkout(args.against)
    upstream_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", route.upstream_module, "--port", str(upstream_port)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[tuple[str, str], float] = {}
    try:
        for mode in args.modes.split(","):
            for name, tree in (("this tree", ROOT), (args.against, other)):
                per_request = (count(tree, upstream_port, route, high, modes[mode], body) -
                               count(tree, upstream_port, route, low, modes[mode], body)) / (high - low)
                results[(mode, name)] = per_request
                print(f"# {mode:<6} {name}: {per_request / 1e6:.3f} M instructions per request", file=sys.stderr)
    finally:
        upstream.terminate()
        upstream.wait(10)
    print(f"gateway instructions per {args.payload} {route.path} request "
          f"(callgrind; the difference of {high} and {low} requests):")
    for mode in args.modes.split(","):
        this, base = results[(mode, "this tree")], results[(mode, args.against)]
        print(f"  {mode:<6} this tree {this / 1e6:7.3f} M   {args.against} {base / 1e6:7.3f} M   "
              f"ratio {this / base:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
