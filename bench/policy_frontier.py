"""The policy frontier: quality and replay cost on every dev domain per setting.

    python bench/policy_frontier.py protect_last_units=3 "low_water_ratio=0.6,keep_threshold=3" [--port 8500]

Each argument is one setting: keys of ``policies/default.yaml`` with new values,
comma-separated. The default policy is measured first, then each setting, one at a
time (the evaluators are CPU-bound: two runs at once would measure each other). Per
setting: a copy of ``policies/`` with those lines of ``default.yaml`` edited, a
gateway on it (``SIEVE_POLICIES_DIR``), the quality evaluator at 0.3 / 0.2 / 0.5
on LoCoMo, tau retail, coding, airline and telecom, the replay at 4000 / 8000 on the
retail, coding, airline and telecom sessions, and the replay's epochs
(``replay_epochs.summarize``, over all sessions). Prints one
row a setting, the columns of BENCHMARKS.md's frontier tables. The evaluators and
the LoCoMo / tau data are read from ``shared/`` beside the checkout, or ``--shared``
(bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


DATA = ROOT / "bench/data"


def quality_sets(shared: Path) -> tuple[Path, ...]:
    return (shared / "data/dev-locomo.jsonl.gz", shared / "data/dev-tau-retail.jsonl.gz", DATA / "dev-coding.jsonl.gz",
            DATA / "dev-airline.jsonl.gz", DATA / "dev-telecom.jsonl.gz")


def replay_sets(shared: Path) -> tuple[Path, ...]:
    return (shared / "data/dev-sessions-retail.jsonl.gz", DATA / "dev-sessions-coding.jsonl.gz",
            DATA / "dev-sessions-airline.jsonl.gz", DATA / "dev-sessions-telecom.jsonl.gz")


RATIOS = (0.3, 0.2, 0.5)
TARGETS = (4000, 8000)
# (column name, source in the evaluators' output, the recall that source is scored by)
QUALITY_COLUMNS = (("LoCoMo", "locomo", "evidence_recall"), ("retail", "tau2-retail", "grounding_recall"),
                   ("coding", "coding", "grounding_recall"), ("airline", "tau2-airline", "grounding_recall"),
                   ("telecom", "tau2-telecom", "grounding_recall"))
REPLAY_COLUMNS = (("retail", "tau2-retail"), ("coding", "coding"), ("airline", "tau2-airline"),
                  ("telecom", "tau2-telecom"))

sys.path.insert(0, str(ROOT / "bench"))
from replay_epochs import summarize  # noqa: E402


def edited_policies(setting: dict[str, str], into: Path) -> Path:
    """A copy of policies/ whose default.yaml has the setting's values (its
    comments and every other line kept)."""
    folder = into / "policies"
    shutil.copytree(ROOT / "policies", folder)
    path = folder / "default.yaml"
    text = path.read_text()
    for key, value in setting.items():
        text, n = re.subn(rf"^({re.escape(key)}:\s*)[^#\s]+", rf"\g<1>{value}", text, flags=re.M)
        if n != 1:
            raise SystemExit(f"policies/default.yaml has no single line for {key!r}")
    path.write_text(text)
    return folder


def _wait_healthy(port: int, gateway: subprocess.Popen) -> None:
    for _ in range(60):
        if gateway.poll() is not None:
            raise SystemExit(f"the gateway on port {port} exited with {gateway.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the gateway on port {port} did not answer /healthz")


def measure(setting: dict[str, str], port: int, shared: Path, work: Path) -> dict:
    """Quality, replay and epochs of one setting, through a gateway of its own."""
    env = {**os.environ, "SIEVE_POLICIES_DIR": str(edited_policies(setting, work)), "PYTHONPATH": str(ROOT),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}
    gateway = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(port, gateway)
        url = f"http://127.0.0.1:{port}"
        evaluators = shared / "bench"
        subprocess.run([sys.executable, "quality.py", *map(str, quality_sets(shared)), "--gateway", url,
                        "--ratio", ",".join(map(str, RATIOS)), "--concurrency", "2",
                        "--json-out", str(work / "q.json")], cwd=evaluators, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "replay.py", *map(str, replay_sets(shared)), "--gateway", url,
                        "--target", ",".join(map(str, TARGETS)), "--concurrency", "2",
                        "--json-out", str(work / "r.json"), "--steps-out", str(work / "steps.jsonl")],
                       cwd=evaluators, check=True, stdout=subprocess.DEVNULL)
    finally:
        gateway.terminate()
        gateway.wait()
    return {"quality": json.loads((work / "q.json").read_text()), "replay": json.loads((work / "r.json").read_text()),
            "epochs": summarize(work / "steps.jsonl")}


def row(label: str, measured: dict) -> str:
    """One table row: recall per domain at each ratio, replay grounding · OpenAI-like ·
    Anthropic-like cost per target and set, epochs per session per target."""
    quality = {(src, r["ratio"]): s for r in measured["quality"]["results"] for src, s in r["by_source"].items()}
    replay = {(src, r["target"]): s for r in measured["replay"]["results"] for src, s in r["by_source"].items()}
    cells = [label]
    for _, source, recall in QUALITY_COLUMNS:
        cells.append(" / ".join(f"{100 * quality[(source, ratio)][recall]:.1f}" for ratio in RATIOS))
    for target in TARGETS:
        for _, source in REPLAY_COLUMNS:
            s = replay[(source, target)]
            cells.append(f"{100 * s['grounding_recall']['total']:.1f} % · {s['cost_ratio_openai']['total']:.3f}"
                         f" · {s['cost_ratio_anthropic']['total']:.3f}")
    cells.append(" / ".join(f"{e['epochs_mean']:.2f}" for e in measured["epochs"] if e["source"] == "all"))
    valid = min(s["valid_rate"] for s in quality.values())
    return "| " + " | ".join(cells) + " |" + ("" if valid == 1.0 else f"  (valid {100 * valid:.1f} %)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("settings", nargs="*", help="KEY=VALUE[,KEY=VALUE...]: one setting")
    parser.add_argument("--port", type=int, default=8500)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared",
                        help="the folder holding data/ and bench/ (the evaluators)")
    args = parser.parse_args(argv)
    settings = [{}] + [dict(kv.split("=", 1) for kv in s.split(",")) for s in args.settings]
    header = (["setting"] + [f"{name} @0.3 / 0.2 / 0.5" for name, _, _ in QUALITY_COLUMNS]
              + [f"{name} {target}" for target in TARGETS for name, _ in REPLAY_COLUMNS]
              + ["epochs / session 4000 / 8000"])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for setting in settings:
        with tempfile.TemporaryDirectory() as work:
            label = ", ".join(f"`{k}` {v}" for k, v in setting.items()) or "default"
            print(row(label, measure(setting, args.port, args.shared.resolve(), Path(work))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
