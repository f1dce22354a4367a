"""The honest savings record of one request.

::

    record = savings_for_request(
        prices, model="gpt-4o-mini",
        original=OriginalPrompt(message_tokens=[...], fingerprints=[...],
                                previous_fingerprints=state.previous_unpruned_fingerprints),  # or None
        forwarded_tokens=report.forwarded_tokens, usage=usage,
        scorer_usd=scorer_cost, pruned=report.changed)
    record.net_usd   # counterfactual − actual − scorer; may be negative

**Actual** is the provider's usage priced as billed.

**Counterfactual** is what the same request would have cost had Sieve never
existed, i.e. had every request of this conversation gone out unpruned. It
bills:

- prompt = the original messages' tokens + the non-message overhead (tool
  schemas, chat formatting: ``usage.prompt_tokens − forwarded_tokens``; the
  provider counts it on both sides). Written as ``usage.prompt_tokens +
  (original − forwarded)``: the same when the overhead is positive, and not
  inflated when our per-message estimate runs above the provider's count
  (a negative overhead). ``overhead_tokens`` is reported floored at 0.
  Sieve's own tool definition (``sieve_tool_tokens``: ``sieve_expand``) is a tool
  schema the unpruned request would not have carried: it is in the actual prompt
  (the provider bills it) and taken out of the counterfactual's, so the net
  saving pays for it;
- cache reads = the longest run of WHOLE leading messages whose fingerprints
  equal the previous unpruned request's, plus the overhead (it precedes the
  messages), because the provider would have cached that prefix; at least
  what the actual request read from cache (pruning never gets credit for a
  cache hit the unpruned request would have had too). Only when the model has
  a cached price: a price map without one means the provider does not bill
  caching for that family, so the counterfactual reads nothing from cache;
- cache writes = what the actual request wrote, at most the counterfactual's
  own uncached part (Anthropic bills writes above input; the unpruned request
  would have written its new suffix, not more than Sieve's request did); of
  those, long-lived writes (dearer) only where the actual short ones run out;
- completion = the actual completion (same answer assumed).

Every approximation leans toward the unpruned request: its whole matching
prefix counts as cached (providers cache in blocks, above minimum sizes, and
Anthropic only at client breakpoints), and its cache writes are capped. So the
net saving is a lower bound. A request Sieve did not change (``pruned=False``)
has counterfactual = actual exactly, so a passthrough never shows a saving
or a loss that is only the model's noise.

A request that is not priced (model unknown to the price book, or no usage
reported) has ``priced=False``, counterfactual and actual 0.0, and
``net_usd = −scorer_usd``: the scorer's dollars were spent either way, and
that is what the dashboard's sum of the cost counters shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from gateway.telemetry.pricing import PriceBook, price_usage
from gateway.telemetry.usage import Usage

__all__ = ["OriginalPrompt", "SavingsRecord", "ShadowSavings", "cached_prefix_messages", "expand_rounds_only",
           "savings_for_request", "shadow_savings", "with_expand_rounds"]


@dataclass(frozen=True, slots=True)
class SavingsRecord:
    model: str
    priced: bool
    original_tokens: int  # message tokens as received
    forwarded_tokens: int  # message tokens as forwarded
    overhead_tokens: int  # provider prompt tokens beyond our message count and Sieve's tool
    actual_prompt_tokens: int
    actual_cached_tokens: int
    actual_cache_write_tokens: int
    completion_tokens: int
    counterfactual_prompt_tokens: int
    counterfactual_cached_tokens: int
    counterfactual_cache_write_tokens: int
    counterfactual_usd: float
    actual_usd: float
    scorer_usd: float
    net_usd: float  # counterfactual − actual − scorer
    sieve_tool_tokens: int = 0  # Sieve's own tool definition, in the actual prompt only

    @property
    def saved_tokens(self) -> int:
        return self.original_tokens - self.forwarded_tokens


def cached_prefix_messages(original: Sequence[str], previous: Sequence[str] | None) -> int:
    """How many leading messages of ``original`` equal those of ``previous``."""
    if not previous:
        return 0
    n = 0
    for mine, theirs in zip(original, previous):
        if mine != theirs:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class OriginalPrompt:
    """The messages as the client sent them: each one's tokens and fingerprint, and the
    fingerprints of the conversation's previous unpruned request (None on its first)."""

    message_tokens: Sequence[int]
    fingerprints: Sequence[str]
    previous_fingerprints: Sequence[str] | None = None

    @property
    def tokens(self) -> int:
        return sum(self.message_tokens)


