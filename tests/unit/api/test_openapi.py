"""The served OpenAPI document: generated from the code, valid OpenAPI 3.1, in step with the route table."""

from __future__ import annotations

import re

import orjson
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from gateway.api.app import create_app
from gateway.errors import InvalidRequest, SieveError
from gateway.pruning.policy import STRATEGIES
from gateway.config.settings import OPS_ROUTES, Settings
from gateway.wire.chat import check_chat_body
from gateway.wire.headers import MAX_CONVERSATION_ID_BYTES, MAX_GOAL_CHARS, MAX_TARGET_TOKENS

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
    routed = {(route.path_format, method.lower()) for route in app.routes for method in route.methods or ()
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


def test_errors_are_documented_in_their_formats_shape(served) -> None:
    """OpenAI's shape everywhere, but Anthropic's on the Messages routes (its clients parse only that)."""
    error = served["components"]["schemas"]["Error"]["properties"]["error"]
    assert set(error["required"]) == {"message", "type", "param", "code"}
    anthropic = served["components"]["schemas"]["AnthropicError"]
    assert set(anthropic["required"]) == {"type", "error"}
    for path, item in served["paths"].items():
        shape = "AnthropicError" if path.startswith("/v1/messages") else "Error"
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            statuses = _sieve_errors(operation)
            assert statuses, f"{method.upper()} {path} documents no error"
            for status in statuses:
                response = _component(served, operation["responses"][status], "responses")
                assert response["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{shape}"}, \
                    f"{method.upper()} {path} {status}"


def _sieve_errors(operation: dict) -> set[str]:
    """The error statuses Sieve answers itself; a range (``4XX``) is a pass-through route's relay of the
    provider's own refusal, in the provider's shape, and has no schema of Sieve's."""
    ranges = {s for s in operation["responses"] if not s.isdigit()}
    assert ranges <= {"4XX"}, ranges
    assert all("provider" in operation["responses"][s]["description"] for s in ranges)
    return {s for s in operation["responses"] if s.isdigit() and int(s) >= 400}


def _component(served: dict, item: dict, kind: str) -> dict:
    return served["components"][kind][item["$ref"].rsplit("/", 1)[-1]] if "$ref" in item else item


def _resolved(served: dict, parameters: list[dict]) -> list[dict]:
    return [_component(served, p, "parameters") for p in parameters]


# --- what the generated document must keep saying (the hand-kept YAML said it; the code says it now) ---

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions", "/v1/prune")


def _operations(served: dict):
    for path, item in served["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def _validator(served: dict, name: str) -> Draft202012Validator:
    """A validator of one component schema, its references resolved within the document."""
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": served["components"]})


def test_the_info_block_names_the_gateway(served) -> None:
    info = served["info"]
    assert info["title"] == "Sieve" and info["version"] and info["summary"] and info["description"]
    assert info["license"]["identifier"] == "Apache-2.0"
    assert {tag["name"] for tag in served["tags"]} == {"openai", "anthropic", "sieve", "operations", "admin"}
    for path, method, operation in _operations(served):
        assert operation["summary"] and operation["tags"] and operation["operationId"], f"{method.upper()} {path}"


def test_every_operation_says_who_may_call_it(served) -> None:
    assert {"virtualKey", "virtualKeyHeader", "adminKey", "adminKeyHeader"} <= set(
        served["components"]["securitySchemes"])
    for path, method, operation in _operations(served):
        security = operation["security"]
        if path.startswith("/admin/"):
            assert security == [{"adminKey": []}, {"adminKeyHeader": []}], f"{method.upper()} {path}"
        elif path in OPS_ROUTES or path.startswith("/docs/"):  # /docs and the assets it loads
            assert {} in security, f"{method.upper()} {path} is open by default"
        else:
            assert security == [{"virtualKey": []}, {"virtualKeyHeader": []}], f"{method.upper()} {path}"


def test_documented_error_statuses_are_statuses_sieve_errors_have(served) -> None:
    def tree(cls: type) -> list[type]:
        return [cls, *(c for sub in cls.__subclasses__() for c in tree(sub))]

    statuses = {str(cls.status) for cls in tree(SieveError)}
    for path, method, operation in _operations(served):
        errors = _sieve_errors(operation)
        assert errors <= statuses, f"{method.upper()} {path}: {sorted(errors - statuses)}"
        assert {"401", "431"} <= errors, f"{method.upper()} {path}: the guard's own errors"


def test_the_chat_routes_document_body_headers_and_stream(served) -> None:
    parameters = served["components"]["parameters"]
    assert parameters["XSieveTargetTokens"]["schema"]["minimum"] == 1
    assert parameters["XSieveTargetTokens"]["schema"]["maximum"] == MAX_TARGET_TOKENS
    assert parameters["XSieveStrategy"]["schema"]["enum"] == list(STRATEGIES)
    assert parameters["XSieveGoal"]["schema"]["maxLength"] == MAX_GOAL_CHARS
    assert parameters["XSieveConversationId"]["schema"]["maxLength"] == MAX_CONVERSATION_ID_BYTES
    request = served["components"]["schemas"]["ChatCompletionRequest"]
    assert set(request["required"]) == {"model", "messages"} and request["additionalProperties"] is True
    for path in CHAT_PATHS:
        operation = served["paths"][path]["post"]
        assert [p["$ref"].rsplit("/", 1)[-1] for p in operation["parameters"] if "$ref" in p] == list(parameters)
        assert operation["requestBody"] == {"$ref": "#/components/requestBodies/ChatCompletion"}
        assert "x-sieve-request-id" in operation["responses"]["200"]["headers"]
    own = [p for p in served["paths"]["/v1/prune"]["post"]["parameters"] if "$ref" not in p]
    assert [(p["name"], p["schema"]["enum"]) for p in own] == [("x-sieve-format", ["chat", "messages", "responses"])]
    for path in CHAT_PATHS[:2]:
        assert set(served["paths"][path]["post"]["responses"]["200"]["content"]) == {"application/json",
                                                                                      "text/event-stream"}
    assert set(served["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert set(served["paths"]["/docs"]["get"]["responses"]["200"]["content"]) == {"text/html"}


MESSAGE = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [MESSAGE]},
    {"model": "m", "messages": [MESSAGE], "temperature": 0.2, "anything": {"goes": [1]}},
    {"model": "m"}, {"messages": [MESSAGE]}, {"model": " ", "messages": [MESSAGE]},
    {"model": 5, "messages": [MESSAGE]}, {"model": "m", "messages": []}, {"model": "m", "messages": {}},
    {"model": "m", "messages": [{"role": "bot", "content": "x"}]}, {"model": "m", "messages": ["hi"]},
    {"model": "m", "messages": [{"role": "developer", "content": "be brief"}, MESSAGE]},
    {"model": "m", "messages": [{"role": "user", "content": None}]},
    {"model": "m", "messages": [{"role": "system"}]},
    {"model": "m", "messages": [{"role": "user", "content": 5}]},
    {"model": "m", "messages": [{"role": "user", "content": ["a", {"type": "text", "text": "b"}, {}]}]},
    {"model": "m", "messages": [{"role": "user", "content": [5]}]},
    {"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": None}]},
    {"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]},
    {"model": "m", "messages": [{"role": "assistant"}, {"role": "function", "name": "f"}]},
    {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]},
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]},
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{**CALL, "id": 1}]}]},
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}]},
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f",
                                                                                            "arguments": {}}}]}]},
    {"model": "m", "messages": [{"role": "tool", "content": "ok"}]},
    {"model": "m", "messages": [MESSAGE], "stream": True, "stream_options": {"include_usage": True}},
    {"model": "m", "messages": [MESSAGE], "stream": "yes"}, {"model": "m", "messages": [MESSAGE], "stream": None},
    {"model": "m", "messages": [MESSAGE], "stream_options": []},
    {"model": "m", "messages": [MESSAGE], "max_tokens": 2**31 - 1, "max_completion_tokens": 100.0},
    {"model": "m", "messages": [MESSAGE], "max_tokens": 0}, {"model": "m", "messages": [MESSAGE], "max_tokens": 2**31},
    {"model": "m", "messages": [MESSAGE], "max_tokens": 10.5}, {"model": "m", "messages": [MESSAGE], "max_tokens": True},
    {"model": "m", "messages": [MESSAGE], "max_completion_tokens": "100"},
])
def test_the_chat_request_schema_accepts_exactly_what_the_wire_accepts(served, body) -> None:
    try:
        check_chat_body(body)
        accepted = True
    except InvalidRequest:
        accepted = False
    assert _validator(served, "ChatCompletionRequest").is_valid(body) == accepted


