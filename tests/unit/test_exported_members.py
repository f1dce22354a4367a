"""Each package of gateway/ has a face: its ``__init__`` exports what others may use.

As httpx's ``tests/test_exported_members.py`` pins its public names: every name in a
package's ``__all__`` exists, and no module outside a package imports one of its inner
modules, only the package itself (read from the source, so imports inside functions
and under ``TYPE_CHECKING`` count).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
PACKAGES = sorted(init.parent.name for init in GATEWAY.glob("*/__init__.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(GATEWAY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every ``gateway`` module ``path`` imports, submodules named in a
    ``from package import name`` included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("gateway.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gateway."):
            found.append((node.lineno, node.module))
            base = GATEWAY.parent / node.module.replace(".", "/")
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if (base / f"{alias.name}.py").exists() or (base / alias.name / "__init__.py").exists()]
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(f"gateway.{package}")
    exported = getattr(module, "__all__", None)
    assert exported, f"gateway.{package} has no __all__"
    assert len(exported) == len(set(exported)), f"gateway.{package}.__all__ names one thing twice"
    assert [name for name in exported if not hasattr(module, name)] == []


def test_no_module_imports_another_package_past_its_face() -> None:
    past = []
    for path in sorted(GATEWAY.rglob("*.py")):
        own = _module_name(path).split(".")[:2]
        for line, target in _imported(path):
            parts = target.split(".")
            if len(parts) > 2 and parts[1] in PACKAGES and parts[:2] != own:
                past.append(f"{path.relative_to(GATEWAY.parent)}:{line} imports {target}")
    assert past == []


def test_the_check_sees_an_import_past_a_face(tmp_path: Path) -> None:
    # The rule would pass vacuously if the reader missed imports: it must see one.
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from gateway.wire.call import ModelCall\n")
    assert (2, "gateway.wire.call") in _imported(sample)
