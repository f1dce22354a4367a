#!/usr/bin/env python3
"""values.yaml and values.schema.json describe the same keys.

    python helm/sieve/ci/check_schema_sync.py [CHART_DIR]

Every key path in values.yaml must be declared in the schema's `properties`,
and every path the schema declares must have a default in values.yaml, so a
new value cannot ship undocumented or a removed one linger in the schema.
Below a free-form map in the schema (an object without `properties`, such as
`resources` or `config.models`) keys are the user's own and are not compared.
values.yaml must also validate against the schema (Helm checks the same at
install time). Exits 1 and lists the differences when they disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml

Path_ = tuple[str, ...]


def value_paths(node: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    if isinstance(node, dict):
        for key, child in node.items():
            path = prefix + (str(key),)
            yield path
            yield from value_paths(child, path)


def schema_paths(node: dict[str, Any], prefix: Path_ = ()) -> Iterator[Path_]:
    for key, child in (node.get("properties") or {}).items():
        path = prefix + (key,)
        yield path
        yield from schema_paths(child, path)


def free_maps(node: dict[str, Any], prefix: Path_ = ()) -> Iterator[Path_]:
    """Schema paths below which keys are free (objects that declare no properties)."""
    for key, child in (node.get("properties") or {}).items():
        path = prefix + (key,)
        if child.get("type") == "object" and "properties" not in child:
            yield path
        else:
            yield from free_maps(child, path)


def compare(values: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    in_values = set(value_paths(values))
    in_schema = set(schema_paths(schema))
    free = set(free_maps(schema))

    def under_free_map(path: Path_) -> bool:
        return any(path[:n] in free for n in range(1, len(path)))

    problems = [f"values.yaml has {'.'.join(p)}, values.schema.json does not declare it"
                for p in sorted(in_values - in_schema) if not under_free_map(p)]
    problems += [f"values.schema.json declares {'.'.join(p)}, values.yaml has no default for it"
                 for p in sorted(in_schema - in_values)]
    return problems


def validate(values: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    try:
        import jsonschema
    except ImportError:  # Helm lint validates too; the key comparison is what this adds.
        return []
    validator = jsonschema.Draft7Validator(schema)
    return [f"values.yaml: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in validator.iter_errors(values)]


def main(argv: list[str]) -> int:
    chart = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    values = yaml.safe_load((chart / "values.yaml").read_text()) or {}
    schema = json.loads((chart / "values.schema.json").read_text())
    problems = compare(values, schema) + validate(values, schema)
    for problem in problems:
        print(f"schema-sync: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"schema-sync: {chart}/values.yaml and values.schema.json agree "
          f"({len(set(value_paths(values)))} value paths)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
