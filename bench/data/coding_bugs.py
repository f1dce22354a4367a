"""Injected bugs: one-token mutations of lines the tests really execute.

A session's bug is found, not written by hand: the generator traces which
lines of the module under test run for the test expressions, tries one-token
mutations of them (comparison, boolean, arithmetic and index flips, the usual
slips) in a seeded order, and keeps the first that makes some tests of the file
fail and others pass, as a real regression does. The call stack that reached
the line is recorded too: it is the path the scripted agent reads along.
"""
from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
import textwrap
from dataclasses import dataclass

from coding_specs import TestFile
from coding_tree import ENV, Workspace

MUTATIONS = (
    (" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" >= ", " > "),
    (" == ", " != "), (" != ", " == "), (" and ", " or "), (" or ", " and "),
    ("if not ", "if "), (" is None", " is not None"), (" is not None", " is None"),
    (" + 1", " - 1"), (" - 1", " + 1"), ("[0]", "[-1]"), ("[-1]", "[0]"), ("[1:]", "[2:]"),
    ("True", "False"), ("False", "True"), (".lower()", ".upper()"), (".startswith(", ".endswith("),
    (".strip()", ".rstrip()"), (" += ", " -= "), ("(1)", "(2)"), (" in ", " not in "),
)

TRACE_SCRIPT = textwrap.dedent("""
    import json, os, sys
    spec = json.load(sys.stdin)
    target = os.path.abspath(spec["module"])
    root = os.getcwd()
    first = {}
    def frames(frame):
        out = []
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn.startswith(root) and "/tests/" not in fn:
                out.append([os.path.relpath(fn, root), frame.f_code.co_name,
                            frame.f_code.co_firstlineno, frame.f_lineno])
            frame = frame.f_back
        return out[::-1]
    current = [None]
    def tracer(frame, event, arg):
        if frame.f_code.co_filename != target:
            return None
        if event == "line" and frame.f_lineno not in first:
            first[frame.f_lineno] = [current[0], frames(frame)]
        return tracer
    ns = {}
    exec(spec["imports"], ns)
    for name, expr in spec["tests"]:
        current[0] = name
        sys.settrace(tracer)
        try:
            eval(expr, ns)
        except Exception:
            pass
        finally:
            sys.settrace(None)
    print(json.dumps(first))
""")


@dataclass
class Bug:
    test_file: TestFile
    path: str
    line: int            # 1-based line number of the mutated line
    before: str          # the line as it was
    after: str           # the mutated line
    function: str        # innermost function holding the line
    function_line: int
    stack: list          # [[path, function, first line, current line], ...] outermost first
    failing: list[str]   # tests failing with the bug


def executed_lines(ws: Workspace, tf: TestFile) -> dict[int, list]:
    spec = {"module": tf.module, "imports": tf.imports, "tests": list(tf.tests)}
    res = subprocess.run([sys.executable, "-c", TRACE_SCRIPT], input=json.dumps(spec), cwd=ws.root, env=ENV,
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return {int(k): v for k, v in json.loads(res.stdout).items()}


def _code_lines(source: str) -> set[int]:
    """Lines that hold statements other than def/class headers and docstrings."""
    tree = ast.parse(source)
    doc: set[int] = set()
    heads: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            heads.update(range(node.lineno, node.body[0].lineno))
            for d in node.decorator_list:
                heads.add(d.lineno)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return {n for n in range(1, len(source.splitlines()) + 1)} - doc - heads


def _failing(ws: Workspace, tf: TestFile, got: dict[str, str]) -> list[str]:
    return [k for k, _ in tf.tests if got[k] != ws.expected[tf.name][k]]


def find_bug(ws: Workspace, tf: TestFile, rng: random.Random, planted: list[Bug]) -> Bug:
    """The first seeded mutation that fails some of tf's tests and keeps the earlier bugs visible."""
    path = ws.root / tf.module
    source = path.read_text()
    lines = source.splitlines(True)
    executed = executed_lines(ws, tf)
    allowed = _code_lines(source)
    candidates = []
    for n in sorted(executed):
        text = lines[n - 1]
        code = text.split("#", 1)[0]
        if n not in allowed or code.strip().startswith(("@", "raise", "return NotImplemented")):
            continue
        for old, new in MUTATIONS:
            if old in code and '"' not in code.split(old, 1)[0][-3:]:
                candidates.append((n, old, new))
    rng.shuffle(candidates)
    names = [n for n, _ in tf.tests]
    baseline = ws.evaluate_all(list(ws.tree.files))
    for n, old, new in candidates[:80]:
        mutated = lines[n - 1].replace(old, new, 1)
        try:
            compile("".join(lines[:n - 1] + [mutated] + lines[n:]), tf.module, "exec")
        except SyntaxError:
            continue
        path.write_text("".join(lines[:n - 1] + [mutated] + lines[n:]))
        try:  # the whole tree must still import and run
            results = ws.evaluate_all(list(ws.tree.files))
        except (RuntimeError, subprocess.TimeoutExpired):
            results = None
        if results is not None:
            failing = _failing(ws, tf, results[tf.name])
            visible = all(_failing(ws, b.test_file, results[b.test_file.name]) for b in planted)
            # the bug shows in its own test file only, so each fix turns exactly that file green
            contained = all(results[o.name] == baseline[o.name] for o in ws.tree.files if o is not tf)
            if 0 < len(failing) < len(names) - 1 and visible and contained:
                stack = executed[n][1]
                func, first = _enclosing(source, n)
                return Bug(tf, tf.module, n, lines[n - 1].rstrip("\n"), mutated.rstrip("\n"),
                           func, first, stack, failing)
        path.write_text(source)
    raise RuntimeError(f"no usable mutation in {tf.module}")


def _enclosing(source: str, line: int) -> tuple[str, int]:
    best = ("<module>", 1)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if node.lineno >= best[1]:
                best = (node.name, node.lineno)
    return best
