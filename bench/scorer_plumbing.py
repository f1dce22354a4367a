"""What the LLM scorer's plumbing costs: tokens per request and added latency per scoring round.

    python bench/scorer_plumbing.py --limit 50                   # LoCoMo dev set, llm + hybrid modes
    python bench/scorer_plumbing.py --limit 50 --mode llm --ratio 0.3 --json-out bench/results/scorer.json

Each case is pruned to ``--ratio`` of its tokens, the way the gateway does it
(``gateway.exchange.prune_step``): the pure pipeline with a CapturingScorer, one scoring
round through ``LLMScorer`` against a fake OpenAI server on loopback, the
pipeline again with the returned scores. The fake answers every batch at once
with the local scorer's own scores (so nothing but the plumbing is measured:
prompt building, HTTP, JSON, parsing, the second prune); usage is counted
afterwards with tiktoken (o200k_base / cl100k_base, as for gpt-4o-mini), off
the timed path.

Reported per mode: scorer prompt and completion tokens per request, calls
per request, dollars per request at the scorer model's price, the main
request's original and forwarded tokens for scale, and the added latency
(scoring round + second prune; median, p95). The prompt of the first batch is
printed verbatim. No score cache (every round is cold), no deadline cut.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import orjson  # noqa: E402

from gateway.pruning.pipeline import Precomputed, prune  # noqa: E402
from gateway.pruning.policy import Policy, Steering  # noqa: E402
from gateway.pruning.scoring import LocalScorer  # noqa: E402
from gateway.pruning.tokens import TokenCounters  # noqa: E402
from gateway.scorers.llm import CapturingScorer, LLMScorer  # noqa: E402
from gateway.scorers.prompt import SYSTEM_PROMPT  # noqa: E402
from gateway.telemetry.metrics import Metrics  # noqa: E402
from gateway.telemetry.pricing import PriceBook  # noqa: E402
from gateway.telemetry.usage import Usage  # noqa: E402
from gateway.config import RouteKind  # noqa: E402
from gateway.upstream import Http1Client, LiteLLMUpstream, OpenAICompatibleUpstream  # noqa: E402
from tests.support.fake_scorer import ScorerModel, answer, batch_ids  # noqa: E402
from tests.support.fake_upstream import Reply  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "dev-locomo.jsonl.gz"


def load_cases(path: Path, limit: int | None, stride: int = 1) -> list[dict]:
    cases = []
    with gzip.open(path, "rt") as fh:
        for n, line in enumerate(fh):
            if n % stride:
                continue
            cases.append(json.loads(line))
            if limit and len(cases) >= limit:
                break
    return cases


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run_mode(mode: str, cases: list[dict], args, server: ScorerModel, current: dict,
                   prices: PriceBook, counters: TokenCounters) -> dict:
    scorer_counter = counters.for_model(args.scorer_model)
    policy = Policy(scorer=mode, scorer_api_base=server.base_url, scorer_model=args.scorer_model,
                    scorer_min_history_tokens=0, scorer_cost_check=False, scorer_cache_ttl_s=0,
                    scorer_deadline_s=600.0, scorer_batch_timeout_s=600.0, scorer_batch_size=args.batch_size,
                    hybrid_top_k=args.top_k)
    rows = []
    # The scorer's calls go through the forward's transport, as in the gateway.
    http = Http1Client(connect_timeout_s=5.0)
    upstreams = {RouteKind.OPENAI: OpenAICompatibleUpstream(http, read_timeout_s=600.0),
                 RouteKind.LITELLM: LiteLLMUpstream(timeout_s=600.0)}
    try:
        llm = LLMScorer(upstreams=upstreams, cache=None, metrics=Metrics(), prices=prices, counters=counters)
        for case in cases:
            body = case["request"]
            counter = counters.for_model(body["model"])
            target = max(1, int(counter.count_messages(body["messages"]) * args.ratio))
            capture = CapturingScorer(LocalScorer())
            t0 = time.perf_counter()
            first = prune(body, policy, scorer=capture, counter=counter, steering=Steering(target_tokens=target))
            local_s = time.perf_counter() - t0
            if capture.request is None:
                continue
            current.clear()
            current.update({i: s.score for i, s in capture.request.local.items()})
            requests_before = len(server.requests)
            t1 = time.perf_counter()
            run = await llm.score(capture.request, policy, org="bench", model=body["model"],
                                  saved_tokens=first.saved_tokens)
            t2 = time.perf_counter()
            second = prune(body, policy, scorer=LocalScorer(), counter=counter, steering=Steering(target_tokens=target),
                           known=Precomputed(scores=run.scores))
            t3 = time.perf_counter()
            assert not run.fallbacks, run.fallbacks
            # Tokens counted here, off the timed path (the fake shares this process's GIL).
            prompt_tokens = completion_tokens = 0
            for rec in server.requests[requests_before:]:
                prompt_tokens += sum(scorer_counter.count_message(m) for m in rec.json["messages"])
                ids = batch_ids(rec.json)
                completion_tokens += scorer_counter.count_text(answer({i: current[i] for i in ids}, "local"))
            cost = prices.cost(args.scorer_model, Usage(prompt_tokens, completion_tokens))
            rows.append({"id": case["id"], "original": first.original_tokens, "forwarded": second.forwarded_tokens,
                         "candidates": len(capture.request.candidates), "sent_units": run.sent_units,
                         "calls": run.calls, "prompt_tokens": prompt_tokens,
                         "completion_tokens": completion_tokens, "usd": cost.total_usd if cost else 0.0,
                         "local_prune_ms": local_s * 1000, "round_ms": (t2 - t1) * 1000,
                         "second_prune_ms": (t3 - t2) * 1000, "added_ms": (t3 - t1) * 1000,
                         "same_as_local": second.request["messages"] == first.request["messages"]})
            if args.show_prompt and mode == args.modes[0] and requests_before == 0:
                first_request = server.requests[0].json
                print("=" * 30, "the prompt, verbatim (first batch of the first case)", "=" * 30)
                for m in first_request["messages"]:
                    print(f"--- {m['role']} ---")
                    print(m["content"])
                print("--- request parameters ---")
                print(json.dumps({k: v for k, v in first_request.items() if k != "messages"}))
                print("=" * 90)
    finally:
        await http.close()
    return summarize(mode, rows)


def summarize(mode: str, rows: list[dict]) -> dict:
    if not rows:
        return {"mode": mode, "cases": 0}
    mean = lambda k: statistics.fmean(r[k] for r in rows)  # noqa: E731
    added = [r["added_ms"] for r in rows]
    rounds = [r["round_ms"] for r in rows]
    return {
        "mode": mode, "cases": len(rows),
        "original_tokens_mean": mean("original"), "forwarded_tokens_mean": mean("forwarded"),
        "candidates_mean": mean("candidates"), "sent_units_mean": mean("sent_units"),
        "calls_mean": mean("calls"),
        "scorer_prompt_tokens_mean": mean("prompt_tokens"),
        "scorer_prompt_tokens_median": statistics.median(r["prompt_tokens"] for r in rows),
        "scorer_completion_tokens_mean": mean("completion_tokens"),
        "scorer_usd_mean": mean("usd"),
        "local_prune_ms_median": statistics.median(r["local_prune_ms"] for r in rows),
        "round_ms_median": statistics.median(rounds), "round_ms_p95": pct(rounds, 0.95),
        "second_prune_ms_median": statistics.median(r["second_prune_ms"] for r in rows),
        "added_ms_median": statistics.median(added), "added_ms_p95": pct(added, 0.95),
        "same_as_local_rate": mean("same_as_local"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--stride", type=int, default=7, help="every N-th case (spreads over the conversations)")
    ap.add_argument("--ratio", type=float, default=0.3, help="target = ratio x the request's tokens")
    ap.add_argument("--mode", default="llm,hybrid", help="comma list of llm, hybrid")
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--top-k", type=int, default=48, help="hybrid_top_k")
    ap.add_argument("--scorer-model", default="gpt-4o-mini")
    ap.add_argument("--no-prompt", dest="show_prompt", action="store_false")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]

    counters = TokenCounters()
    prices = PriceBook.from_litellm()
    current: dict[int, int] = {}

    def respond(ids, attempt, req):  # the local scorer's own scores, at once
        return Reply(content=answer({i: current[i] for i in ids}, reason="local"))

    cases = load_cases(args.data, args.limit, args.stride)
    results = []
    with ScorerModel(respond) as server:
        for mode in args.modes:
            server.clear()
            results.append(asyncio.run(run_mode(mode, cases, args, server, current, prices, counters)))
    print(f"\n{len(cases)} cases from {args.data.name} (every {args.stride}th), target = {args.ratio} x request "
          f"tokens, batch {args.batch_size}, scorer {args.scorer_model}; system prompt "
          f"{counters.for_model(args.scorer_model).count_text(SYSTEM_PROMPT)} tokens per call")
    header = ("mode", "cases", "orig tok", "fwd tok", "cands", "sent", "calls", "scorer in", "scorer out",
              "$/req", "round p50", "round p95", "added p50", "added p95", "local prune p50")
    print(" | ".join(header))
    for r in results:
        if not r["cases"]:
            print(f"{r['mode']} | 0")
            continue
        print(" | ".join([
            r["mode"], str(r["cases"]), f"{r['original_tokens_mean']:.0f}", f"{r['forwarded_tokens_mean']:.0f}",
            f"{r['candidates_mean']:.0f}", f"{r['sent_units_mean']:.0f}", f"{r['calls_mean']:.1f}",
            f"{r['scorer_prompt_tokens_mean']:.0f}", f"{r['scorer_completion_tokens_mean']:.0f}",
            f"{r['scorer_usd_mean']:.5f}", f"{r['round_ms_median']:.1f} ms", f"{r['round_ms_p95']:.1f} ms",
            f"{r['added_ms_median']:.1f} ms", f"{r['added_ms_p95']:.1f} ms", f"{r['local_prune_ms_median']:.1f} ms"]))
    for r in results:
        if r["cases"]:
            print(f"{r['mode']}: forwarded request identical to the local-only prune in "
                  f"{r['same_as_local_rate']:.0%} of cases (expected ~100%: the fake answers with local scores)")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_bytes(orjson.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                "results": results}, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