def savings_for_request(
    prices: PriceBook,
    *,
    model: str,
    original: OriginalPrompt,
    forwarded_tokens: int,
    usage: Usage | None,
    scorer_usd: float = 0.0,
    pruned: bool | None = None,
    sieve_tool_tokens: int = 0,
) -> SavingsRecord:
    """Counterfactual, actual and net dollars of one request (rules above).

    ``pruned`` says whether the forwarded messages differ from the original
    ones; None infers it from the token counts.
    """
    if len(original.fingerprints) != len(original.message_tokens):
        raise ValueError("original message_tokens and fingerprints differ in length")
    if pruned is None:
        pruned = forwarded_tokens != original.tokens
    price = prices.lookup(model)
    scorer_usd = max(float(scorer_usd), 0.0)
    if price is None or usage is None:
        return dataclasses.replace(_unpriced(model, original.tokens, forwarded_tokens, usage, scorer_usd),
                                   sieve_tool_tokens=sieve_tool_tokens)
    # What the provider billed beyond the messages, Sieve's tool apart, is on both sides.
    sent = forwarded_tokens + sieve_tool_tokens
    counterfactual = _counterfactual_usage(original, sent, usage, price.has_cached_price) \
        if pruned or sieve_tool_tokens else usage
    actual_usd = price_usage(price, usage).total_usd
    cf_usd = actual_usd if counterfactual is usage else price_usage(price, counterfactual).total_usd
    return SavingsRecord(
        model=model, priced=True, original_tokens=original.tokens, forwarded_tokens=forwarded_tokens,
        overhead_tokens=max(usage.prompt_tokens - sent, 0), actual_prompt_tokens=usage.prompt_tokens,
        actual_cached_tokens=usage.cached_read_tokens, actual_cache_write_tokens=usage.cache_write_tokens,
        completion_tokens=usage.completion_tokens,
        counterfactual_prompt_tokens=counterfactual.prompt_tokens,
        counterfactual_cached_tokens=counterfactual.cached_read_tokens,
        counterfactual_cache_write_tokens=counterfactual.cache_write_tokens,
        counterfactual_usd=cf_usd, actual_usd=actual_usd, scorer_usd=scorer_usd,
        net_usd=cf_usd - actual_usd - scorer_usd, sieve_tool_tokens=sieve_tool_tokens)


def with_expand_rounds(savings: SavingsRecord, prices: PriceBook, first: Usage, earlier: Sequence[Usage],
                       original: OriginalPrompt, usage: Usage) -> SavingsRecord:
    """A request that took ``sieve_expand`` rounds (``gateway.expand``): the unpruned request
    would have been asked once, so its counterfactual is the first round's prompt (before any
    expansion) with the final answer's completion; the actual cost, and the tokens billed, are
    every round's. ``savings`` is the record computed on the final round's usage; ``earlier``
    the usage of every round before it (``first`` among them)."""
    billed = _with_billed(savings, earlier)
    price = prices.lookup(savings.model)
    if price is None or not savings.priced:
        return billed
    once = dataclasses.replace(first, completion_tokens=usage.completion_tokens)
    sent = savings.forwarded_tokens + savings.sieve_tool_tokens
    counterfactual = _counterfactual_usage(original, sent, once, price.has_cached_price)
    cf_usd = price_usage(price, counterfactual).total_usd
    actual_usd = savings.actual_usd + sum(price_usage(price, u).total_usd for u in earlier)
    return dataclasses.replace(
        billed, counterfactual_prompt_tokens=counterfactual.prompt_tokens,
        counterfactual_cached_tokens=counterfactual.cached_read_tokens,
        counterfactual_cache_write_tokens=counterfactual.cache_write_tokens,
        counterfactual_usd=cf_usd, actual_usd=actual_usd, net_usd=cf_usd - actual_usd - savings.scorer_usd)


