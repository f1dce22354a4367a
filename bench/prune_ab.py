"""Cold prune at 100k tokens: this tree against another git revision, interleaved.

    python bench/prune_ab.py [--against 3c1110e] [--rounds 6] [--tokens 100000]
    python bench/prune_ab.py --against REV --instructions      # under valgrind: exact, load-free

The machine is noisy (another tenant's load moves a run by ±10 %), so a change
to the pipeline is measured against the code before it in the same minutes:
each round runs one fresh process per side (a cold process: empty caches), which
prunes the same history eight times cold and reports its median; the sides
alternate, and so does which of them goes first in a round (with one order
throughout, the order alone moved the ratio by 10-20 % here). Prints both
medians and their ratio, in wall time and in the process's CPU time (on a loaded
machine a prune waits for a core, which only the wall time counts: the CPU
ratio is the steadier one there). The other revision is checked
out into a temporary git worktree, removed afterwards.

``--instructions`` counts instead of timing: each side runs under valgrind's
callgrind (PYTHONHASHSEED=0, OpenBLAS on one thread) once with one cold prune and once with three, and the
difference over two is the machine instructions of one cold prune (the first prune
of a process, which also compiles regexes and loads vocabularies, is left out as the
timed rounds leave it out). The count repeats to within 0.05 % whatever the load, so
a change of 1-2 %, lost in the timed rounds' spread here, is read exactly; it does not
see cache misses or branch mispredictions, so a change that trades instructions for
memory traffic is shown by the timed rounds too. About four minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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
try:
    from gateway.config.settings import prepare_offline_environment
except ImportError:  # a tree from before the packages (gateway/settings.py)
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
times, cpu = [], []
from gateway.pruning import text_features
prunes = int(sys.argv[4]) if len(sys.argv) > 4 else 8  # fewer under valgrind (--instructions)
for _ in range(prunes):
    cold = prune_speed.cold_counter()  # empties the word and id caches too
    text_features._WORD_TERMS.clear()  # which older revisions' cold_counter left warm
    started, started_cpu = time.perf_counter(), time.process_time()
    prune(body, policy.Policy(), scorer=LocalScorer(), counter=cold, **steer)
    times.append((time.perf_counter() - started) * 1000)
    cpu.append((time.process_time() - started_cpu) * 1000)
if prunes > 1:
    print(statistics.median(times[1:]), statistics.median(cpu[1:]))
"""


def _instructions(tree: Path, tokens: int, sessions: Path, prunes: int) -> int:
    """Instructions callgrind counts for a whole process of ``_ONE_SIDE`` with ``prunes`` prunes."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                           "-c", _ONE_SIDE, str(tree), str(tokens), str(sessions), str(prunes)],
                          capture_output=True, text=True,
                          # numpy's OpenBLAS threads spin while they wait, a count that moves with the load
                          # (the same tree read 668.0 M and 671.5 M): one thread, and it repeats.
                          env={**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"})
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"callgrind failed on {tree}")
    return int(found.group(1))


def _instructions_per_prune(tree: Path, tokens: int, sessions: Path) -> float:
    return (_instructions(tree, tokens, sessions, 3) - _instructions(tree, tokens, sessions, 1)) / 2


def _native(tree: Path, extension: str = "_token_scan") -> bool:
    """Does ``tree`` run ``extension`` in C (built)? The scorer's token loop, the value-run
    scan of ids (``_value_runs``) or the BM25 sums (``_bm25``), the last two in trees since."""
    return any((tree / "gateway" / "pruning").glob(f"{extension}*.so"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD", help="git revision to compare with (default: HEAD)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--instructions", action="store_true",
                    help="count each side's instructions per cold prune under valgrind instead of timing rounds")
    args = ap.parse_args()
    sessions = SHARED / "data" / "dev-sessions-retail.jsonl.gz"
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), args.against], cwd=ROOT, check=True)
        sides = {args.against: other, "this tree": ROOT}
        try:
            if (other / "setup.py").exists():  # its C token loop, built as an install would
                subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=other, check=True,
                               capture_output=True)
            in_c = ", ".join(name for name, tree in sides.items() if _native(tree)) or "neither"
            for extension, what in (("_value_runs", "value runs"), ("_bm25", "BM25 sums")):
                in_c += f"; {what} in C on " + (
                    ", ".join(name for name, tree in sides.items() if _native(tree, extension)) or "neither")
            if args.instructions:
                with ThreadPoolExecutor(2) as pool:  # valgrind runs one core per process
                    counted = dict(zip(sides, pool.map(lambda tree: _instructions_per_prune(
                        tree, args.tokens, sessions), sides.values())))
                base, this = counted.values()
                print(f"instructions per cold prune of a {args.tokens:,}-token history (callgrind; "
                      f"token loop in C on {in_c}):")
                for name, value in counted.items():
                    print(f"  {name:>12}  {value / 1e6:9.1f} M")
                print(f"  ratio this tree / {args.against}: {this / base:.4f}")
                return 0
            medians: dict[str, list[float]] = {name: [] for name in sides}
            cpu: dict[str, list[float]] = {name: [] for name in sides}
            for round_ in range(args.rounds):
                order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
                for name in order:
                    done = subprocess.run([sys.executable, "-c", _ONE_SIDE, str(sides[name]), str(args.tokens),
                                           str(sessions)],
                                          capture_output=True, text=True, check=True)
                    wall, used = done.stdout.strip().splitlines()[-1].split()
                    medians[name].append(float(wall))
                    cpu[name].append(float(used))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    print(f"cold prune of a {args.tokens:,}-token history, medians of {args.rounds} interleaved rounds (ms; "
          f"token loop in C on {in_c}):")
    for label, figures in (("wall", medians), ("CPU", cpu)):
        for name, values in figures.items():
            print(f"  {label:>4} {name:>12}  {statistics.median(values):7.1f}   rounds: {' '.join(f'{v:.1f}' for v in values)}")
        base, this = (statistics.median(v) for v in figures.values())
        print(f"  {label:>4} ratio this tree / {args.against}: {this / base:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
