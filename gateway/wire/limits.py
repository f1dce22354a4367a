"""Bounds on one request body (``SIEVE_MAX_*``), read by every format's checks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WireLimits:
    """Bounds on one request, so no single body can take the pruner's time or memory hostage.
    The defaults let through anything a real agent sends: the largest context windows hold
    1-2M tokens, about 4 characters each, so ``max_request_chars`` (the text of all messages
    together) lets a 2M-token history through, and refuses the 30 MB history no model would
    accept, which took over half a minute of one core to prune."""

    max_messages: int = 20_000
    max_content_parts: int = 1_024
    max_message_chars: int = 4_000_000
    max_json_depth: int = 64
    max_request_chars: int = 8_000_000


__all__ = ["WireLimits"]
