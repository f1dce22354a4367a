"""The scripted coding agent: tool calls and short texts, answered by real tool runs.

The agent's moves are the ones coding agents make on a bug report (list the
tree, run the failing tests, read the test, grep for the definitions along the
call path, read line ranges, edit, re-run, look at the diff, summarise), and
every argument it passes is taken from an earlier tool output or the user's
words, as a model copies them. What it is told comes back from the real
tools (coding_tree.Workspace).
"""
from __future__ import annotations

import hashlib
import json
import random
import re

from coding_bugs import Bug
from coding_tree import Workspace

SYSTEM_PROMPT = """You are a coding agent working in a software repository on the user's machine. You help the user with software engineering tasks: fixing bugs, explaining code, adding tests.

# Environment
- Working directory: {root}
- Platform: linux, Python 3.11, the repository is a git checkout.
- Tests run with pytest from the working directory (the run_tests tool runs `python -m pytest`).

# Tools
- list_dir(path): list a directory (directories end with "/").
- find_files(pattern, path): find files whose name matches a glob pattern.
- grep(pattern, path): search Python files for an extended regular expression; prints path:line:text.
- read_file(path, start_line, end_line): print a line range of a file with line numbers. Read at most 200 lines at a time.
- edit_file(path, old_string, new_string): replace old_string, which must occur exactly once in the file, by new_string. Copy old_string exactly from read_file output, without the line-number prefix, and keep the indentation.
- run_tests(target, options): run `python -m pytest [target] [options]`: a test file, a test node id (path::name), or the whole suite when target is left out.
- bash(command): run a shell command in the working directory and see its output and exit code.

# How to work
- Investigate before you change anything: reproduce the problem, read the failing test, then follow the code path from the public entry point to the place where behaviour diverges. Prefer grep over reading whole files; read the function you need, with some context around it.
- Make the smallest change that fixes the root cause. Never edit tests to make them pass unless the user asks you to change a test.
- After an edit, re-run the failing test, then the test file, then the whole suite, and say honestly what still fails.
- Paths in your tool calls are relative to the working directory. Quote exact file paths, line numbers and names in your answers so the user can follow them.
- Keep answers short: what was wrong, where, what you changed, and what you ran to check it. Do not paste large files back to the user.
- Do not commit, push or create branches unless the user asks you to.
"""

TOOLS = [
    {"type": "function", "function": {
        "name": "list_dir", "description": "List the entries of a directory; subdirectories end with '/'.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Directory, relative to the working directory."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "find_files", "description": "Find files whose name matches a glob pattern, below a directory.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "description": "Glob pattern for the file name, e.g. '*.py'."},
            "path": {"type": "string", "description": "Directory to search below."}},
            "required": ["pattern", "path"]}}},
    {"type": "function", "function": {
        "name": "grep", "description": "Search Python files for an extended regular expression. "
                                       "Prints path:line:text for each hit, sorted by path and line.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "description": "Extended regular expression (grep -E)."},
            "path": {"type": "string", "description": "File or directory to search."}},
            "required": ["pattern", "path"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Print lines start_line..end_line of a file, numbered (cat -n).",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "File, relative to the working directory."},
            "start_line": {"type": "integer", "description": "First line to print (1-based)."},
            "end_line": {"type": "integer", "description": "Last line to print (inclusive)."}},
            "required": ["path", "start_line", "end_line"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace the single occurrence of old_string in a file by new_string.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "File to edit."},
            "old_string": {"type": "string", "description": "Exact text to replace; must occur exactly once."},
            "new_string": {"type": "string", "description": "Replacement text."}},
            "required": ["path", "old_string", "new_string"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run python -m pytest on a test file or node id (path::test_name), "
                                            "or on the whole suite when target is omitted; returns output and exit code.",
        "parameters": {"type": "object", "properties": {
            "target": {"type": "string", "description": "Test file or node id; omit for the whole suite."},
            "options": {"type": "string", "description": "Extra pytest options, e.g. '-q', '-x', '-vv'."}},
            "required": []}}},
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the working directory; returns output and exit code.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line."}},
            "required": ["command"]}}},
]

_FAILED = re.compile(r"^FAILED (\S+)", re.M)
_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:failed|passed|error|errors)(?:, )?)+) in ", re.M)
_GREP_HIT = re.compile(r"^([^:\n]+):(\d+):", re.M)


