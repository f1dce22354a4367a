"""Where the shared dev data and evaluators are: a ``shared/`` folder beside the checkout, or
beside the folder that holds it (a git worktree under ``wt/``)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = next((p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()),
              ROOT.parent / "shared")
