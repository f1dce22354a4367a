"""Dollar prices per token, from litellm's offline price map plus overrides.

::

    prices = PriceBook.from_litellm({"my-azure-deployment": {
        "input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7}})
    cost = prices.cost("openai/gpt-4o-mini", usage)   # Cost | None
    if cost is None:
        ...  # unpriced: count it, never guess

Build the book once, at start-up (the map is read from the JSON file litellm
ships, litellm itself is not imported); lookups and costs are then plain dict
reads.

Lookup order for a model name, first hit wins:

1. the override table, exact name;
2. the price map, exact name, then lower-cased;
3. for ``provider/name``: ``name`` in the price map, but only if that entry's
   ``litellm_provider`` is ``provider`` (or ``provider-…``, as in
   ``vertex_ai-anthropic_models``). ``together_ai/gpt-4o-mini`` is therefore
   unpriced, not priced as OpenAI's model: a different host, a different price.

Pricing rules (the same as litellm's own cost calculation):

- cache reads at ``cache_read_input_token_cost``; a model without one is
  billed cached tokens as ordinary input, so they fall back to the input price;
- cache writes at ``cache_creation_input_token_cost``, else the input price;
  the part cached for an hour at ``cache_creation_input_token_cost_above_1hr``
  (Anthropic: twice the input price, against 1.25 times for 5 minutes), the
  part cached for twelve hours at ``cache_creation_input_token_cost_above_12hr``
  (OpenAI), each else at the ordinary write price (other lifetimes, such as
  OpenAI's 30 minutes, have no price of their own);
- the rest of the prompt at ``input_cost_per_token``, completions at
  ``output_cost_per_token``;
- long-context tiers (``*_above_200k_tokens`` …): when the whole prompt has
  MORE tokens than a tier's threshold, every rate that tier names replaces the
  base rate (rates it does not name stay). Batch/priority/flex variants are
  ignored: Sieve forwards standard calls.
"""

from __future__ import annotations

import functools
import json

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from gateway.errors import ConfigError
from gateway.telemetry.usage import Usage

__all__ = ["Cost", "Price", "PriceBook", "Rates", "load_litellm_model_cost"]

_FIELDS = {
    "input_cost_per_token": "input",
    "output_cost_per_token": "output",
    "cache_read_input_token_cost": "cache_read",
    "cache_creation_input_token_cost": "cache_write",
    "cache_creation_input_token_cost_above_1hr": "cache_write_1h",
    "cache_creation_input_token_cost_above_12hr": "cache_write_12h",
}
_MEMO_SIZE = 1024
_TIER_KEY = re.compile(
    r"^(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost"
    r"|cache_creation_input_token_cost|cache_creation_input_token_cost_above_1hr"
    r"|cache_creation_input_token_cost_above_12hr)_above_(\d+)(k?)_tokens$")


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token. ``None`` cache rates mean the map names none."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None
    cache_write_12h: float | None = None


@dataclass(frozen=True, slots=True)
class Price:
    """The price of one model: base rates and long-context tiers."""

    model: str  # the key it was found under
    base: Rates
    tiers: tuple[tuple[int, Rates], ...] = ()  # (threshold, rates), ascending threshold

    @property
    def has_cached_price(self) -> bool:
        """The provider bills prompt-cache reads at their own price for this model."""
        return self.base.cache_read is not None

    def rates_for(self, prompt_tokens: int) -> Rates:
        rates = self.base
        for threshold, tier in self.tiers:
            if prompt_tokens > threshold:
                rates = tier
        return rates


@dataclass(frozen=True, slots=True)
class Cost:
    """USD of one call, by part. ``total_usd`` is their sum."""

    input_usd: float
    cached_read_usd: float
    cache_write_usd: float
    output_usd: float

    @property
    def prompt_usd(self) -> float:
        return self.input_usd + self.cached_read_usd + self.cache_write_usd

    @property
    def total_usd(self) -> float:
        return self.prompt_usd + self.output_usd


