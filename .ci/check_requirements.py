"""Offline dependency check: every requirement of sieve-gateway[test], followed
transitively, is installed at a version its requirer accepts.

`pip check` would judge the whole interpreter (tools the machine ships with
bring their own conflicts); this judges only what Sieve depends on.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main() -> int:
    problems: list[str] = []
    seen: set[str] = set()
    todo = [("sieve-gateway", frozenset({"test"}))]
    while todo:
        name, extras = todo.pop()
        key = f"{canonicalize_name(name)}{sorted(extras)}"
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(name)
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
    for problem in problems:
        print(f"check_requirements: {problem}", file=sys.stderr)
    print(f"check_requirements: {len(seen)} distributions checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
