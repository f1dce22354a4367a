"""Sieve's own headers: the ``x-sieve-*`` request headers, checked, and the response headers.

Request headers (all optional) steer one request::

    sieve = parse_sieve_headers(request.headers)   # SieveHeaders, or InvalidRequest naming the header
    sieve.target_tokens, sieve.strategy, sieve.goal, sieve.conversation_id

Every route that prunes answers with the same response headers
(:func:`response_headers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gateway.errors import InvalidRequest
from gateway.pruning import STRATEGIES, Strategy

MAX_TARGET_TOKENS = 10_000_000
# Thinking blocks or reasoning items Sieve's rewrite of this request left invalid (gateway.exchange.reasoning_guard).
REASONING_HEADER = "x-sieve-reasoning-invalidated"
MAX_GOAL_CHARS = 8_192
# In bytes, as the header arrives (a header value is bytes; Starlette reads them as Latin-1, one
# character per byte): what the id costs to keep is its bytes, however a client encodes it.
MAX_CONVERSATION_ID_BYTES = 512


@dataclass(frozen=True, slots=True)
class SieveHeaders:
    """The optional ``x-sieve-*`` request headers, validated."""

    target_tokens: int | None = None
    strategy: Strategy | None = None
    goal: str | None = None
    conversation_id: str | None = None


def parse_sieve_headers(headers: Mapping[str, str]) -> SieveHeaders:
    target_tokens = _target_tokens(headers.get("x-sieve-target-tokens"))
    strategy = _strategy(headers.get("x-sieve-strategy"))
    goal = headers.get("x-sieve-goal") or None
    if goal is not None and len(goal) > MAX_GOAL_CHARS:
        raise InvalidRequest(f"x-sieve-goal is longer than {MAX_GOAL_CHARS} characters", param="x-sieve-goal")
    conversation = headers.get("x-sieve-conversation-id") or None
    if conversation is not None and (size := _bytes_sent(conversation)) > MAX_CONVERSATION_ID_BYTES:
        raise InvalidRequest(f"x-sieve-conversation-id is {size} bytes; the limit is {MAX_CONVERSATION_ID_BYTES} bytes",
                             param="x-sieve-conversation-id")
    return SieveHeaders(target_tokens, strategy, goal, conversation)


def _bytes_sent(value: str) -> int:
    """The bytes a header value took on the wire: a server's headers hold them one character per
    byte (Latin-1); a value built in Python (the CLI) is counted as UTF-8."""
    try:
        return len(value.encode("latin-1"))
    except UnicodeEncodeError:
        return len(value.encode("utf-8"))


def _target_tokens(value: str | None) -> int | None:
    if value is None:
        return None
    digits = value.strip()
    # Plain decimal digits only: int() would also take "1_000", "+5" and non-ASCII digits.
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidRequest(f"x-sieve-target-tokens must be a positive integer, got {value!r}",
                             param="x-sieve-target-tokens")
    tokens = int(digits)
    if not 1 <= tokens <= MAX_TARGET_TOKENS:
        raise InvalidRequest(f"x-sieve-target-tokens must be between 1 and {MAX_TARGET_TOKENS}, got {value!r}",
                             param="x-sieve-target-tokens")
    return tokens


def _strategy(value: str | None) -> Strategy | None:
    if value is None:
        return None
    strategy = value.strip().lower()
    if strategy not in STRATEGIES:
        raise InvalidRequest(f"x-sieve-strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}",
                             param="x-sieve-strategy")
    return Strategy(strategy)


def response_headers(request_id: str, original_tokens: int, forwarded_tokens: int,
                     budget_remaining_tokens: int | None = None) -> dict[str, str]:
    """The ``x-sieve-*`` response headers: the request id, the prompt before and after
    pruning (in the model's own encoding), and what is left of the tightest budget."""
    headers = {
        "x-sieve-request-id": request_id,
        "x-sieve-original-tokens": str(original_tokens),
        "x-sieve-forwarded-tokens": str(forwarded_tokens),
        "x-sieve-saved-tokens": str(original_tokens - forwarded_tokens),
    }
    if budget_remaining_tokens is not None:
        headers["x-sieve-budget-remaining-tokens"] = str(budget_remaining_tokens)
    return headers
