"""Cold prune at 100k tokens: this tree against another git revision, interleaved.

    python bench/prune_ab.py [--against 3c1110e] [--rounds 6] [--tokens 100000]

The machine is noisy (another tenant's load moves a run by ±10 %), so a change
to the pipeline is measured against the code before it in the same minutes:
each round runs one fresh process per side (a cold process: empty caches), which
prunes the same history eight times cold and reports its median; the sides
alternate, and so does which of them goes first in a round (with one order
throughout, the order alone moved the ratio by 10-20 % here). Prints both
medians and their ratio. The other revision is checked
out into a temporary git worktree, removed afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shared import SHARED  # noqa: E402

# Runs in a fresh process with one tree first on sys.path; older trees take
# prune(..., target=N), newer ones prune(..., steering=Steering(target_tokens=N)).
_ONE_SIDE = """
import inspect, statistics, sys, time
from pathlib import Path
tree, tokens = sys.argv[1], int(sys.argv[2])
sys.path[:0] = [tree, tree + "/bench"]
from gateway.settings import prepare_offline_environment
prepare_offline_environment()
import prune_speed
prune_speed.SESSIONS = Path(sys.argv[3])
from gateway.pruning.pipeline import prune
from gateway.pruning import policy
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
counter = TokenCounters().for_model("gpt-4o-mini")
messages = prune_speed.history_of(tokens, counter)
body = {"model": "gpt-4o-mini", "messages": messages}
target = int(counter.count_messages(messages) * 0.3)
if "steering" in inspect.signature(prune).parameters:
    steer = {"steering": policy.Steering(target_tokens=target)}
else:
    steer = {"target": target}
times = []
from gateway.pruning import text_features
for _ in range(8):
    cold = prune_speed.cold_counter()  # empties the word and id caches too
    text_features._WORD_TERMS.clear()  # which older revisions' cold_counter left warm
    started = time.perf_counter()
    prune(body, policy.Policy(), scorer=LocalScorer(), counter=cold, **steer)
    times.append((time.perf_counter() - started) * 1000)
print(statistics.median(times[1:]))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD", help="git revision to compare with (default: HEAD)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=100_000)
    args = ap.parse_args()
    sessions = SHARED / "data" / "dev-sessions-retail.jsonl.gz"
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), args.against], cwd=ROOT, check=True)
        try:
            sides = {args.against: other, "this tree": ROOT}
            medians: dict[str, list[float]] = {name: [] for name in sides}
            for round_ in range(args.rounds):
                order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
                for name in order:
                    done = subprocess.run([sys.executable, "-c", _ONE_SIDE, str(sides[name]), str(args.tokens),
                                           str(sessions)],
                                          capture_output=True, text=True, check=True)
                    medians[name].append(float(done.stdout.strip().splitlines()[-1]))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    print(f"cold prune of a {args.tokens:,}-token history, medians of {args.rounds} interleaved rounds (ms):")
    for name, values in medians.items():
        print(f"  {name:>12}  {statistics.median(values):7.1f}   rounds: {' '.join(f'{v:.1f}' for v in values)}")
    base, this = (statistics.median(v) for v in medians.values())
    print(f"  ratio this tree / {args.against}: {this / base:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
