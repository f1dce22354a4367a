"""Sieve's OpenAPI document, generated from the route table.

Served at ``GET /openapi.json`` (and as a page at ``/docs``)::

    curl localhost:8080/openapi.json | jq '.paths | keys'
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

TITLE = "Sieve"
SUMMARY = "An OpenAI-compatible gateway that prunes agent chat histories, cache-stably."


def describe(app: FastAPI) -> dict[str, Any]:
    return get_openapi(title=TITLE, version="0.1.0", summary=SUMMARY, routes=app.routes, openapi_version="3.1.0")
