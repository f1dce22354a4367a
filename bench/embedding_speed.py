"""What the embedding scorer costs: the request path with it on and off, the model's CPU, the RSS.

    python bench/embedding_speed.py [--repeats 7] [--steps 40] [--sessions PATH] [--rss]

In-process, through ``gateway.exchange.prune_step.Pruner`` as the gateway builds it (the local
scorer; with ``scorer: embedding`` also the real model and its background worker),
the two policies interleaved in every repeat so that drift hits both alike:

* cold 100k: the first request of a conversation whose 100k-token agent history
  (built as in ``prune_speed.py``) no process memo and no vector cache has seen,
  pruned to 30 %; the worker's work after it is not timed (the request does not
  wait), the next measurement starts once it is done;
* warm 20k step: a conversation of 20k tokens decided and fully embedded, then
  ``--steps`` agent steps, each adding a tool exchange: the frozen replay of an
  agent loop (median per step);
* CPU per new message: the model's CPU seconds (``sieve_embedding_cpu_seconds_total``)
  over the messages it embedded for the 100k history (real tool outputs, cut at 256
  word pieces) and, with ``--locomo``, for one LoCoMo conversation (short chat turns).

``--rss`` starts ``python -m gateway.cli serve`` twice (scorer local, then embedding),
sends the 100k history to ``/v1/prune``, waits for the worker, and prints VmRSS.
Prints medians and the ratios embedding / local from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gateway.config.settings import Settings, prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import httpx  # noqa: E402

import prune_speed  # noqa: E402
from gateway.embedding.model import EmbeddingModel  # noqa: E402
from gateway.embedding.worker import Embedder, WorkerLimits  # noqa: E402
from gateway.exchange.prune_step import Pruner  # noqa: E402
from gateway.pruning.policy import Policy  # noqa: E402
from gateway.pruning.scoring import LocalScorer  # noqa: E402
from gateway.pruning.tokens import TokenCounters  # noqa: E402
from gateway.state.memory import MemoryConversationStore  # noqa: E402
from gateway.telemetry.metrics import Metrics  # noqa: E402
from gateway.wire.call import ModelCall, Identity  # noqa: E402
from gateway.wire.headers import parse_sieve_headers  # noqa: E402

MODEL = "gpt-4o-mini"
POLICIES = {"local": Policy(), "embedding": Policy(scorer="embedding")}


def call(messages: list[dict], policy: Policy, conversation: str, target: int) -> ModelCall:
    headers = {"x-sieve-conversation-id": conversation, "x-sieve-target-tokens": str(target)}
    body = {"model": MODEL, "messages": messages}
    return ModelCall("bench", body, len(json.dumps(body)), Identity("bench", None, "bench"), policy,
                    parse_sieve_headers(headers), headers)


class Side:
    """One policy's pruner, rebuilt cold on demand (fresh memos, an empty vector cache)."""

    def __init__(self, name: str, model: EmbeddingModel) -> None:
        self.name, self.model = name, model
        self.metrics = Metrics()
        self.embedder: Embedder | None = None
        self.pruner: Pruner | None = None

    async def fresh(self) -> None:
        if self.embedder is not None:
            await self.embedder.stop()
        self.metrics = Metrics()
        self.embedder = Embedder(self.model, self.metrics, limits=WorkerLimits()) if self.name == "embedding" else None
        if self.embedder is not None:
            await self.embedder.start()
        prune_speed.cold_counter()
        self.pruner = Pruner(TokenCounters(), LocalScorer(), MemoryConversationStore(1000, 1 << 30), self.metrics,
                             embedder=self.embedder)

    async def idle(self) -> None:
        while self.embedder is not None and not self.embedder.idle():
            await asyncio.sleep(0.01)

    async def timed(self, chat: ModelCall) -> float:
        t0 = time.perf_counter()
        await self.pruner.prune(chat)
        return (time.perf_counter() - t0) * 1000


