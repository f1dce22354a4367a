"""Digests of what the pure pipeline decides on the dev data: proof that a refactor changed nothing.

    python bench/prune_digest.py                          # this tree
    python bench/prune_digest.py --against /work/base     # and another tree: equal or not
    python bench/prune_digest.py --against 99e55f9        # a git revision (temporary worktree)

Cases, all pruned in-process with the default ``Policy`` and ``LocalScorer``,
counted for the case's model:

* every case of ``dev-locomo.jsonl.gz`` and ``dev-tau-retail.jsonl.gz`` at target
  ratios 0.2 and 0.5 (target = ``int(ratio * meta.orig_tokens)``, no state);
* the 40 sessions of ``dev-sessions-retail.jsonl.gz`` replayed step by step, the
  frozen plan carried from step to step through ``to_bytes``/``from_bytes`` as
  the gateway's state store carries it: at a target of 4,000 tokens (the
  ``under``, ``frozen`` and ``epoch`` modes), and at 1,000, below the sessions'
  1,524-token system prompt (a target the pins cannot meet, and ``no_gain``:
  the dev data reaches that mode nowhere else).

Each case (a session step is a case of its own) hashes, with blake2b:

* the forwarded request (orjson, sorted keys);
* the per-message actions;
* the report (orjson, sorted keys), normalised so that trees from before and
  after the renaming compare: the key ``cap_tokens`` (older trees) is read as
  ``target_rule_tokens``, and a ``target_tokens`` of null (older trees report
  only an explicit target there) as the target in force, the policy's. Every
  case here names its target, so the second rule never changes a value;
* the stored plan (``FrozenPlan.to_bytes()``): the bytes two releases share in
  Redis.

Each side runs in a fresh process with its tree first on ``sys.path`` (older
trees take ``prune(..., target=...)``, newer ones ``steering=Steering(...)``;
the side adapts), its cases spread over ``--jobs`` forked workers. Prints per
data set the case count, the modes reached and one digest, then one overall;
with ``--against``, both trees' lines and the first case whose digest differs.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shared import require, shared_dir  # noqa: E402

DATA = shared_dir() / "data"
NEEDED = ("dev-locomo.jsonl.gz", "dev-tau-retail.jsonl.gz", "dev-sessions-retail.jsonl.gz")
RATIOS = (0.2, 0.5)
SESSION_TARGETS = (4_000, 1_000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="another tree (a folder) or a git revision to compare with")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes per side (default: 2)")
    ap.add_argument("--data", type=Path, default=DATA, help=f"folder of the dev data (default: {DATA})")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # internal: digest one tree, print JSON lines
    args = ap.parse_args()
    for name in NEEDED:
        require(args.data / name, f"the dev data set {name}", "--data FOLDER")
    if args.side:
        return _run_side(Path(args.side), args.data, args.jobs)
    if not args.against:
        _print_side("this tree", _side(ROOT, args))
        return 0
    with _tree(args.against) as other:
        sides = {"this tree": _side(ROOT, args), args.against: _side(other, args)}
    for name, digests in sides.items():
        _print_side(name, digests)
    mine, theirs = sides.values()
    first = next((case for case in mine if mine[case]["digest"] != theirs.get(case, {}).get("digest")), None)
    first = first or next((case for case in theirs if case not in mine), None)
    if first is None:
        print(f"equal: every one of {len(mine)} case digests matches")
        return 0
    print(f"DIFFERENT: first differing case {first}")
    return 1


# ---- the comparing side -------------------------------------------------------------


class _tree:
    """A folder as it is, or a git revision checked out into a temporary worktree."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Path:
        if Path(self.spec).is_dir():
            return Path(self.spec).resolve()
        self._tmp = tempfile.TemporaryDirectory()
        path = Path(self._tmp.name) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), self.spec], cwd=ROOT, check=True)
        return path

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(Path(self._tmp.name) / "other")],
                           cwd=ROOT, check=False)
            self._tmp.cleanup()