def expand_rounds_only(prices: PriceBook, *, model: str, original_tokens: int, forwarded_tokens: int,
                       earlier: Sequence[Usage]) -> SavingsRecord:
    """A request whose ``sieve_expand`` rounds were billed (``earlier``) but whose last answer
    reports no usage (it failed, or its stream ended without one): the rounds are actual
    cost; there is no counterfactual to set against them (nothing says what the unpruned
    request would have been billed), so it is 0 and the record shows the rounds as a loss."""
    record = _with_billed(_unpriced(model, original_tokens, forwarded_tokens, None, 0.0), earlier)
    price = prices.lookup(model)
    if price is None:
        return record
    actual_usd = sum(price_usage(price, u).total_usd for u in earlier)
    return dataclasses.replace(record, priced=True, actual_usd=actual_usd, net_usd=-actual_usd)


def _with_billed(savings: SavingsRecord, earlier: Sequence[Usage]) -> SavingsRecord:
    """``savings`` with the tokens of the rounds before its own in its billed figures."""
    return dataclasses.replace(
        savings, actual_prompt_tokens=savings.actual_prompt_tokens + sum(u.prompt_tokens for u in earlier),
        actual_cached_tokens=savings.actual_cached_tokens + sum(u.cached_read_tokens for u in earlier),
        actual_cache_write_tokens=savings.actual_cache_write_tokens + sum(u.cache_write_tokens for u in earlier),
        completion_tokens=savings.completion_tokens + sum(u.completion_tokens for u in earlier))


def _counterfactual_usage(original: OriginalPrompt, forwarded_tokens: int, usage: Usage,
                          cached_price: bool) -> Usage:
    """What the unpruned request would have been billed (rules above)."""
    overhead = max(usage.prompt_tokens - forwarded_tokens, 0)
    # = original + overhead when the overhead is positive; when our count
    # runs above the provider's (overhead < 0) this does not overstate it.
    cf_prompt = max(usage.prompt_tokens + original.tokens - forwarded_tokens, 0)
    cf_cached = 0
    if cached_price:
        k = cached_prefix_messages(original.fingerprints, original.previous_fingerprints)
        prefix = sum(original.message_tokens[:k]) + (overhead if k else 0)
        cf_cached = min(max(prefix, usage.cached_read_tokens), cf_prompt)
    cf_write = min(usage.cache_write_tokens, cf_prompt - cf_cached)
    # Of those, as few long-lived (dearer) writes as the actual request allows.
    long_lived = usage.cache_write_1h_tokens + usage.cache_write_12h_tokens
    cf_long = max(cf_write - (usage.cache_write_tokens - long_lived), 0)
    cf_hour = min(usage.cache_write_1h_tokens, cf_long)
    return Usage(prompt_tokens=cf_prompt, completion_tokens=usage.completion_tokens,
                 cached_read_tokens=cf_cached, cache_write_tokens=cf_write,
                 cache_write_1h_tokens=cf_hour, cache_write_12h_tokens=cf_long - cf_hour)


def _unpriced(model: str, original_tokens: int, forwarded_tokens: int, usage: Usage | None,
              scorer_usd: float) -> SavingsRecord:
    u = usage or Usage()
    return SavingsRecord(
        model=model, priced=False, original_tokens=original_tokens, forwarded_tokens=forwarded_tokens,
        overhead_tokens=max(u.prompt_tokens - forwarded_tokens, 0) if usage else 0,
        actual_prompt_tokens=u.prompt_tokens, actual_cached_tokens=u.cached_read_tokens,
        actual_cache_write_tokens=u.cache_write_tokens, completion_tokens=u.completion_tokens,
        counterfactual_prompt_tokens=0, counterfactual_cached_tokens=0,
        counterfactual_cache_write_tokens=0, counterfactual_usd=0.0, actual_usd=0.0,
        scorer_usd=scorer_usd, net_usd=-scorer_usd)


