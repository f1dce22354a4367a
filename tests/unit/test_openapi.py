"""The served OpenAPI document: valid OpenAPI 3.1, and in step with the route table both ways."""

from __future__ import annotations

import re

import orjson
from openapi_spec_validator import validate

from gateway.api.openapi import SCHEMA_JSON, load_schema
from gateway.api.routes import ROUTES

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _served() -> dict:
    return orjson.loads(SCHEMA_JSON)


def test_served_document_is_valid_openapi() -> None:
    served = _served()
    assert served["openapi"].startswith("3.1")
    validate(served)  # raises OpenAPIValidationError with the offending path
    assert served == load_schema()  # what is served is the packaged YAML, nothing else


def test_every_route_is_documented_and_every_documented_operation_is_routed() -> None:
    routed = {(route.path, method.lower()) for route in ROUTES for method in route.methods or ()
              if method != "HEAD"}  # Starlette adds HEAD to every GET route by itself
    documented = {(path, method) for path, item in _served()["paths"].items()
                  for method in item if method in HTTP_METHODS}
    assert routed - documented == set(), "routes missing from gateway/api/openapi.yaml"
    assert documented - routed == set(), "operations in gateway/api/openapi.yaml that no route serves"


def test_one_route_per_path() -> None:
    # Starlette answers a wrong method from the first route whose path matches; two routes on
    # one path would leave the other's methods out of the 405's Allow header.
    paths = [route.path for route in ROUTES]
    assert len(paths) == len(set(paths)), sorted(p for p in paths if paths.count(p) > 1)


def test_path_parameters_match_the_route_templates() -> None:
    for path, item in _served()["paths"].items():
        in_template = set(re.findall(r"{(\w+)}", path))
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            declared = {p["name"] for p in _resolved(operation.get("parameters", [])) if p["in"] == "path"}
            assert declared == in_template, f"{method.upper()} {path}"


def test_errors_are_documented_in_openai_shape() -> None:
    served = _served()
    error = served["components"]["schemas"]["Error"]["properties"]["error"]
    assert error["required"] == ["message", "type", "param", "code"]
    for path, item in served["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    ref = response["$ref"]
                    body = served["components"]["responses"][ref.rsplit("/", 1)[-1]]
                    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}, \
                        f"{method.upper()} {path} {status}"


def _resolved(parameters: list[dict]) -> list[dict]:
    components = _served()["components"]["parameters"]
    return [components[p["$ref"].rsplit("/", 1)[-1]] if "$ref" in p else p for p in parameters]