class PriceBook:
    """Model name → ``Price``; ``None`` for a model it cannot price."""

    def __init__(self, model_cost: Mapping[str, Mapping[str, Any]],
                 overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._map = {k: v for k, v in model_cost.items() if isinstance(v, Mapping) and k != "sample_spec"}
        self._lower = {k.lower(): k for k in self._map}
        self._overrides = {name: _override_price(name, spec) for name, spec in (overrides or {}).items()}
        self._memo: dict[str, Price | None] = {}  # model names come from clients: bounded below

    @classmethod
    def from_litellm(cls, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> "PriceBook":
        """Built from litellm's bundled price map (read once per process)."""
        return cls(load_litellm_model_cost(), overrides)

    def lookup(self, model: str) -> Price | None:
        try:
            return self._memo[model]
        except KeyError:
            pass
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        price = self._memo[model] = self._find(model)
        return price

    def _find(self, model: str) -> Price | None:
        if model in self._overrides:
            return self._overrides[model]
        key = model if model in self._map else self._lower.get(model.lower())
        if key is not None:
            return _map_price(key, self._map[key])
        provider, sep, rest = model.partition("/")
        if sep and rest:
            key = rest if rest in self._map else self._lower.get(rest.lower())
            if key is not None and _same_provider(provider, self._map[key].get("litellm_provider")):
                return _map_price(key, self._map[key])
        return None

    def max_output_tokens(self, model: str) -> int | None:
        """The most tokens ``model`` answers with when a request sets no cap (the map's
        ``max_output_tokens``); None for a model the map does not know."""
        key = model if model in self._map else self._lower.get(model.lower())
        provider, sep, rest = model.partition("/")
        if key is None and sep and rest:
            key = rest if rest in self._map else self._lower.get(rest.lower())
        entry = self._map.get(key) if key is not None else None
        value = (entry.get("max_output_tokens") or entry.get("max_tokens")) if entry else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def cost(self, model: str, usage: Usage) -> Cost | None:
        price = self.lookup(model)
        return None if price is None else price_usage(price, usage)


def price_usage(price: Price, usage: Usage) -> Cost:
    """Dollars for ``usage`` at ``price`` (rules in the module docstring)."""
    rates = price.rates_for(usage.prompt_tokens)
    read_rate = rates.input if rates.cache_read is None else rates.cache_read
    write_rate = rates.input if rates.cache_write is None else rates.cache_write
    read = min(usage.cached_read_tokens, usage.prompt_tokens)
    hour_rate = write_rate if rates.cache_write_1h is None else rates.cache_write_1h
    half_day_rate = write_rate if rates.cache_write_12h is None else rates.cache_write_12h
    write = min(usage.cache_write_tokens, usage.prompt_tokens - read)
    hour = min(usage.cache_write_1h_tokens, write)
    half_day = min(usage.cache_write_12h_tokens, write - hour)
    return Cost(
        input_usd=(usage.prompt_tokens - read - write) * rates.input,
        cached_read_usd=read * read_rate,
        cache_write_usd=(write - hour - half_day) * write_rate + hour * hour_rate + half_day * half_day_rate,
        output_usd=usage.completion_tokens * rates.output,
    )


@functools.lru_cache(maxsize=1)
def load_litellm_model_cost() -> Mapping[str, Mapping[str, Any]]:
    """litellm's offline price map, read from the JSON file litellm ships, without
    importing litellm: the import costs seconds and leaves ~1M objects behind that
    every full garbage collection would then walk on the request path.

    Entries with ``alias_of`` take their target's fields (as litellm resolves them).
    """
    from gateway.config import litellm_package_dir

    folder = litellm_package_dir()
    if folder is None:
        return {}
    raw = json.loads((folder / "model_prices_and_context_window_backup.json").read_text())
    costs: dict[str, Mapping[str, Any]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or name in ("sample_spec", "fallback_generalizations"):
            continue
        target = raw.get(entry.get("alias_of", "")) if "alias_of" in entry else None
        if isinstance(target, dict):
            entry = {**target, **{k: v for k, v in entry.items() if k != "alias_of"}}
        costs[name] = entry
    return costs


def _same_provider(prefix: str, provider: Any) -> bool:
    return isinstance(provider, str) and (provider == prefix or provider.startswith(prefix + "-"))


def _rate(entry: Mapping[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _map_price(key: str, entry: Mapping[str, Any]) -> Price | None:
    rates = {attr: _rate(entry, field) for field, attr in _FIELDS.items()}
    if rates["input"] is None or rates["output"] is None:
        return None  # an image/audio/per-call model: no per-token price to apply
    base = Rates(**rates)
    by_threshold: dict[int, dict[str, float]] = {}
    for field in entry:
        match = _TIER_KEY.match(field)
        value = _rate(entry, field) if match else None
        if match and value is not None:
            threshold = int(match[2]) * (1000 if match[3] else 1)
            by_threshold.setdefault(threshold, {})[_FIELDS[match[1]]] = value
    tiers, rates_so_far = [], base
    for threshold in sorted(by_threshold):
        rates_so_far = replace(rates_so_far, **by_threshold[threshold])
        tiers.append((threshold, rates_so_far))
    return Price(model=key, base=base, tiers=tuple(tiers))


def _override_price(name: str, spec: Mapping[str, Any]) -> Price:
    where = f"prices.{name}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(_FIELDS)}")
    unknown = sorted(set(spec) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_FIELDS)}")
    rates: dict[str, float | None] = {}
    for field, attr in _FIELDS.items():
        if field not in spec or spec[field] is None:
            rates[attr] = None
            continue
        rates[attr] = _rate(spec, field)
        if rates[attr] is None:
            raise ConfigError(f"{where}.{field}: must be a non-negative number, got {spec[field]!r}")
    if rates["input"] is None or rates["output"] is None:
        raise ConfigError(f"{where}: input_cost_per_token and output_cost_per_token are required")
    return Price(model=name, base=Rates(**rates))
