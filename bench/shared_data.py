"""The dev data and evaluators the repository does not ship: where the benchmarks look for them.

``dev-locomo.jsonl.gz``, ``dev-tau-retail.jsonl.gz``, ``dev-sessions-retail.jsonl.gz`` and
the evaluators ``quality.py`` / ``replay.py`` live in a ``shared/`` folder beside the
checkout (``shared/data/``, ``shared/bench/``), or where ``SIEVE_SHARED_DIR`` points.
A benchmark that needs one of them and does not find it says so and exits (status 2),
naming what it looked for and what to do, instead of failing with a traceback::

    from bench.shared_data import require, shared_data
    sessions = require(shared_data("dev-sessions-retail.jsonl.gz"), "the retail dev sessions", "--data FILE")

The coding, airline and telecom sets are shipped in ``bench/data/`` (``SHIPPED``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "bench" / "data"


def shared_dir() -> Path:
    """The shared folder: ``SIEVE_SHARED_DIR``, else ``shared/`` beside the checkout."""
    return Path(os.environ.get("SIEVE_SHARED_DIR") or ROOT.parent / "shared")


def shared_data(name: str) -> Path:
    return shared_dir() / "data" / name


def shared_bench() -> Path:
    return shared_dir() / "bench"


def require(path: Path, what: str, instead: str | None = None) -> Path:
    """``path`` when it exists; else a clear message on stderr and exit status 2."""
    if Path(path).exists():
        return Path(path)
    hint = f", or pass {instead}" if instead else ""
    print(f"{Path(sys.argv[0]).name}: {what} is not shipped with the repository and was not found at {path}. "
          f"Put the shared folder beside the checkout (shared/data, shared/bench) or set SIEVE_SHARED_DIR{hint}.",
          file=sys.stderr)
    raise SystemExit(2)
