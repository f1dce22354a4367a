"""Schemathesis over Sieve's own OpenAPI document, against the real gateway on loopback.

The schema is fetched from the running gateway (``GET /openapi.json``), so what
is fuzzed is what is served. Every operation gets positive and negative cases
(examples, coverage and fuzzing phases); each case is sent once as generated,
with the right key (a virtual key, or the admin key on /admin) unless the case
itself tests a broken Authorization, and once with no key at all.
The fake provider (every format's routes, :mod:`tests.support.fake_providers`) answers
every request normally, so no 5xx is acceptable:
schemathesis' own checks (``not_a_server_error``, status code, content type,
response schema and headers, positive/negative data, ignored auth, Allow
header) run on every keyed response, and this module adds what they cannot
see: the error body's exact shape on every 4xx (Anthropic's on ``/v1/messages``
routes, OpenAI's elsewhere), 401 on every keyed route
without a key, and no error logged by the gateway, which catches a pruning bug
that fail-open would otherwise hide behind a 200.

Run with ``-s`` to see the count of cases sent, e.g.::

    python -m pytest tests/fuzz/test_schemathesis.py -q -s
"""

from __future__ import annotations

import collections
import logging
from typing import Iterator

import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance

from gateway.config.settings import OPS_ROUTES
from tests.support.fake_providers import FakeProviders
from tests.support.gateway_server import GatewayServer

VIRTUAL_KEY = "sk-fuzz"
ADMIN_KEY = "sk-fuzz-admin"
# Per operation and phase; 15 operations, each case sent twice. Sized so this module
# stays well under a minute on a 2-core CI machine.
MAX_EXAMPLES = 25
AUTH_HEADERS = ("authorization", "x-api-key")
OPEN_PATHS = OPS_ROUTES  # open by default: the same answer with or without a key


@pytest.fixture(scope="module")
def tally() -> Iterator[dict[str, collections.Counter]]:
    """Statuses of the requests this module sent, keyed and keyless: the summary line quoted in reports."""
    counts = {"keyed": collections.Counter(), "keyless": collections.Counter()}
    yield counts
    cases = sum(counts["keyed"].values())
    fives = sum(n for c in counts.values() for status, n in c.items() if status >= 500)
    print(f"\nschemathesis: {cases} cases, each sent as generated (the right key, unless the case tests auth) and "
          f"without a key; statuses as generated {dict(sorted(counts['keyed'].items()))}, without a key "
          f"{dict(sorted(counts['keyless'].items()))}; 5xx: {fives}")


@pytest.fixture(scope="module")
def providers() -> Iterator[FakeProviders]:
    with FakeProviders() as server:
        server.record = False  # thousands of cases: keep nothing
        yield server


@pytest.fixture
def sieve(start_gateway, providers: FakeProviders, caplog: pytest.LogCaptureFixture,
          tmp_path) -> Iterator[GatewayServer]:
    # A budget so that every chat case also reserves and settles; large enough never to run out
    # (a 429 stays possible, and documented, for a max_tokens larger than the whole budget).
    # Key-guess throttling off: every case is also sent without a key, from one address, and each
    # must answer for itself (tests/integration/test_auth_throttle.py covers the throttle).
    # Stored response ids the fuzzer makes up were never relayed by Sieve: the org's policy lets
    # such ids through (a 404 otherwise: tests/integration/test_stored_responses.py).
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text("allow_unmanaged_response_ids: true\n")
    gateway = start_gateway(virtual_keys=({"key": VIRTUAL_KEY, "org": "fuzz"},), admin_key=ADMIN_KEY,
                            budgets={"orgs": {"fuzz": {"day": 10**12}}}, auth_failure_limit=0, policies_dir=policies,
                            upstream_base_url=providers.base_url, anthropic_base_url=providers.anthropic_base_url)
    yield gateway
    gateway.wait_idle()  # deferred accounting runs after the response; its failures count too
    records = caplog.get_records("call") + caplog.get_records("teardown")  # .records is this phase's only
    errors = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.ERROR]
    assert errors == [], "the gateway logged errors while fuzzed"


@pytest.fixture
def sieve_schema(sieve: GatewayServer) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict({
        "base-url": sieve.base_url,
        # Unknown headers and query parameters are not errors for any HTTP server; leave them out
        # of negative cases instead of expecting a 4xx for them.
        "generation": {"max-examples": MAX_EXAMPLES, "allow-extra-parameters": False},
        "output": {"sanitization": {"enabled": False}},  # fuzz keys; show the bodies in failures whole
        "auth": {"openapi": {"virtualKey": {"bearer": VIRTUAL_KEY}, "virtualKeyHeader": {"api_key": VIRTUAL_KEY},
                             "adminKey": {"bearer": ADMIN_KEY}, "adminKeyHeader": {"api_key": ADMIN_KEY}}},
    })
    return schemathesis.openapi.from_url(sieve.base_url + "/openapi.json", config=config)


schema = schemathesis.pytest.from_fixture("sieve_schema")


@schema.parametrize()
def test_sieve_conforms_to_its_schema(case: schemathesis.Case, tally: dict[str, collections.Counter]) -> None:
    keyed = case.call_and_validate(excluded_checks=_checks_that_do_not_apply(case))
    tally["keyed"][keyed.status_code] += 1
    _assert_error_shape(case, keyed)

    anonymous = case.derive(headers={k: v for k, v in case.headers.items() if k.lower() not in AUTH_HEADERS})
    response = anonymous.call()
    tally["keyless"][response.status_code] += 1
    assert response.status_code < 500, response.text
    _assert_error_shape(case, response)
    if case.path in OPEN_PATHS or case.path.startswith("/docs/"):
        assert response.status_code == keyed.status_code
    elif response.status_code == 404 and keyed.status_code == 404 and "no route" in response.text:
        pass  # a path parameter outside the route's alphabet: no route, before any key is looked at
    elif response.status_code != 405:  # a wrong method is refused before any key is looked at
        assert response.status_code == 401, response.text
        assert response.json()["error"]["type"] == "authentication_error"
    anonymous.validate_response(response)


def _checks_that_do_not_apply(case: schemathesis.Case) -> list:
    """``/v1/prune`` documents the chat body; with ``x-sieve-format: messages | responses`` it
    reads another format's body, so a chat body that fits the schema is rightly a 400 there
    (OpenAPI cannot tie a body's schema to a header). Every other check still runs."""
    fmt = {k.lower(): v for k, v in (case.headers or {}).items()}.get("x-sieve-format", "chat")
    return [positive_data_acceptance] if case.path == "/v1/prune" and fmt != "chat" else []


def _assert_error_shape(case: schemathesis.Case, response: schemathesis.Response) -> None:
    """Every refusal is OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (Anthropic's
    ``{"type": "error", "error": {"message", "type"}}`` on the Messages routes, whose clients read that),
    also the 404/405 that schemathesis cannot hold against an operation's documented responses."""
    if response.status_code < 400:
        return
    content_type = response.headers.get("content-type", [""])[0]  # lower-case names, lists of values
    assert content_type.startswith("application/json"), response.headers
    body = response.json()
    error = body["error"]
    if case.path.startswith("/v1/messages") and response.status_code != 405:
        assert body["type"] == "error", body
        assert isinstance(error["message"], str) and error["message"], error
        assert isinstance(error["type"], str) and error["type"], error
        return
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
