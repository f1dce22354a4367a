"""Sieve's OpenAPI document: hand-written in ``openapi.yaml`` beside this module.

It is read once, at import, and served as JSON at ``GET /openapi.json``::

    curl localhost:8080/openapi.json | jq '.paths | keys'

Hand-written rather than generated, because the routes check plain dicts (see
``gateway.api.protocol``), so there are no models to generate it from; a test
keeps it in step with the route table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

SCHEMA_PATH = Path(__file__).with_name("openapi.yaml")


def load_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


SCHEMA_JSON: bytes = orjson.dumps(load_schema())
