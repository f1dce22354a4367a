"""Provider usage, normalised to one shape.

::

    usage = usage_from_provider(response_json.get("usage"))
    if usage is None:          # the provider reported nothing we can read
        ...

``Usage.prompt_tokens`` is always the WHOLE prompt as billed: uncached input
+ cache reads + cache writes. ``cached_read_tokens`` and
``cache_write_tokens`` are parts of it, never additions to it.

Shapes understood (a dict, or any object with ``model_dump()`` such as
litellm's ``Usage``):

- OpenAI Chat Completions: ``prompt_tokens`` includes
  ``prompt_tokens_details.cached_tokens``.
- Anthropic Messages: ``input_tokens`` EXCLUDES ``cache_read_input_tokens``
  and ``cache_creation_input_tokens``; they are added to make the total.
- OpenAI Responses: ``input_tokens`` with ``input_tokens_details`` includes
  ``cached_tokens`` (told apart from Anthropic by ``input_tokens_details``).
- litellm's OpenAI-shaped usage for Anthropic and others: ``prompt_tokens``
  (already the total) next to ``cache_read_input_tokens`` /
  ``cache_creation_input_tokens`` and ``prompt_tokens_details.cached_tokens``
  / ``cache_creation_tokens`` / ``cache_write_tokens``. These name the SAME
  tokens twice, so each figure is the max of its spellings, never their sum,
  and none is added to ``prompt_tokens``. Only if the reads and writes exceed
  ``prompt_tokens`` (impossible if it included them) is ``prompt_tokens`` read
  as excluding them, Anthropic-style, and the parts added.
- DeepSeek: ``prompt_cache_hit_tokens`` is the cached part of
  ``prompt_tokens``.

Long-lived cache writes cost more than short ones (see ``pricing``), so their
parts of ``cache_write_tokens`` are kept:

- ``cache_write_1h_tokens``: Anthropic's ``cache_control`` with ``ttl: "1h"``
  (``cache_creation.ephemeral_1h_input_tokens``);
- ``cache_write_12h_tokens``: OpenAI's 12-hour retention
  (``prompt_tokens_details`` / ``input_tokens_details`` →
  ``cache_write_tokens_details.ttl_12h_tokens``);

each also read from litellm's ``prompt_tokens_details.cache_creation_token_details``
(``ephemeral_1h_input_tokens``, ``ephemeral_12h_input_tokens``). OpenAI's
Responses usage names its writes ``input_tokens_details.cache_write_tokens``,
a part of ``input_tokens`` like the cached reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

__all__ = ["Usage", "usage_from_provider"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens billed for one call. ``prompt_tokens`` includes both cache parts."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0   # the part of the writes cached for an hour
    cache_write_12h_tokens: int = 0  # ... and for twelve hours

    @property
    def uncached_prompt_tokens(self) -> int:
        return max(self.prompt_tokens - self.cached_read_tokens - self.cache_write_tokens, 0)


def usage_from_provider(raw: Any) -> Usage | None:
    """Normalise a provider's usage block; None when it holds no token counts."""
    d = _as_mapping(raw)
    if d is None:
        return None
    completion = _int(d, "completion_tokens", "output_tokens")
    if "prompt_tokens" in d and d["prompt_tokens"] is not None:
        prompt = _int(d, "prompt_tokens")
        details = _as_mapping(d.get("prompt_tokens_details")) or {}
        read = max(_int(details, "cached_tokens"), _int(d, "cache_read_input_tokens"),
                   _int(d, "prompt_cache_hit_tokens"))
        write = max(_int(details, "cache_creation_tokens"), _int(details, "cache_write_tokens"),
                    _int(d, "cache_creation_input_tokens"))
        if read + write > prompt:
            prompt += read + write
    elif "input_tokens" in d and d["input_tokens"] is not None:
        prompt = _int(d, "input_tokens")
        details = _as_mapping(d.get("input_tokens_details"))
        if details is not None:  # OpenAI Responses: input_tokens includes the cached parts
            read, write = _int(details, "cached_tokens"), _int(details, "cache_write_tokens")
            if read + write > prompt:
                prompt += read + write
        else:  # Anthropic: input_tokens excludes cache reads and writes
            read = _int(d, "cache_read_input_tokens")
            write = _int(d, "cache_creation_input_tokens")
            prompt += read + write
    elif completion or "completion_tokens" in d or "output_tokens" in d:
        prompt, read, write = 0, 0, 0
    else:
        return None
    hour, half_day = _long_lived_writes(d)
    hour = min(hour, write)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 cached_read_tokens=read, cache_write_tokens=write,
                 cache_write_1h_tokens=hour, cache_write_12h_tokens=min(half_day, write - hour))


def _long_lived_writes(d: Mapping[str, Any]) -> tuple[int, int]:
    """Cache writes with a 1-hour and a 12-hour lifetime, in every spelling above."""
    if "cache_creation" not in d and "prompt_tokens_details" not in d and "input_tokens_details" not in d:
        return 0, 0  # none of the places they are given: eight lookups that would find nothing
    anthropic = _as_mapping(d.get("cache_creation")) or {}
    details = _as_mapping(d.get("prompt_tokens_details")) or _as_mapping(d.get("input_tokens_details")) or {}
    openai = _as_mapping(details.get("cache_write_tokens_details")) or {}
    litellm = _as_mapping(details.get("cache_creation_token_details")) or {}
    return (max(_int(anthropic, "ephemeral_1h_input_tokens"), _int(litellm, "ephemeral_1h_input_tokens")),
            max(_int(openai, "ttl_12h_tokens"), _int(litellm, "ephemeral_12h_input_tokens")))


def _as_mapping(raw: Any) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, dict) or isinstance(raw, Mapping):  # a dict (parsed JSON) without the ABC's check
        return raw
    dump = getattr(raw, "model_dump", None)
    if callable(dump):
        dumped = dump()
        return dumped if isinstance(dumped, Mapping) else None
    return None


# No figure is held past this (15 digits, like a budget counter): a junk 1e300 stays a number
# every sum, price and JSON encoder can take (gateway.telemetry.usage_bounds caps what is charged).
MAX_FIGURE = 10**15 - 1


def _int(d: Mapping[str, Any], *names: str) -> int:
    """First present spelling as a non-negative int; junk and None count as 0."""
    for name in names:
        value = d.get(name)
        if value is None or isinstance(value, bool):
            continue
        try:
            return min(max(int(value), 0), MAX_FIGURE)
        except (TypeError, ValueError, OverflowError):
            return 0
    return 0

