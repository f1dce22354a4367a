"""Quality of the pure pipeline on the dev fixtures, without a gateway (fast iteration).

    python bench/offline_quality.py --source locomo --ratio 0.3,0.2 --limit 200

Uses ../shared/bench/quality.py's scoring so figures match `quality.py --gateway`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shared import require, shared_bench, shared_data  # noqa: E402

sys.path.insert(0, str(require(shared_bench() / "quality.py", "the quality evaluator (quality.py)").parent))

from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

import quality  # noqa: E402

from gateway.pruning.pipeline import prune  # noqa: E402
from gateway.pruning.policy import Policy, Steering  # noqa: E402
from gateway.pruning.scoring import LocalScorer  # noqa: E402
from gateway.pruning.tokens import TokenCounters  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("fixtures", nargs="*", default=[str(shared_data("dev-locomo.jsonl.gz")),
                                                    str(shared_data("dev-tau-retail.jsonl.gz"))])
    ap.add_argument("--ratio", default="0.3")
    ap.add_argument("--source", action="append")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--stride", type=int, default=1, help="take every N-th case")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="a policy knob for this run, e.g. --set protect_last_units=4 (repeatable)")
    args = ap.parse_args()
    for fixture in args.fixtures:
        require(Path(fixture), f"the fixture {Path(fixture).name}", "fixtures of bench/data/ as arguments")
    quality.setup_tokenizer()
    cases = quality.load_cases(args.fixtures, set(args.source) if args.source else None, args.limit)
    cases = cases[:: args.stride]
    knobs = dict(kv.split("=", 1) for kv in args.set)
    policy = Policy(**{k: type(getattr(Policy(), k))(v) if not isinstance(getattr(Policy(), k), bool)
                       else v.lower() in ("1", "true", "yes") for k, v in knobs.items()})
    counters, scorer = TokenCounters(), LocalScorer()
    for ratio in [float(r) for r in args.ratio.split(",")]:
        by_source: dict[str, list] = {}
        t0 = time.perf_counter()
        for case in cases:
            req = case["request"]
            orig = case["meta"].get("orig_tokens") or quality.count_request(req)
            target = max(1, int(orig * ratio))
            res = prune(req, policy, scorer=scorer, counter=counters.for_model(req.get("model", "")),
                        steering=Steering(target_tokens=target))
            row = quality.score_case(case, res.request, target, orig)
            by_source.setdefault(case["source"], []).append(row)
        dt = time.perf_counter() - t0
        for source, rows in by_source.items():
            s = quality.summarize(rows)
            print(f"ratio {ratio} {source:12s} n={s['cases']} evidence={s.get('evidence_recall') or 0:.3f} "
                  f"grounding={s.get('grounding_recall') or 0:.3f} valid={s['valid_rate']:.3f} "
                  f"over={s.get('over_budget_rate_feasible') or 0:.3f} ratio_med={s['ratio_median']:.3f} "
                  f"({dt:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