def agent_step(k: int) -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"bench_{k}", "type": "function",
                 "function": {"name": "get_order_details", "arguments": json.dumps({"order_id": f"#W{k:07d}"})}}]},
            {"role": "tool", "tool_call_id": f"bench_{k}",
             "content": json.dumps({"order_id": f"#W{k:07d}", "status": "delivered", "items": [k, k + 1]})}]


async def measure(args: argparse.Namespace, model: EmbeddingModel) -> dict[str, dict[str, list[float]]]:
    counter = TokenCounters().for_model(MODEL)
    cold_history = prune_speed.history_of(100_000, counter)
    warm_history = prune_speed.history_of(20_000, counter)
    sides = [Side(name, model) for name in POLICIES]
    out: dict[str, dict[str, list[float]]] = {s.name: {"cold": [], "warm": [], "cpu_ms": []} for s in sides}
    for repeat in range(args.repeats):
        for side in sides if repeat % 2 == 0 else reversed(sides):
            policy = POLICIES[side.name]
            await side.fresh()
            target = int(0.3 * counter.count_messages(cold_history))
            out[side.name]["cold"].append(await side.timed(call(cold_history, policy, f"cold-{repeat}", target)))
            await side.idle()
            if side.embedder is not None:
                cpu = side.metrics.registry.get_sample_value("sieve_embedding_cpu_seconds_total") or 0.0
                done = side.metrics.registry.get_sample_value("sieve_embedding_messages_total",
                                                               {"outcome": "embedded"}) or 1.0
                out[side.name]["cpu_ms"].append(1000 * cpu / done)
            target = int(0.8 * counter.count_messages(warm_history)) + 4000
            history = list(warm_history)
            await side.timed(call(history, policy, f"warm-{repeat}", target))
            await side.idle()
            steps = []
            for k in range(args.steps):
                history += agent_step(repeat * 1000 + k)
                steps.append(await side.timed(call(list(history), policy, f"warm-{repeat}", target)))
                await side.idle()
            out[side.name]["warm"].append(statistics.median(steps))
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    for side in sides:
        if side.embedder is not None:
            await side.embedder.stop()
    return out


def rss(args: argparse.Namespace, port: int = 8327) -> dict[str, float]:
    counter = TokenCounters().for_model(MODEL)
    history = prune_speed.history_of(100_000, counter)
    found = {}
    for name in POLICIES:
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "default.yaml").write_text(f"scorer: {name}\n")
            env = {"SIEVE_POLICIES_DIR": folder, "PATH": "/usr/bin:/bin"}
            proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)],
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}"
                for _ in range(300):
                    try:
                        if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.1)
                httpx.post(url + "/v1/prune", json={"model": MODEL, "messages": history}, timeout=120,
                           headers={"x-sieve-target-tokens": "30000"})
                while "sieve_embedding_queue_messages 0.0" not in httpx.get(url + "/metrics").text and name != "local":
                    time.sleep(0.5)
                status = Path(f"/proc/{proc.pid}/status").read_text()
                found[name] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024
            finally:
                proc.terminate()
                proc.wait(10)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--sessions", type=Path, default=prune_speed.SESSIONS)
    ap.add_argument("--rss", action="store_true")
    args = ap.parse_args()
    prune_speed.SESSIONS = args.sessions
    model = EmbeddingModel.load(Settings().embedding_model_dir)
    out = asyncio.run(measure(args, model))
    med = {side: {k: statistics.median(v) if v else float("nan") for k, v in figures.items()}
           for side, figures in out.items()}
    print(f"{'':12} {'cold 100k ms':>14} {'warm 20k step ms':>18} {'model CPU ms/msg':>18}")
    for side, m in med.items():
        print(f"{side:12} {m['cold']:>14.1f} {m['warm']:>18.3f} {m['cpu_ms']:>18.2f}")
    local, emb = med["local"], med["embedding"]
    print(f"embedding / local: cold {emb['cold'] / local['cold']:.3f}, warm step +{emb['warm'] - local['warm']:.3f} ms")
    if args.rss:
        for name, mib in rss(args).items():
            print(f"RSS after the 100k history, scorer {name}: {mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
