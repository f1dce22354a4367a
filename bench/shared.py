"""Where the shared dev data and evaluators are: ``SIEVE_SHARED_DIR``, else a ``shared/`` folder
beside the checkout, or beside the folder that holds it (a git worktree under ``wt/``).

``dev-locomo.jsonl.gz``, ``dev-tau-retail.jsonl.gz``, ``dev-sessions-retail.jsonl.gz`` and the
evaluators ``quality.py`` / ``replay.py`` are not shipped with the repository (``shared/data/``,
``shared/bench/``). A benchmark that needs one and does not find it says so and exits (status 2),
naming what it looked for and what to pass instead, rather than failing with a traceback::

    from bench.shared import require, shared_data
    sessions = require(shared_data("dev-sessions-retail.jsonl.gz"), "the retail dev sessions", "--data FILE")

The coding, airline and telecom sets are shipped in ``bench/data/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ["SIEVE_SHARED_DIR"]) if os.environ.get("SIEVE_SHARED_DIR") else next(
    (p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()), ROOT.parent / "shared")


def shared_dir() -> Path:
    return SHARED


def shared_data(name: str) -> Path:
    return SHARED / "data" / name


def shared_bench() -> Path:
    return SHARED / "bench"


def require(path: Path, what: str, instead: str | None = None) -> Path:
    """``path`` when it exists; else a clear message on stderr and exit status 2."""
    if Path(path).exists():
        return Path(path)
    hint = f", or pass {instead}" if instead else ""
    print(f"{Path(sys.argv[0]).name}: {what} is not shipped with the repository and was not found at {path}. "
          f"Put the shared folder beside the checkout (shared/data, shared/bench) or set SIEVE_SHARED_DIR{hint}.",
          file=sys.stderr)
    raise SystemExit(2)
