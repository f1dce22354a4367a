"""Every error renders as OpenAI's JSON, whatever its extra fields hold."""

from __future__ import annotations

import orjson

from gateway.api.rendering import error_response
from gateway.errors import BudgetExceeded


def test_an_extra_field_orjson_cannot_write_is_rendered_as_text() -> None:
    exc = BudgetExceeded("budget acme/day exhausted", extra={"limit": 2**70, "remaining": 0})
    response = error_response(exc, "req_1")
    assert response.status_code == 429
    error = orjson.loads(response.body)["error"]
    assert error["limit"] == str(2**70) and error["message"] == "budget acme/day exhausted"
    assert response.headers["x-sieve-request-id"] == "req_1"
