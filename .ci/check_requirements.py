"""Offline dependency check: every requirement of sieve-gateway[test], followed
transitively, is installed at a version its requirer accepts.

    python .ci/check_requirements.py            # the check (CI runs it)
    python .ci/check_requirements.py --freeze   # the installed closure as pins: .ci/constraints.txt

`pip check` would judge the whole interpreter (tools the machine ships with
bring their own conflicts); this judges only what Sieve depends on. The same
walk, printed as ``name==version``, is the constraints file CI installs with,
so a new release upstream cannot change a clean run.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "sieve-gateway"


def walk() -> tuple[dict[str, str], list[str]]:
    """The installed closure of sieve-gateway[test] (name -> version), and its problems."""
    problems: list[str] = []
    installed: dict[str, str] = {}
    seen: set[str] = set()
    todo = [(ROOT, frozenset({"test"}))]
    while todo:
        name, extras = todo.pop()
        key = f"{canonicalize_name(name)}{sorted(extras)}"
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(name)
        installed[canonicalize_name(name)] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            env = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(e) for e in env):
                continue
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{name} needs {req}, which is not installed")
                continue
            if req.specifier and not req.specifier.contains(version, prereleases=True):
                problems.append(f"{name} needs {req}, but {req.name} {version} is installed")
            todo.append((req.name, frozenset(req.extras)))
    installed.pop(canonicalize_name(ROOT), None)
    return installed, problems


def main() -> int:
    installed, problems = walk()
    if "--freeze" in sys.argv[1:]:
        print("# The versions CI installs (pip install -c .ci/constraints.txt -e '.[test]'), written by")
        print("# `python .ci/check_requirements.py --freeze` from an environment the whole suite passed in.")
        for name, version in sorted(installed.items()):
            print(f"{name}=={version}")
        return 1 if problems else 0
    for problem in problems:
        print(f"check_requirements: {problem}", file=sys.stderr)
    print(f"check_requirements: {len(installed)} distributions checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
