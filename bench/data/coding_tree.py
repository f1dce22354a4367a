"""A temporary copy of one installed source tree, and the real tools a coding agent runs on it.

Every tool result in the coding fixtures comes from here: the command really
runs in the copy (``ls``, ``find``, ``grep -rn``, ``cat -n | sed -n``, ``patch``,
``python -m pytest``, ``git``). The copy lives at a fixed path and runs with a
fixed environment, so the outputs are the same bytes on every build; the only
rewrites are the ones listed in ``normalize`` (wall-clock durations, memory
addresses), which differ between runs of the same code.
"""
from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from coding_specs import TestFile, Tree

ROOT = Path("/tmp/sieve-coding-src")
SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
GREP_MAX_LINES = 60       # a grep tool caps its hits, as agents' grep tools do
BASH_HEAD, BASH_TAIL = 150, 80
GIT_DATE = "2025-01-01T00:00:00+00:00"
ENV = {
    "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    "HOME": str(ROOT / ".home"),
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "COLUMNS": "100",
    "TERM": "dumb",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the header then names no machine-local plugins
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": GIT_DATE,
    "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_COMMITTER_DATE": GIT_DATE,
}
_DURATION = re.compile(r"\bin \d+\.\d\ds\b")
_ADDRESS = re.compile(r"\b0x[0-9a-f]{8,16}\b")


def normalize(text: str) -> str:
    """The two things that differ between two runs of the same code: durations and addresses."""
    return _ADDRESS.sub("0x7f3a2c1e9d40", _DURATION.sub("in 0.05s", text))


def cap_lines(text: str, head: int, tail: int) -> str:
    lines = text.splitlines()
    if len(lines) <= head + tail:
        return text
    cut = len(lines) - head - tail
    return "\n".join(lines[:head] + [f"... [{cut} lines truncated] ..."] + lines[-tail:])


class Workspace:
    """One tree copied to ROOT/<dist>-<version>, with its test files, under git."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.root = ROOT / f"{tree.dist.lower()}-{tree.version}"
        self.expected: dict[str, dict[str, str]] = {}

    # -- set-up ---------------------------------------------------------------
    def prepare(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        (ROOT / ".home").mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True)
        for pkg in self.tree.packages:
            shutil.copytree(SITE / pkg, self.root / pkg,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        (self.root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\naddopts = -p no:cacheprovider\n")
        (self.root / "tests").mkdir()
        (self.root / "tests" / "__init__.py").write_text("")
        for tf in self.tree.files:
            self.expected[tf.name] = self.evaluate(tf)
            self.write_tests(tf)

    def write_tests(self, tf: TestFile, leave_out: str | None = None) -> None:
        names = [n for n, _ in tf.tests if n != leave_out]
        (self.root / "tests" / f"test_{tf.name}.py").write_text(self.test_source(tf, names))

    def commit(self) -> None:
        """The tree as the user has it: bugs and all, committed, so `git diff` shows only the agent's edits."""
        self.sh("git init -q && git add -A && git commit -q -m 'import sources and tests'")

    def test_source(self, tf: TestFile, names: list[str] | None = None) -> str:
        body = [f'"""Behaviour of {tf.module}."""\n{tf.imports}\n']
        for name, expr in tf.tests:
            if names is None or name in names:
                body.append(self.test_function(tf, name, expr))
        return "\n".join(body)

    def test_function(self, tf: TestFile, name: str, expr: str) -> str:
        return f"\ndef {name}():\n    assert {expr} == {self.expected[tf.name][name]}\n"

    def evaluate(self, tf: TestFile) -> dict[str, str]:
        """repr of every test expression, computed by running it on the tree as it is now."""
        return self.evaluate_all([tf])[tf.name]

    def evaluate_all(self, files: list[TestFile]) -> dict[str, dict[str, str]]:
        """evaluate() for several test files in one interpreter (each file in its own namespace)."""
        script = textwrap.dedent("""
            import json, sys
            result = {}
            for spec in json.load(sys.stdin):
                ns = {}
                exec(spec["imports"], ns)
                out = result[spec["name"]] = {}
                for name, expr in spec["tests"]:
                    try:
                        out[name] = repr(eval(expr, ns))
                    except Exception as exc:
                        out[name] = "!" + type(exc).__name__
            print(json.dumps(result))
        """)
        spec = [{"name": tf.name, "imports": tf.imports, "tests": list(tf.tests)} for tf in files]
        res = subprocess.run([sys.executable, "-c", script], input=json.dumps(spec), cwd=self.root, env=ENV,
                             capture_output=True, text=True, timeout=10)
        if res.returncode != 0:
            raise RuntimeError(f"evaluating {[tf.name for tf in files]} failed: {res.stderr[-2000:]}")
        return json.loads(res.stdout)

    # -- the tools --------------------------------------------------------------
    def sh(self, command: str, timeout: float = 120) -> tuple[int, str]:
        res = subprocess.run(["bash", "-c", command], cwd=self.root, env=ENV, capture_output=True,
                             timeout=timeout)
        out = (res.stdout + res.stderr).decode("utf-8", "replace")
        return res.returncode, normalize(out)

    def list_dir(self, path: str) -> str:
        rc, out = self.sh(f"ls -1p -- {_q(path)}")
        return out.rstrip("\n") or "(empty directory)"

    def find_files(self, pattern: str, path: str) -> str:
        rc, out = self.sh(f"find {_q(path)} -name {_q(pattern)} -not -path '*/__pycache__/*' | sort")
        return out.rstrip("\n") or "No files found."

    def grep(self, pattern: str, path: str) -> str:
        rc, out = self.sh(f"grep -rnHE --include='*.py' -- {_q(pattern)} {_q(path)} | sort -t: -k1,1 -k2,2n")
        out = out.rstrip("\n")
        if not out:
            return "No matches found."
        lines = out.splitlines()
        if len(lines) > GREP_MAX_LINES:
            lines = lines[:GREP_MAX_LINES] + [f"[{len(lines) - GREP_MAX_LINES} more matches not shown]"]
        return "\n".join(lines)

    def read_file(self, path: str, start: int, end: int) -> str:
        rc, out = self.sh(f"cat -n -- {_q(path)} | sed -n '{start},{end}p'")
        return out.rstrip("\n")

    def bash(self, command: str) -> str:
        rc, out = self.sh(command)
        out = cap_lines(out.rstrip("\n"), BASH_HEAD, BASH_TAIL)
        return (out + "\n" if out else "") + f"[exit code {rc}]"

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of `old` by `new`: a unified diff applied with patch(1)."""
        text = (self.root / path).read_text()
        count = text.count(old)
        if count != 1:
            return f"Error: old_string occurs {count} times in {path}; it must occur exactly once."
        after = text.replace(old, new)
        diff = "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                            f"a/{path}", f"b/{path}"))
        patch_file = ROOT / ".home" / f"{self.root.name}.patch"
        patch_file.write_text(diff)
        rc, out = self.sh(f"patch -p1 --no-backup-if-mismatch -i {_q(str(patch_file))}")
        if rc != 0:
            raise RuntimeError(f"patch failed on {path}: {out}")
        line = text[:text.index(old)].count("\n") + 1
        last = line + new.count("\n")
        snippet = self.read_file(path, max(1, line - 4), last + 4)
        return (out.rstrip("\n") + f"\nThe file {path} has been updated. "
                "Here's the result of running `cat -n` on a snippet of the edited file:\n" + snippet)

    def file_lines(self, path: str) -> list[str]:
        return (self.root / path).read_text().splitlines()


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
