"""The served OpenAPI document: generated from the code, valid OpenAPI 3.1, in step with the route table."""

from __future__ import annotations

import re

import orjson
import pytest
from openapi_spec_validator import validate

from gateway.app import create_app
from gateway.settings import Settings

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def app():
    return create_app(Settings())


@pytest.fixture(scope="module")
def served(app) -> dict:
    return orjson.loads(app.state.openapi_json)


def test_served_document_is_valid_openapi(served) -> None:
    assert served["openapi"].startswith("3.1")
    validate(served)  # raises OpenAPIValidationError with the offending path


def test_every_route_is_documented_and_every_documented_operation_is_routed(app, served) -> None:
    routed = {(route.path, method.lower()) for route in app.routes for method in route.methods or ()
              if method != "HEAD"}  # Starlette adds HEAD to every GET route by itself
    documented = {(path, method) for path, item in served["paths"].items()
                  for method in item if method in HTTP_METHODS}
    assert routed - documented == set(), "routes missing from the OpenAPI document"
    assert documented - routed == set(), "operations in the OpenAPI document that no route serves"


def test_path_parameters_match_the_route_templates(served) -> None:
    for path, item in served["paths"].items():
        in_template = set(re.findall(r"{(\w+)}", path))
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            declared = {p["name"] for p in _resolved(served, operation.get("parameters", [])) if p["in"] == "path"}
            assert declared == in_template, f"{method.upper()} {path}"


def test_errors_are_documented_in_openai_shape(served) -> None:
    error = served["components"]["schemas"]["Error"]["properties"]["error"]
    assert set(error["required"]) == {"message", "type", "param", "code"}
    for path, item in served["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            statuses = [s for s in operation["responses"] if int(s) >= 400]
            assert statuses, f"{method.upper()} {path} documents no error"
            for status in statuses:
                response = _component(served, operation["responses"][status], "responses")
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}, \
                    f"{method.upper()} {path} {status}"


def _component(served: dict, item: dict, kind: str) -> dict:
    return served["components"][kind][item["$ref"].rsplit("/", 1)[-1]] if "$ref" in item else item


def _resolved(served: dict, parameters: list[dict]) -> list[dict]:
    return [_component(served, p, "parameters") for p in parameters]
