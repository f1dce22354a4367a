"""The shape of gateway/ in figures: rooms, floors, arrows, cycles, arrows back up.

    python bench/house_figures.py                 # this tree
    python bench/house_figures.py --tree /path    # another checkout (e.g. a worktree of main)

A *room* is a first-level package of ``gateway/`` (``gateway.wire.formats.view`` is
in ``wire``); a module sitting flat in ``gateway/`` is a room of its own. A *floor*
is a layer of docs/architecture.md (``LAYERS`` below; tests/unit/test_architecture.py
holds the same table). An *arrow* is a room importing another (each pair counted
once, imports under ``TYPE_CHECKING`` and inside functions included); a *cycle* is
a set of rooms that import each other round; an *arrow back up* goes from a floor
to a higher one. Also: imports that reach past a package's face (an inner module
of another package, where that package's ``__init__`` has an ``__all__``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.unit.test_architecture import LAYERS as PACKAGE_LAYERS, cycles  # noqa: E402

LAYERS = {
    **PACKAGE_LAYERS,
    # the flat modules of the tree before the move (docs/architecture.md of 622f0c0)
    "settings": 2, "policies": 2, "identity": 2, "auth_throttle": 2, "budgets": 2,
    "budget_guard": 2, "health": 2, "big_bodies": 2, "reservation_estimate": 2,
    "image_tokens": 2, "usage_bounds": 2,
    "services": 3, "proxy": 3, "pruner": 3, "accounting": 3, "expander": 3,
    "expand_record": 3, "passthrough": 3, "reasoning": 3, "stored_responses": 3, "deferred": 3,
    "app": 5, "cli_module": 5, "offline": 5, "shadow_report": 5,
}


def modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & known.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # not only submodules: the package's face too
                found.add(node.module)
    return {name for name in found if name in known}


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "(root)"
    return "cli_module" if parts[1] == "cli" and len(parts) == 2 and not _is_package.get("cli") else parts[1]


_is_package: dict[str, bool] = {}


def graph(package: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    known = modules(package)
    _is_package["cli"] = (package / "cli").is_dir()
    module_edges = {name: imports(path, known) - {name} for name, path in known.items()}
    rooms: dict[str, set[str]] = defaultdict(set)
    for name, targets in module_edges.items():
        rooms[room(name)]
        for target in targets:
            if room(target) != room(name) and room(target) != "(root)":
                rooms[room(name)].add(room(target))
    rooms.pop("(root)", None)
    return dict(rooms), module_edges


def faces(package: Path) -> dict[str, bool]:
    """Per package: does its ``__init__`` declare ``__all__``?"""
    return {p.parent.name: "__all__" in p.read_text() for p in package.glob("*/__init__.py")}


def past_the_face(package: Path, module_edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    with_face = {name for name, has in faces(package).items() if has}
    return sorted((src, dst) for src, targets in module_edges.items() for dst in targets
                  if room(dst) in with_face and room(src) != room(dst)
                  and dst != f"gateway.{room(dst)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--arrows", action="store_true", help="list every arrow")
    args = parser.parse_args()
    package = args.tree / "gateway"
    rooms, module_edges = graph(package)
    arrows = [(a, b) for a, targets in rooms.items() for b in targets]
    up = [(a, b) for a, b in arrows if LAYERS.get(b, 0) > LAYERS.get(a, 0)]
    flat = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    print(f"modules {len(module_edges)}; flat modules in gateway/ {len(flat)}")
    print(f"rooms {len(rooms)}; floors {len({LAYERS.get(r, 0) for r in rooms})}; arrows {len(arrows)}; "
          f"cycles {len(cycles(rooms))}; arrows back up {len(up)}")
    with_face = faces(package)
    print(f"packages with a face (__all__) {sum(with_face.values())} of {len(with_face)}; "
          f"imports past a face {len(past_the_face(package, module_edges))}")
    for cycle in cycles(rooms):
        print("  cycle:", " <-> ".join(cycle))
    for src, dst in past_the_face(package, module_edges):
        print(f"  past the face: {src} -> {dst}")
    for a, b in up:
        print(f"  up: {a} ({LAYERS.get(a, 0)}) -> {b} ({LAYERS.get(b, 0)})")
    if args.arrows:
        for a, b in sorted(arrows):
            print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