class Conversation:
    """The message list of one session, with the tools answering each call."""

    def __init__(self, sid: str, ws: Workspace, rng: random.Random) -> None:
        self.sid, self.ws, self.rng = sid, ws, rng
        self.messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT.format(root=ws.root)}]
        self.calls = 0
        self.read: set[tuple[str, int]] = set()
        # Per call id, the arguments the agent computed rather than copied from the history (a
        # read's end, a start some lines above a hit): no reading of the context predicts them,
        # so they are not grounding labels (build_coding.grounding).
        self.computed: dict[str, tuple[str, ...]] = {}

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def call(self, name: str, computed: tuple[str, ...] = (), **args) -> str:
        return self.parallel([(name, args)], [computed])[0]

    def read_file(self, path: str, start_line: int, end_line: int, start_computed: bool = False) -> str:
        """A read whose end the agent computes (how far to read), and its start too when it is
        not a line the history names (a hit, a definition, line 1)."""
        computed = ("start_line", "end_line") if start_computed else ("end_line",)
        return self.call("read_file", computed=computed, path=path, start_line=start_line, end_line=end_line)

    def parallel(self, calls: list[tuple[str, dict]], computed: list[tuple[str, ...]] | None = None) -> list[str]:
        tool_calls, outputs = [], []
        for n, (name, args) in enumerate(calls):
            self.calls += 1
            cid = "call_" + hashlib.sha256(f"{self.sid}:{self.calls}".encode()).hexdigest()[:24]
            if computed and computed[n]:
                self.computed[cid] = computed[n]
            tool_calls.append({"id": cid, "type": "function",
                               "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
            outputs.append(self._run(name, args))
        self.messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        for tc, out in zip(tool_calls, outputs):
            self.messages.append({"role": "tool", "tool_call_id": tc["id"], "content": out})
        return outputs

    def _run(self, name: str, args: dict) -> str:
        ws = self.ws
        if name == "read_file":
            self.read.add((args["path"], args["start_line"]))
            return ws.read_file(args["path"], args["start_line"], args["end_line"])
        if name == "edit_file":
            return ws.edit_file(args["path"], args["old_string"], args["new_string"])
        if name == "grep":
            return ws.grep(args["pattern"], args["path"])
        if name == "find_files":
            return ws.find_files(args["pattern"], args["path"])
        if name == "list_dir":
            return ws.list_dir(args["path"])
        if name == "run_tests":
            return ws.bash(" ".join(x for x in ("python -m pytest", args.get("target", ""),
                                                 args.get("options", "")) if x))
        return ws.bash(args["command"])

    # -- composite moves --------------------------------------------------------
    def pytest(self, target: str = "", flags: str = "") -> str:
        args = {k: v for k, v in (("target", target), ("options", flags)) if v}
        return self.call("run_tests", **args)

    def read_around(self, path: str, first: int, focus: int, length: int) -> None:
        """Read a function from its first line, far enough to see `focus`; two reads if it is long."""
        rng = self.rng
        span = max(rng.randint(40, 90), focus - first + rng.randint(12, 30))
        if span <= 200:
            self.read_file(path, first, min(length, first + span))
            return
        self.read_file(path, first, first + rng.randint(90, 140))
        self.read_file(path, max(1, focus - rng.randint(30, 60)), min(length, focus + rng.randint(20, 50)),
                       start_computed=True)

    def find_definition(self, func: str, path: str, pkg: str) -> int | None:
        """grep for `def func`, narrowed to the file when the package has many; returns its line."""
        out = self.call("grep", pattern=rf"def {func}\(", path=pkg)
        hits = [(p, int(n)) for p, n in _GREP_HIT.findall(out)]
        if (len(hits) > 6 and len({p for p, _ in hits}) > 1) or path not in {p for p, _ in hits}:
            out = self.call("grep", pattern=rf"def {func}\(", path=path)
            hits = [(path, int(n)) for _, n in _GREP_HIT.findall(out)] or \
                   [(path, int(m)) for m in re.findall(r"^(\d+):", out, re.M)]
        lines = [n for p, n in hits if p == path]
        return lines[0] if lines else None


def failing_ids(output: str) -> list[str]:
    return _FAILED.findall(output)


def summary_of(output: str) -> str:
    m = None
    for m in _SUMMARY.finditer(output):
        pass
    return m.group(1) if m else "no summary"


def defining_stack(bug: Bug, pkg: str) -> list[tuple[str, str, int, int]]:
    """The frames the agent follows: named functions of the package, outermost first."""
    frames = [(p, f, first, cur) for p, f, first, cur in bug.stack
              if not f.startswith("<") and p.startswith(pkg + "/")]
    if len(frames) > 3:
        frames = [frames[0]] + frames[-2:]
    return frames
