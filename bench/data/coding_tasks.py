"""The tasks of a coding session: fix a reported bug, add a regression test, explain code.

Each task is one user request and the agent's moves until its answer. Which
moves it makes varies with the session's seeded random generator (how the
user reports the bug, whether the agent reproduces first, how widely it looks
around), so no two sessions read the same way.
"""
from __future__ import annotations

import ast
import random
import re

from coding_agent import Conversation, defining_stack, failing_ids, summary_of
from coding_bugs import Bug

_GREP_HIT = re.compile(r"^([^:\n]+):(\d+):", re.M)


def _one_line(imports: str) -> str:
    return "; ".join(x for x in imports.splitlines() if x.strip())


def report_bug(conv: Conversation, bug: Bug, got: str, want: str, first: bool) -> None:
    rng, tf = conv.rng, bug.test_file
    test_path = f"tests/test_{tf.name}.py"
    node = f"{test_path}::{bug.failing[0]}"
    expr = dict(tf.tests)[bug.failing[0]]
    styles = ["suite", "node"] + (["value"] if len(expr) < 110 and "lambda" not in expr else [])
    style = rng.choice(styles)
    if style == "suite":
        text = rng.choice([
            f"`python -m pytest {test_path}` fails since the last refactor. Find the cause and fix it; don't change the tests.",
            f"Something broke in {tf.module}: {test_path} has failures now. Can you look into it and fix the library code?",
        ])
    elif style == "node":
        text = rng.choice([
            f"CI is red on {node}. Please fix the code (not the test).",
            f"{bug.failing[0]} in {test_path} started failing. Can you find out why and fix it?",
        ])
    else:
        text = (f"Bug report from a user: `{expr}` returns {got}, but it should return {want}. "
                "Please track it down and fix it, and check the tests still pass.")
    if first:
        text += rng.choice(["", " The repository is a vendored copy of the package plus our tests.",
                            " Run the tests from the repository root."])
    conv.user(text)
    conv.style = style  # type: ignore[attr-defined]


def fix_bug(conv: Conversation, bug: Bug, got: str, want: str, first: bool) -> None:
    rng, ws, tf = conv.rng, conv.ws, bug.test_file
    pkg = ws.tree.packages[0]
    test_path = f"tests/test_{tf.name}.py"
    report_bug(conv, bug, got, want, first)
    if first:
        conv.call("list_dir", path=".")
        if rng.random() < 0.5:
            conv.call("list_dir", path=pkg)
        if rng.random() < 0.4:
            conv.call("bash", command=rng.choice(["git status --short", "git log --oneline -5"]))
    expr = dict(tf.tests)[bug.failing[0]]
    if conv.style == "value" and "'" not in expr:  # type: ignore[attr-defined]
        conv.call("bash", command=f"python -c '{_one_line(tf.imports)}; print(repr({expr}))'")
    out = conv.pytest(test_path, rng.choice(["", "-q", "-x"]))
    failed = failing_ids(out) or [f"{test_path}::{bug.failing[0]}"]
    n_test_lines = len(ws.file_lines(test_path))
    conv.read_file(test_path, 1, n_test_lines)
    if rng.random() < 0.5:
        conv.pytest(failed[0], rng.choice(["-vv", "--tb=long", "-x -vv"]))
    follow_call_path(conv, bug, pkg)
    explore_around(conv, bug, pkg)
    if rng.random() < 0.3:
        conv.say(f"Found it: {bug.path} line {bug.line}, in `{bug.function}`, reads `{bug.after.strip()}`. "
                 f"It should be `{bug.before.strip()}`; that is why {failed[0]} fails. Shall I fix it?")
        conv.user(rng.choice(["Yes, go ahead.", "Go ahead.", "Yes please, fix it."]))
    apply_fix(conv, bug)
    conv.pytest(failed[0], rng.choice(["", "-q"]))
    out = conv.pytest(test_path, "-q")
    if rng.random() < 0.6:
        conv.call("bash", command=rng.choice(["git diff", "git diff --stat && git diff"]))
    suite = conv.pytest("", "-q")
    still = sorted({f.split("::")[0] for f in failing_ids(suite)})
    tail = (f" The full suite still fails in {', '.join(still)}, which is a separate problem."
            if still else f" The full suite passes ({summary_of(suite)}).")
    conv.say(f"Fixed. In `{bug.function}` ({bug.path}:{bug.line}) the line read `{bug.after.strip()}`; "
             f"I changed it back to `{bug.before.strip()}`. {test_path}: {summary_of(out)}." + tail)


def follow_call_path(conv: Conversation, bug: Bug, pkg: str) -> None:
    """Read along the call stack from the entry point to the function holding the bug."""
    rng, ws = conv.rng, conv.ws
    for path, func, first, current in defining_stack(bug, pkg):
        line = conv.find_definition(func, path, pkg)
        if line is None:
            line = first
        if (path, line) in conv.read and rng.random() < 0.7:
            continue
        conv.read_around(path, line, current, len(ws.file_lines(path)))
    if (bug.path, bug.function_line) not in conv.read:
        conv.read_around(bug.path, bug.function_line, bug.line, len(ws.file_lines(bug.path)))


