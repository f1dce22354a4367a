"""Sieve's own errors in each format's error shape.

A client of one format parses errors only in that format's shape: the
``anthropic`` SDK (and Claude Code) reads ``{"type": "error", "error": {"type",
"message"}}``, the ``openai`` SDK reads ``{"error": {"message", "type",
"param", "code"}}``. The status stays Sieve's; the type is the provider's name
for that status, so a client's retry rules (429 and 5xx retried, 4xx not) and
its messages work as they do against the provider itself::

    anthropic_error_body(BudgetExceeded("..."))
    # {"type": "error", "error": {"type": "rate_limit_error", "message": "...", "code": "budget_exceeded", ...}}
"""

from __future__ import annotations

from typing import Any

from gateway.errors import SieveError

# Anthropic's error type per status (its API's own table; 5xx without a name of its own: api_error).
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 408: "timeout_error", 413: "request_too_large",
                   429: "rate_limit_error", 499: "invalid_request_error", 504: "timeout_error",
                   529: "overloaded_error"}


def anthropic_error_type(status: int) -> str:
    return ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(exc: SieveError) -> dict[str, Any]:
    """``exc`` as Anthropic writes an error; Sieve's ``code``, ``param`` and extra fields
    (a budget's limit and reset) ride along inside ``error``."""
    error = {k: v for k, v in exc.body()["error"].items() if v is not None}
    error["type"] = anthropic_error_type(exc.status)
    return {"type": "error", "error": error}


def openai_error_body(exc: SieveError) -> dict[str, Any]:
    return exc.body()