@dataclass(frozen=True, slots=True)
class ShadowSavings:
    """What a shadow decision would have saved on a request forwarded as it came.

    The request really billed (``billed_usd``) is the unpruned one; ``would_be_usd`` is
    the pruned request's bill derived from that usage (``shadow_savings`` states how),
    so ``net_usd = billed − would_be − scorer`` is the saving pruning would have made."""

    priced: bool
    forwarded_tokens: int   # message tokens the decision would have forwarded
    saved_tokens: int
    prefix_changed: bool    # the decision rewrote history the previous forward had sent
    billed_usd: float
    would_be_usd: float
    scorer_usd: float
    would_be_prompt_tokens: int
    would_be_cached_tokens: int
    would_be_cache_write_tokens: int

    @property
    def net_usd(self) -> float:
        return self.billed_usd - self.would_be_usd - self.scorer_usd


def shadow_savings(prices: PriceBook, *, model: str, original_tokens: int, forwarded_tokens: int,
                   usage: Usage | None, prefix_changed: bool, scorer_usd: float = 0.0) -> ShadowSavings:
    """The pruned request's bill, derived from the unpruned request's real usage.

    The mirror of the counterfactual above, and like it leaning against pruning, so the
    saving is a lower bound:

    - prompt = the billed prompt less the tokens the decision removes;
    - cache reads = none when the decision changed the cached prefix (an epoch: the
      provider's cache of the previous forward stops at the first changed message,
      so the system prompt's hit is not counted either); otherwise the real reads less
      every removed token, as if all of them came out of the cached part;
    - cache writes (only when the client caches, i.e. the real request wrote some) =
      the real writes plus the reads the pruned request loses, at most its uncached part;
      long-lived writes as many as the real request's;
    - completion = the real completion (same answer assumed).
    """
    saved = max(original_tokens - forwarded_tokens, 0)
    scorer_usd = max(float(scorer_usd), 0.0)
    price = prices.lookup(model)
    if price is None or usage is None:
        return ShadowSavings(False, forwarded_tokens, saved, prefix_changed, 0.0, 0.0, scorer_usd, 0, 0, 0)
    would_be = _pruned_usage(usage, saved, prefix_changed)
    return ShadowSavings(
        priced=True, forwarded_tokens=forwarded_tokens, saved_tokens=saved, prefix_changed=prefix_changed,
        billed_usd=price_usage(price, usage).total_usd, would_be_usd=price_usage(price, would_be).total_usd,
        scorer_usd=scorer_usd, would_be_prompt_tokens=would_be.prompt_tokens,
        would_be_cached_tokens=would_be.cached_read_tokens, would_be_cache_write_tokens=would_be.cache_write_tokens)


def _pruned_usage(usage: Usage, saved: int, prefix_changed: bool) -> Usage:
    """The usage of the request the decision would have forwarded (rules in ``shadow_savings``)."""
    prompt = max(usage.prompt_tokens - saved, 0)
    cached = 0 if prefix_changed else min(max(usage.cached_read_tokens - saved, 0), prompt)
    write = 0
    if usage.cache_write_tokens > 0:
        write = min(usage.cache_write_tokens + usage.cached_read_tokens - cached, prompt - cached)
    hour = min(usage.cache_write_1h_tokens, write)
    half_day = min(usage.cache_write_12h_tokens, write - hour)
    return Usage(prompt_tokens=prompt, completion_tokens=usage.completion_tokens, cached_read_tokens=cached,
                 cache_write_tokens=write, cache_write_1h_tokens=hour, cache_write_12h_tokens=half_day)
