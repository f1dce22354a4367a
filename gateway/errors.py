"""One error tree; each error knows its HTTP status and OpenAI error type.

::

    SieveError
    ├── ConfigError                 (start-up only: bad config or policy file)
    ├── InvalidRequest        400   invalid_request_error
    │   ├── UnknownModel      404   invalid_request_error / model_not_found
    │   ├── UnknownStoredResponse 404 invalid_request_error (a stored response id not the caller's)
    │   ├── RequestTimeout    408   invalid_request_error / request_timeout
    │   └── ClientClosedRequest 499 invalid_request_error / client_closed_request
    ├── Unauthorized          401   authentication_error
    ├── Forbidden             403   permission_error
    ├── BodyTooLarge          413   invalid_request_error
    ├── HeadersTooLarge       431   invalid_request_error
    ├── BudgetExceeded        429   budget_exceeded
    ├── TooManyAuthFailures   429   rate_limit_error / too_many_auth_failures
    ├── StoreUnavailable      503   service_unavailable
    │   └── StoreRejected     503   service_unavailable (a command no retry can cure)
    ├── ShuttingDown          503   service_unavailable / shutting_down
    ├── UpstreamUnavailable   502   upstream_error
    │   ├── UpstreamTooLarge  502   upstream_error / upstream_response_too_large
    │   └── UpstreamErrorPage the provider's status   upstream_error / upstream_error_body
    └── UpstreamTimeout       504   upstream_timeout

Routes raise; one handler (``gateway.api.rendering.error_response``) renders
``{"error": {"message", "type", "param", "code"}}``. An upstream's own error
status and body are relayed unchanged and never pass through this tree.
"""

from __future__ import annotations

from typing import Any


class SieveError(Exception):
    status: int = 500
    type: str = "internal_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 extra: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        error.update(self.extra)
        return {"error": error}


class ConfigError(SieveError):
    type = "config_error"


class InvalidRequest(SieveError):
    status = 400
    type = "invalid_request_error"


class UnknownModel(InvalidRequest):
    status = 404
    code = "model_not_found"


class UnknownStoredResponse(InvalidRequest):
    """A stored response or conversation id the caller may not use: one Sieve never relayed,
    or another org's; the same answer either way, so it says nothing of what exists."""

    status = 404


class RequestTimeout(InvalidRequest):
    """The body did not arrive in time: a slow sender must not hold a worker's memory and
    a connection for ever."""

    status = 408
    code = "request_timeout"


class ClientClosedRequest(InvalidRequest):
    """The client left before its request was whole (nginx's 499): nobody reads the answer,
    but the request is counted, as a client error."""

    status = 499
    code = "client_closed_request"


class Unauthorized(SieveError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(SieveError):
    status = 403
    type = "permission_error"


class BodyTooLarge(SieveError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class HeadersTooLarge(SieveError):
    status = 431
    type = "invalid_request_error"
    code = "headers_too_large"


class BudgetExceeded(SieveError):
    status = 429
    type = "budget_exceeded"
    code = "budget_exceeded"


class TooManyAuthFailures(SieveError):
    """Too many failed key checks from one client address (gateway.auth.throttle)."""
    status = 429
    type = "rate_limit_error"
    code = "too_many_auth_failures"


class StoreUnavailable(SieveError):
    status = 503
    type = "service_unavailable"
    code = "store_unavailable"


class StoreRejected(StoreUnavailable):
    """The store answered, refusing the command itself (a script error, a value out of
    range): sending it again fails again, so work owed to the store is dropped, not retried."""


class ShuttingDown(SieveError):
    """The shutdown grace ended before the request was answered (gateway.api.shutdown)."""
    status = 503
    type = "service_unavailable"
    code = "shutting_down"


class UpstreamUnavailable(SieveError):
    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTooLarge(UpstreamUnavailable):
    """A whole answer over ``SIEVE_MAX_UPSTREAM_BODY_BYTES``: not read on, not relayed.
    ``upstream_status``: the provider's own status (a success is billed though never read)."""
    code = "upstream_response_too_large"

    def __init__(self, message: str, upstream_status: int = 200) -> None:
        super().__init__(message)
        self.upstream_status = upstream_status


class UpstreamErrorPage(UpstreamUnavailable):
    """The provider answered an error whose body is not JSON (a proxy's HTML page, plain
    text, nothing): described in the client's error shape, under the provider's own status,
    so a client's retry rules see what the provider said."""
    code = "upstream_error_body"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class UpstreamTimeout(SieveError):
    status = 504
    type = "upstream_timeout"
    code = "upstream_timeout"