def _side(tree: Path, args: argparse.Namespace) -> dict[str, dict]:
    """case id -> {"set", "mode", "digest"}, from a fresh process that imports ``tree``."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--side", str(tree), "--data", str(args.data),
                           "--jobs", str(args.jobs)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the side of {tree} failed")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    digests = {row["case"]: row for row in rows}
    if len(digests) != len(rows):
        raise SystemExit(f"the side of {tree} printed a case id twice")
    print(f"{tree}: {len(rows)} cases digested in {time.perf_counter() - started:.0f} s", flush=True)
    return digests


def _print_side(name: str, digests: dict[str, dict]) -> None:
    print(f"{name}:")
    overall = hashlib.blake2b(digest_size=16)
    for dataset in dict.fromkeys(row["set"] for row in digests.values()):
        rows = [row for row in digests.values() if row["set"] == dataset]
        h = hashlib.blake2b(digest_size=16)
        modes: dict[str, int] = {}
        for row in rows:  # in case order (the side prints them so)
            h.update(row["digest"].encode())
            overall.update(row["digest"].encode())
            modes[row["mode"]] = modes.get(row["mode"], 0) + 1
        counted = ", ".join(f"{mode} {n}" for mode, n in sorted(modes.items()))
        print(f"  {dataset:<14} {len(rows):>5} cases  {h.hexdigest()}  ({counted})")
    print(f"  {'overall':<14} {len(digests):>5} cases  {overall.hexdigest()}")


# ---- one side: runs with its tree first on sys.path ----------------------------------


def _run_side(tree: Path, data: Path, jobs: int) -> int:
    sys.path.insert(0, str(tree))
    try:
        from gateway.config.settings import prepare_offline_environment
    except ImportError:  # a tree from before the packages (gateway/settings.py)
        from gateway.settings import prepare_offline_environment

    prepare_offline_environment()  # the process prepares it, before anything counts
    tasks = _tasks(data)
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        # Big tasks first, so no worker is left with a long one at the end.
        order = sorted(range(len(tasks)), key=lambda i: -tasks[i][2])
        results: dict[int, list[dict]] = {}
        for i, rows in pool.imap_unordered(_digest_task, [(i, tasks[i]) for i in order]):
            results[i] = rows
    for i in range(len(tasks)):
        for row in results[i]:
            print(json.dumps(row))
    return 0


def _tasks(data: Path) -> list[tuple[str, dict, int]]:
    """(data set, case or session, a size to schedule by)."""
    tasks: list[tuple[str, dict, int]] = []
    for dataset, name in (("locomo", "dev-locomo.jsonl.gz"), ("tau-retail", "dev-tau-retail.jsonl.gz")):
        for line in gzip.open(data / name):
            case = json.loads(line)
            tasks.append((dataset, case, case["meta"]["orig_tokens"]))
    for line in gzip.open(data / "dev-sessions-retail.jsonl.gz"):
        session = json.loads(line)
        tasks.append(("sessions", session, session["meta"]["tokens"] * len(session["steps"]) // 8))
    return tasks


_PRUNER = None


def _digest_task(job: tuple[int, tuple[str, dict, int]]) -> tuple[int, list[dict]]:
    global _PRUNER
    if _PRUNER is None:
        _PRUNER = _Pruner()  # one per worker: its counters and scorer caches are shared like a gateway's
    i, (dataset, case, _) = job
    if dataset == "sessions":
        return i, [row for target in SESSION_TARGETS for row in _PRUNER.session(case, target)]
    return i, [_PRUNER.case(dataset, case, ratio) for ratio in RATIOS]


class _Pruner:
    """The pipeline of the tree on ``sys.path``, called with either ``prune()`` signature."""

    def __init__(self) -> None:
        import inspect

        from gateway.pruning import pipeline
        from gateway.pruning.frozen import FrozenPlan
        from gateway.pruning.policy import Policy
        from gateway.pruning.scoring import LocalScorer
        from gateway.pruning.tokens import TokenCounters

        self.prune, self.frozen_plan = pipeline.prune, FrozenPlan
        self.policy, self.scorer, self.counters = Policy(), LocalScorer(), TokenCounters()
        self.steering = None
        if "steering" in inspect.signature(pipeline.prune).parameters:
            from gateway.pruning.policy import Steering

            self.steering = Steering

    def run(self, body: dict, target: int, state=None):
        counter = self.counters.for_model(body["model"])
        if self.steering is None:
            return self.prune(body, self.policy, scorer=self.scorer, counter=counter, state=state, target=target)
        return self.prune(body, self.policy, scorer=self.scorer, counter=counter, state=state,
                          steering=self.steering(target_tokens=target))

    def case(self, dataset: str, case: dict, ratio: float) -> dict:
        result = self.run(case["request"], int(ratio * case["meta"]["orig_tokens"]))
        return self.row(dataset, f"{case['id']}@{ratio}", result)

    def session(self, session: dict, target: int) -> list[dict]:
        rows, raw = [], None
        for step in session["steps"]:
            body = {"model": session["model"], "tools": session["tools"], "messages": session["messages"][:step["k"]]}
            result = self.run(body, target, self.frozen_plan.from_bytes(raw) if raw else None)
            raw = result.state.to_bytes()
            rows.append(self.row(f"sessions@{target}", f"{session['id']}@{target}#k={step['k']}", result))
        return rows

    def row(self, dataset: str, case_id: str, result) -> dict:
        import orjson

        report = result.report()
        if "cap_tokens" in report:
            report["target_rule_tokens"] = report.pop("cap_tokens")
        if report["target_tokens"] is None:
            report["target_tokens"] = self.policy.target_tokens
        h = hashlib.blake2b(digest_size=16)
        for part in (orjson.dumps(result.request, option=orjson.OPT_SORT_KEYS),
                     orjson.dumps([str(a) for a in result.message_actions]),
                     orjson.dumps(report, option=orjson.OPT_SORT_KEYS),
                     result.state.to_bytes()):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return {"set": dataset, "case": case_id, "mode": str(result.mode), "digest": h.hexdigest()}


if __name__ == "__main__":
    raise SystemExit(main())
