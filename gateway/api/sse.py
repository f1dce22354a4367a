"""Server-sent events relay: pass chunks through as they come, read usage on the way.

When Sieve asked the provider for ``stream_options.include_usage`` on the
client's behalf (to settle budgets and count savings), the final usage-only
chunk is removed again so the client sees exactly the stream it asked for.
Only an incomplete event is ever held back; complete events go out at once.
"""

from __future__ import annotations

from typing import Any

import orjson

_USAGE = b'"usage"'


class SSEUsageTap:
    """Feed upstream bytes; get bytes to send on; ``usage`` holds the last usage seen."""

    def __init__(self, strip_usage_chunk: bool) -> None:
        self.strip = strip_usage_chunk
        self.usage: dict[str, Any] | None = None
        # Fallback when no usage ever arrives: providers stream about one token
        # per delta event, so the count of deltas estimates the completion.
        self.delta_events = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._tail + chunk if self._tail else chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._tail = data
            return b"" if self.strip else chunk
        complete, self._tail = data[: cut + 2], data[cut + 2:]
        self.delta_events += complete.count(b'"delta"')
        if _USAGE not in complete:
            return complete if self.strip else chunk
        kept = []
        for event in complete.split(b"\n\n"):
            if not event:
                continue
            if self._read_usage(event) and self.strip:
                continue
            kept.append(event + b"\n\n")
        return b"".join(kept) if self.strip else chunk

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail if self.strip else b""

    def _read_usage(self, event: bytes) -> bool:
        """Record usage from a ``data:`` event; True if it is a usage-only chunk."""
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            try:
                payload = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                return False
            if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
                self.usage = payload["usage"]
                return not payload.get("choices")
        return False