def explore_around(conv: Conversation, bug: Bug, pkg: str) -> None:
    """What an agent checks before it edits: callers of the function, helpers, the module's imports."""
    rng, ws = conv.rng, conv.ws
    moves = ["callers", "head", "helper", "find"]
    rng.shuffle(moves)
    for move in moves[:rng.randint(1, 3)]:
        if move == "callers" and not bug.function.startswith("__"):
            out = conv.call("grep", pattern=rf"{bug.function}\(", path=pkg)
            hits = [(p, int(n)) for p, n in _GREP_HIT.findall(out)
                    if not (p == bug.path and int(n) == bug.function_line)]
            if hits:
                p, n = rng.choice(hits[:8])
                conv.read_file(p, max(1, n - rng.randint(10, 30)), min(len(ws.file_lines(p)), n + rng.randint(15, 40)),
                               start_computed=True)
        elif move == "head":
            conv.read_file(bug.path, 1, rng.randint(40, 80))
        elif move == "helper":
            name = _called_helper(ws.file_lines(bug.path), bug)
            if name:
                line = conv.find_definition(name, bug.path, pkg)
                if line:
                    conv.read_file(bug.path, line, min(len(ws.file_lines(bug.path)), line + rng.randint(25, 60)))
        elif move == "find":
            conv.call("find_files", pattern="*.py", path=bug.path.rsplit("/", 1)[0])


def _called_helper(lines: list[str], bug: Bug) -> str | None:
    """A module-level function of the bug's file called from the bug's function."""
    source = "\n".join(lines)
    tree = ast.parse(source)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.lineno == bug.function_line:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in defs \
                        and sub.func.id != bug.function:
                    return sub.func.id
    return None


def apply_fix(conv: Conversation, bug: Bug) -> None:
    lines = conv.ws.file_lines(bug.path)
    idx = bug.line - 1
    old, new, n = bug.after, bug.before, 1
    text = "\n".join(lines)
    while text.count(old) != 1 and idx + n < len(lines):  # widen until unique, as an agent must
        old = "\n".join(lines[idx:idx + n + 1])
        new = "\n".join([bug.before] + lines[idx + 1:idx + n + 1])
        n += 1
    conv.call("edit_file", path=bug.path, old_string=old, new_string=new)


def add_regression_test(conv: Conversation, bug: Bug, left_out: str) -> None:
    rng, ws, tf = conv.rng, conv.ws, bug.test_file
    test_path = f"tests/test_{tf.name}.py"
    conv.user(rng.choice([
        f"Thanks. Please add a regression test for this bug to {test_path}.",
        f"Good. Add a test to {test_path} that would have caught this.",
    ]))
    lines = ws.file_lines(test_path)
    conv.read_file(test_path, max(1, len(lines) - rng.randint(15, 30)), len(lines), start_computed=True)
    last = lines[-1]
    expr = dict(tf.tests)[left_out]
    new_test = ws.test_function(tf, left_out, expr)
    conv.call("edit_file", path=test_path, old_string=last, new_string=last + "\n" + new_test.rstrip("\n"))
    out = conv.pytest(f"{test_path}::{left_out}", rng.choice(["", "-q", "-v"]))
    if rng.random() < 0.5:
        out = conv.pytest(test_path, "-q")
    conv.say(f"Added `{left_out}` to {test_path}: it checks `{expr}` against the value from the fixed code "
             f"({summary_of(out)}).")


def explain(conv: Conversation, bug: Bug) -> None:
    """The user asks where a function of the call path lives and who calls it."""
    rng, ws = conv.rng, conv.ws
    pkg = ws.tree.packages[0]
    frames = [f for f in defining_stack(bug, pkg) if not f[1].startswith("__")] or \
             [(bug.path, bug.function, bug.function_line, bug.line)]
    path, func, first, current = rng.choice(frames)
    conv.user(rng.choice([
        f"Unrelated question while you're in there: where is `{func}` defined, and what calls it?",
        f"Before we go on, explain what `{func}` does and where it is used.",
    ]))
    line = conv.find_definition(func, path, pkg) or first
    conv.read_around(path, line, current, len(ws.file_lines(path)))
    out = conv.call("grep", pattern=rf"{func}\(", path=pkg)
    hits = [(p, int(n)) for p, n in _GREP_HIT.findall(out) if not (p == path and int(n) == line)]
    shown = []
    for p, n in hits[:rng.randint(1, 2)]:
        conv.read_file(p, max(1, n - rng.randint(8, 25)), min(len(ws.file_lines(p)), n + rng.randint(10, 30)),
                       start_computed=True)
        shown.append(f"{p}:{n}")
    where = ", ".join(f"{p}:{n}" for p, n in hits[:6]) or "nowhere else in the package"
    conv.say(f"`{func}` is defined at {path}:{line}. It is called from {where}"
             + (f" (I read {' and '.join(shown)})." if shown else "."))