def test_a_prune_answer_is_what_the_document_says(served, gateway) -> None:
    messages = [{"role": "system", "content": "You are terse."}, MESSAGE,
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"}]
    response = gateway.post("/v1/prune", json={"model": "gpt-4o", "messages": messages},
                            headers={"x-sieve-target-tokens": "1000"})
    assert response.status_code == 200, response.text
    _validator(served, "PruneResponse").validate(response.json())
    documented = set(served["components"]["schemas"]["PruneReport"]["properties"])
    assert set(response.json()["report"]) == documented


# --- every request body: the document accepts exactly what the checks accept --------------------------

def _drawn(rng, depth: int = 0):
    """A JSON value near the shapes the checks read: right and wrong types, tags, ids and texts."""
    roll = rng.random()
    if depth < 4 and roll < 0.35:
        keys = ["role", "content", "type", "text", "id", "name", "input", "arguments", "call_id", "output",
                "tool_calls", "tool_call_id", "tool_use_id", "function"]
        return {rng.choice(keys): _drawn(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 4 and roll < 0.6:
        return [_drawn(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([None, "", " ", "x", "user", "assistant", "system", "tool", "developer", "text", "tool_use",
                       "tool_result", "message", "function_call", "function_call_output", "custom_tool_call",
                       "reasoning", "thinking", 0, 1, 1.0, 1.5, True, {}, [], {"id": "c1"}, {"name": "f", "arguments": "{}"}])


# Bodies each check accepts; the drawing below mutates them, a value at a time.
VALID = {
    "chat": [{"role": "system", "content": "be brief"}, {"role": "user", "content": ["a", {"type": "text", "text": "b"}]},
             {"role": "assistant", "content": None, "tool_calls": [CALL]},
             {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "developer", "content": "x"}],
    "messages": [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": [{"type": "text", "text": "t"},
                                                   {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                               "content": [{"type": "text", "text": "a"}]}, {"type": "image"}]}],
    "responses": [{"role": "user", "content": "hi"}, {"type": "message", "role": "developer",
                                                      "content": [{"type": "input_text", "text": "x"}]},
                  {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "a"},
                  {"type": "custom_tool_call", "call_id": "c2", "name": "p", "input": "x"},
                  {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text"}]},
                  {"type": "reasoning", "summary": []}],
}
HISTORY = {"chat": "messages", "messages": "messages", "responses": "input"}
EXTRA = {"chat": {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 5,
                  "max_completion_tokens": 5.0, "n": 2},
         "messages": {"system": [{"type": "text", "text": "s"}], "stream": False, "max_tokens": 10},
         "responses": {"instructions": "s", "previous_response_id": "resp_1", "conversation": {"id": "conv_1"},
                       "stream": True, "max_output_tokens": 3}}


def _mutated(rng, value, depth: int = 0):
    """``value`` with, now and then, one part of it drawn anew (or dropped, in an object)."""
    if rng.random() < 0.08 or depth > 5:
        return _drawn(rng, depth) if rng.random() < 0.5 else value
    if isinstance(value, dict):
        out = {k: _mutated(rng, v, depth + 1) for k, v in value.items()}
        if out and rng.random() < 0.1:
            out.pop(rng.choice(list(out)))
        return out
    if isinstance(value, list):
        return [_mutated(rng, v, depth + 1) for v in value]
    return value


def _bodies(fmt: str, count: int):
    import random

    rng = random.Random(f"openapi-{fmt}")
    for _ in range(count):
        body = {"model": "m", HISTORY[fmt]: rng.sample(VALID[fmt], rng.randint(1, len(VALID[fmt])))}
        body.update({k: v for k, v in EXTRA[fmt].items() if rng.random() < 0.3})
        yield _mutated(rng, body)


def _stored_ids_fit(body: dict) -> bool:
    """The one rule the document states beyond the check: a stored response's or conversation's id is
    of the providers' alphabet (the check lets any string by, and the exchange answers 404 for it)."""
    import re

    from gateway.wire import RESPONSE_ID_CHARS

    conversation = body.get("conversation")
    ids = [body.get("previous_response_id"), conversation.get("id") if isinstance(conversation, dict) else conversation]
    return all(not isinstance(i, str) or re.fullmatch(RESPONSE_ID_CHARS, i) for i in ids)


@pytest.mark.parametrize("fmt,schema", [("chat", "ChatCompletionRequest"), ("messages", "AnthropicMessagesRequest"),
                                        ("responses", "OpenAIResponsesRequest")])
def test_each_request_schema_accepts_exactly_what_its_check_accepts(served, fmt, schema) -> None:
    from gateway.wire import WireFormat, adapter_for

    validator, adapter = _validator(served, schema), adapter_for(WireFormat(fmt))
    accepted = 0
    for body in _bodies(fmt, 1500):
        try:
            adapter.read(body)
            ok = fmt != "responses" or _stored_ids_fit(body)
        except InvalidRequest:
            ok = False
        accepted += ok
        assert validator.is_valid(body) == ok, body
    assert 300 < accepted < 1200  # the drawing reaches both sides
