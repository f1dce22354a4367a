"""What a fresh clone meets (issue 28): CI's entry point on a machine whose package manager is busy,
the benchmarks' documented commands without the data the repository does not ship, and docs that
say what the code does.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.api.app import create_app
from gateway.api.access import Access
from gateway.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def fake(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_ci_waits_for_the_dpkg_lock(tmp_path: Path) -> None:
    """Before: .ci/run failed at once when another process (unattended upgrades) held the lock."""
    tools, log = tmp_path / "bin", tmp_path / "apt.log"
    tools.mkdir()
    # apt-get as it answers while another dpkg holds the lock: only a caller that waits gets through.
    fake(tools, "apt-get", f'echo "$@" >> {log}\ncase "$*" in *DPkg::Lock::Timeout=*) exit 0;; esac\n'
                           'echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2\nexit 100\n')
    for name in ("python", "bash"):  # the install, the deploy checks and the tests: not this test's business
        fake(tools, name, "exit 0\n")
    os.symlink(shutil.which("dirname"), tools / "dirname")
    done = subprocess.run(["/bin/bash", str(ROOT / ".ci" / "run")], env={"PATH": str(tools), "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert "update" in calls[0].split() and "install" in calls[1].split()
    assert all("DPkg::Lock::Timeout=" in c for c in calls)


BENCH_COMMANDS = [
    ["bench/offline_quality.py", "--ratio", "0.3"],
    ["bench/prune_speed.py", "--sizes", "1000", "--repeats", "1"],
    ["bench/prune_digest.py"],
    ["bench/overhead.py", "--quick"],
    ["bench/dashboard_replay.py", "--limit", "1"],
    ["bench/format_equivalence.py", "--gateway", "http://127.0.0.1:9", "--format", "messages", "--",
     "bench/data/dev-coding.jsonl.gz"],
]


@pytest.mark.parametrize("command", BENCH_COMMANDS, ids=lambda c: c[0])
def test_a_documented_bench_command_in_a_fresh_clone_says_what_it_misses(tmp_path: Path, command: list[str]) -> None:
    """Before: offline_quality.py could not import quality, prune_speed.py and prune_digest.py read
    ../shared/data, overhead.py and dashboard_replay.py an absolute path of one machine."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if name.startswith(("gateway/", "bench/", "tests/", "policies/")) and (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    env = {**os.environ, "SIEVE_SHARED_DIR": str(tmp_path / "no-shared-folder")}
    done = subprocess.run([sys.executable, *command], cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-600:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING:")]
    assert len(lines) == 1 and "is not shipped with the repository" in lines[0] and "SIEVE_SHARED_DIR" in lines[0]


def test_no_bench_script_names_a_path_of_this_machine() -> None:
    for path in (ROOT / "bench").glob("*.py"):
        assert "/work/" not in re.sub(r"--against /work/\w+", "", path.read_text()), path.name


# -- docs say what the code does --------------------------------------------------------------------

def test_the_security_pages_route_table_lists_every_client_route() -> None:
    """Before: docs/security.md's table lacked the Messages and Responses routes."""
    text = (ROOT / "docs" / "security.md").read_text()
    client_row = next(line for line in text.splitlines() if line.startswith("| client |"))
    for route in create_app(Settings()).routes:
        if getattr(route, "access", None) is Access.CLIENT:
            assert f"`{route.path_format}`" in client_row or route.path_format.startswith("/v1/responses/{") and \
                "`/v1/responses/{id}`" in client_row, route.path_format


def test_the_docs_no_longer_say_what_is_not_so() -> None:
    security = (ROOT / "docs" / "security.md").read_text()
    assert "The Helm chart always configures keys" not in security  # the deploy trial runs open
    for page in (ROOT / "README.md", ROOT / "docs" / "http.md"):  # it merges in the upstream's list
        assert "| `GET /v1/models` | configured models |" not in page.read_text()
