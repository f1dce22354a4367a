"""The shape of the code, held by a test: layers, no import cycles, small modules and functions.

Read from the source (``ast``), so imports under ``TYPE_CHECKING`` and inside
functions count as much as those at the top: a cycle hidden from the
interpreter is still a cycle in the design (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gateway"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8
WEB_FRAMEWORKS = ("fastapi", "starlette", "uvicorn")
# The floors of docs/architecture.md, by package (a module of gateway.wire.formats is in
# ``wire``): a package imports its own floor or lower, never higher.
LAYERS = {
    "pruning": 0, "errors": 0,
    "wire": 1,
    "config": 2, "billing": 2, "state": 2, "telemetry": 2, "auth": 2,
    "upstream": 2, "scorers": 2, "embedding": 2,
    "exchange": 3,
    "expand": 4,
    "api": 5, "cli": 5,
}
# A package that holds one feature across floors (``sieve_expand``: docs/architecture.md)
# gives its lower modules their own floor; the rest of it, its face included, is on the
# package's. A module on floor 0 here is held pure like the core (``PURE_PARTS``).
MODULE_FLOORS = {
    "gateway.expand.restore": 0,
    "gateway.expand.tool": 1, "gateway.expand.codecs": 1, "gateway.expand.call_filter": 1,
    "gateway.expand.pinning": 1,
}
PURE_PARTS = tuple(name for name, floor in MODULE_FLOORS.items() if floor == 0)
IO_LIBRARIES = ("fastapi", "starlette", "httpx", "aiohttp", "redis", "litellm", "asyncio", "uvicorn", "requests")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports, gateway's resolved to its modules, others by top-level name."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from gateway.pruning import selection``: the submodule is what is imported,
            # not the package's face.
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(node.module)
    return found


def _gateway_imports(name: str) -> set[str]:
    return {module for module in _imports(name) if module in MODULES and module != name}


def _cycles() -> list[list[str]]:
    return cycles({name: _gateway_imports(name) for name in MODULES})


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan); bench/house_figures.py
    reads the packages' graph with it too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return components


def test_no_import_cycles_type_checking_imports_included() -> None:
    assert _cycles() == []


def _package(name: str) -> str:
    return name.split(".")[1]


def _floor(name: str) -> int:
    return MODULE_FLOORS.get(name, LAYERS[_package(name)])


def test_every_package_has_a_floor_and_no_import_goes_up_a_floor() -> None:
    for name in MODULES:
        if name == "gateway":
            continue
        assert _package(name) in LAYERS, f"{name}: its package has no floor in LAYERS"
        for target in _gateway_imports(name):
            if target != "gateway":
                assert _floor(target) <= _floor(name), f"{name} imports {target} (up a floor)"


def test_every_module_floor_names_a_module_below_its_package() -> None:
    # A stale entry (a module moved or renamed) would exempt nothing and check nothing.
    for name, floor in MODULE_FLOORS.items():
        assert name in MODULES and floor < LAYERS[_package(name)], name


def test_packages_import_each_other_without_a_cycle() -> None:
    # A cycle of packages (wire -> state -> wire) is a knot in the map even when no
    # two modules import each other round.
    packages = {_package(name) for name in MODULES if name != "gateway"}
    edges = {p: set() for p in packages}
    for name in MODULES:
        if name != "gateway":
            edges[_package(name)] |= {_package(t) for t in _gateway_imports(name)
                                      if t != "gateway" and _package(t) != _package(name)}
    assert cycles(edges) == []


def test_the_pure_core_imports_nothing_from_gateway_outside_itself() -> None:
    for name in MODULES:
        if name.startswith("gateway.pruning"):
            outside = {m for m in _gateway_imports(name) if not m.startswith("gateway.pruning")}
            io = {m for m in _imports(name) if m.split(".")[0] in IO_LIBRARIES}
            assert not outside and not io, f"{name} imports {sorted(outside | io)}"


def test_the_pure_part_of_a_feature_is_held_like_the_core() -> None:
    # gateway.expand.restore: only the core's face (and its own package's pure parts), no I/O.
    assert PURE_PARTS
    for name in PURE_PARTS:
        outside = {m for m in _gateway_imports(name) if m != "gateway.pruning" and m not in PURE_PARTS}
        io = {m for m in _imports(name) if m.split(".")[0] in IO_LIBRARIES}
        assert not outside and not io, f"{name} imports {sorted(outside | io)}"


def test_what_a_request_can_be_billed_is_worked_out_without_io() -> None:
    # The reservation estimate and the usage bounds are pure functions of a body and figures.
    for name in ("gateway.billing.reservation_estimate", "gateway.billing.image_tokens", "gateway.telemetry.usage_bounds"):
        io = {m for m in _imports(name) if m.split(".")[0] in IO_LIBRARIES}
        assert not io, f"{name} imports {sorted(io)}"


def test_nothing_below_the_routes_imports_them() -> None:
    for name in MODULES:
        if not name.startswith(("gateway.api", "gateway.cli")):
            assert not any(m.startswith("gateway.api") for m in _gateway_imports(name)), name


def test_only_the_routes_know_the_web_framework() -> None:
    # The wire layer, the request path and the services hand bytes, mappings and replies
    # up; api/ turns them into HTTP (and cli.py starts the server).
    for name in MODULES:
        if not name.startswith("gateway.api") and name != "gateway.cli.main":
            framework = {m for m in _imports(name) if m.split(".")[0] in WEB_FRAMEWORKS}
            assert not framework, f"{name} imports {sorted(framework)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_stay_small(name: str) -> None:
    source = MODULES[name].read_text()
    assert source.count("\n") <= MAX_MODULE_LINES, f"{name} has more than {MAX_MODULE_LINES} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_FUNCTION_LINES, f"{name}.{node.name} has {lines} lines"
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            named = [p for p in params if p is not None and p.arg not in ("self", "cls")]
            assert len(named) <= MAX_PARAMETERS, f"{name}.{node.name} has {len(named)} parameters"
