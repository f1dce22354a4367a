"""The cheap LLM scorer: batched, concurrent, bounded by a deadline, cached, fail-open.

The pure pipeline decides which units need scores (only at an epoch or a
stateless prune) and scores them synchronously. The model is asked in between,
by ``gateway.exchange.prune_step``::

    capture = CapturingScorer(LocalScorer())
    first = prune(body, policy, scorer=capture, counter=counter, steering=steering)  # local scores, recorded
    if capture.request is not None:
        run = await llm.score(capture.request, policy, org=org, model=body["model"],
                              saved_tokens=first.saved_tokens)
        if run.scores:                                            # the model was asked
            result = prune(body, policy, scorer=local, counter=counter, steering=steering,
                           known=Precomputed(scores=run.scores))

``run.scores`` covers every candidate: the model's score where it answered
(``relevance`` and ``hard`` stay the local scorer's: the model picks the tier,
the local relevance orders units inside it and user constraints stay pinned),
the local score (or 5 = keep, per ``scorer_fallback``) where a batch failed,
and the local score for what hybrid mode never sent.

Guarantees: the request never fails because of the scorer; a batch that times
out, errors, or stays malformed after one retry falls back, counted once in
``sieve_scorer_failures_total{reason}`` (``timeout``, ``deadline``,
``http_error``, ``connection``, ``bad_response``, ``parse``, ``id_mismatch``);
the round ends by ``scorer_deadline_s``. Scores are cached by (prompt version,
scorer model, goal, current step, unit content): an agent loop pays only for
its new units while the task stays the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import orjson

from gateway.pruning import Conversation, Policy, Scorer, TokenCounters, UnitScore
from gateway.config import RouteKind
from gateway.scorers.clients import REASON_TIMEOUT, ScorerCallError, ScorerClient
from gateway.scorers.parsing import ScoreParseError, parse_scores
from gateway.scorers.prompt import UnitView, batch_messages, context_key
from gateway.state import ScoreCache
from gateway.telemetry import Metrics, PriceBook, Usage
from gateway.upstream import Upstream

log = logging.getLogger("sieve.scorer")

REASON_DEADLINE = "deadline"
REASON_PARSE = "parse"
REASON_MISMATCH = "id_mismatch"
REASON_ERROR = "error"
OUTPUT_TOKENS_PER_UNIT = 32     # {"id": 123, "score": 4, "reason": "<8 words>"},
OUTPUT_TOKENS_BASE = 48


@dataclass(slots=True)
class ScoringRequest:
    """What the pipeline asked its scorer, and what the local scorer answered."""

    conversation: Conversation
    candidates: list[int]
    window: list[int]
    local: dict[int, UnitScore]


class CapturingScorer:
    """A Scorer that delegates and records the pipeline's question (one per prune)."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.name = inner.name
        self.request: ScoringRequest | None = None

    def score(self, conversation: Conversation, candidates: Sequence[int],
              window: Sequence[int]) -> dict[int, UnitScore]:
        out = self.inner.score(conversation, candidates, window)
        if candidates:
            self.request = ScoringRequest(conversation, list(candidates), list(window), dict(out))
        return out


@dataclass(slots=True)
class ScorerRun:
    """One scoring round. Counts and tokens, never ratios; dollars priced once here."""

    scores: dict[int, UnitScore] = field(default_factory=dict)  # empty: the local result stands
    skipped: str | None = None        # "small" | "not_worth" | "no_candidates"
    sent_units: int = 0               # units the model was asked about (cache misses)
    cached_units: int = 0
    calls: int = 0                    # HTTP calls, retries included
    fallbacks: dict[str, int] = field(default_factory=dict)  # failed batches by reason
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    priced: bool = False
    seconds: float = 0.0


@dataclass(slots=True)
class _Batch:
    views: list[UnitView]
    messages: list[dict[str, Any]]
    prompt_estimate: int
    scores: dict[int, tuple[int, str]] | None = None
    reason: str | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    in_flight: bool = False


class LLMScorer:
    def __init__(self, *, upstreams: Mapping[RouteKind, Upstream], cache: ScoreCache | None, metrics: Metrics,
                 prices: PriceBook | None, counters: TokenCounters, api_key: str | None = None,
                 clients: dict[str, ScorerClient] | None = None) -> None:
        # The forward's transports (gateway.upstream): a scoring call is a request like a forward.
        self._upstreams = upstreams
        self._cache = cache
        self._metrics = metrics
        self._prices = prices
        self._counters = counters
        self._api_key = api_key
        self._clients: dict[str, ScorerClient] = dict(clients or {})  # by api_base ("" = litellm)

    def client_for(self, policy: Policy) -> tuple[ScorerClient, str]:
        """The transport and the model name on the wire for ``policy``."""
        base = policy.scorer_api_base
        client = self._clients.get(base)
        if client is None:
            kind = RouteKind.OPENAI if base and RouteKind.OPENAI in self._upstreams else RouteKind.LITELLM
            client = ScorerClient(self._upstreams[kind], kind, base or None, self._api_key)
            self._clients[base] = client
        model = policy.scorer_model
        if client.kind is RouteKind.OPENAI and model.startswith("openai/"):
            model = model[len("openai/"):]
        return client, model

    async def score(self, request: ScoringRequest, policy: Policy, *, org: str, model: str,
                    saved_tokens: int) -> ScorerRun:
        started = time.perf_counter()
        deadline_at = started + policy.scorer_deadline_s
        conv, local = request.conversation, request.local
        run = ScorerRun()
        ask = self._to_ask(request, policy)
        if not ask:
            run.skipped = "no_candidates"
            return run
        if sum(conv.units[i].tokens for i in ask) < policy.scorer_min_history_tokens:
            run.skipped = "small"
            return run
        views = {i: UnitView.of(conv, i, policy.scorer_max_unit_chars) for i in ask}
        ctx = context_key(policy.scorer_model, conv)
        keys = {i: _cache_key(org, ctx, views[i]) for i in ask}
        found = await self._cached(keys, policy)
        misses = [i for i in ask if i not in found]
        batches = [self._batch(conv, [views[i] for i in misses[k:k + policy.scorer_batch_size]], request.window,
                               policy) for k in range(0, len(misses), policy.scorer_batch_size)]
        if batches and policy.scorer_cost_check and not self._worth_it(batches, policy, model, saved_tokens):
            run.skipped = "not_worth"
            return run

        client, wire_model = self.client_for(policy)
        await self._run_batches(client, wire_model, batches, policy, deadline_at)

        scores = dict(local)  # hybrid leftovers and anything the model was not asked about
        for i, (s, reason) in found.items():
            scores[i] = _merge(local[i], s, reason)
        fresh: dict[str, bytes] = {}
        for batch in batches:
            run.calls += batch.calls
            run.prompt_tokens += batch.prompt_tokens
            run.completion_tokens += batch.completion_tokens
            if batch.scores is not None:
                for uid, (s, reason) in batch.scores.items():
                    scores[uid] = _merge(local[uid], s, reason)
                    fresh[keys[uid]] = orjson.dumps({"s": s, "r": reason})
                continue
            reason = batch.reason or REASON_ERROR
            run.fallbacks[reason] = run.fallbacks.get(reason, 0) + 1
            self._metrics.scorer_failures.labels(reason=reason).inc()
            for view in batch.views:
                scores[view.id] = _fallback(local[view.id], policy)
        if fresh and self._cache is not None and policy.scorer_cache_ttl_s > 0:
            try:
                await self._cache.put_many(fresh, policy.scorer_cache_ttl_s)
            except Exception as exc:  # noqa: BLE001 - a cache outage costs money, not correctness
                log.warning("score cache unavailable (%s): scores not cached", exc)
        run.scores = scores
        run.sent_units = len(misses)
        run.cached_units = len(found)
        cost = self._prices.cost(policy.scorer_model, Usage(run.prompt_tokens, run.completion_tokens)) \
            if self._prices is not None else None
        run.priced = cost is not None
        run.usd = cost.total_usd if cost is not None else 0.0
        run.seconds = time.perf_counter() - started
        self._metrics.observe(self._metrics.scorer_seconds, run.seconds)
        return run

    def _to_ask(self, request: ScoringRequest, policy: Policy) -> list[int]:
        if policy.scorer != "hybrid" or len(request.candidates) <= policy.hybrid_top_k:
            return list(request.candidates)
        local = request.local
        ranked = sorted(request.candidates, key=lambda i: (-local[i].score, -local[i].relevance, -i))
        return sorted(ranked[: policy.hybrid_top_k])

    async def _cached(self, keys: dict[int, str], policy: Policy) -> dict[int, tuple[int, str]]:
        if self._cache is None or policy.scorer_cache_ttl_s <= 0 or not keys:
            return {}
        order = list(keys)
        try:
            values = await self._cache.get_many([keys[i] for i in order])
        except Exception as exc:  # noqa: BLE001
            log.warning("score cache unavailable (%s): scoring without it", exc)
            return {}
        found: dict[int, tuple[int, str]] = {}
        for i, raw in zip(order, values):
            if raw is None:
                continue
            try:
                d = orjson.loads(raw)
                s = int(d["s"])
                if 1 <= s <= 5:
                    found[i] = (s, str(d.get("r", "")))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        return found

    def _batch(self, conv: Conversation, views: list[UnitView], window: list[int], policy: Policy) -> _Batch:
        messages = batch_messages(conv, views, window, context_chars=policy.scorer_context_chars)
        chars = sum(len(m["content"]) for m in messages)
        return _Batch(views, messages, chars // 4 + 8)

    def _worth_it(self, batches: list[_Batch], policy: Policy, model: str, saved_tokens: int) -> bool:
        """The model is asked unless this request's saving, at the main model's input
        price, is known to be smaller than the scoring. Unpriced: asked."""
        if self._prices is None:
            return True
        scorer_price = self._prices.lookup(policy.scorer_model)
        main_price = self._prices.lookup(model)
        if scorer_price is None or main_price is None:
            return True
        prompt = sum(b.prompt_estimate for b in batches)
        completion = sum(_max_tokens(len(b.views)) for b in batches) // 2
        rates = scorer_price.rates_for(prompt)
        cost = prompt * rates.input + completion * rates.output
        return max(saved_tokens, 0) * main_price.base.input >= cost

    async def _run_batches(self, client: ScorerClient, wire_model: str, batches: list[_Batch],
                           policy: Policy, deadline_at: float) -> None:
        if not batches:
            return
        tasks = [asyncio.create_task(self._ask(client, wire_model, b, policy, deadline_at)) for b in batches]
        _, pending = await asyncio.wait(tasks, timeout=max(deadline_at - time.perf_counter(), 0.0))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for batch, task in zip(batches, tasks):
            if batch.in_flight:  # cut off by the deadline: the provider bills the prompt anyway
                batch.prompt_tokens += batch.prompt_estimate
                batch.in_flight = False
            if task in pending:
                batch.scores, batch.reason = None, REASON_DEADLINE
            elif not task.cancelled() and task.exception() is not None:
                log.error("scorer batch failed unexpectedly", exc_info=task.exception())
                batch.scores, batch.reason = None, REASON_ERROR

    async def _ask(self, client: ScorerClient, wire_model: str, batch: _Batch, policy: Policy,
                   deadline_at: float) -> None:
        expected = [v.id for v in batch.views]
        counter = self._counters.for_model(policy.scorer_model)
        for attempt in range(2):
            remaining = deadline_at - time.perf_counter()
            if remaining <= 0.0:
                batch.reason = REASON_DEADLINE
                return
            timeout = min(policy.scorer_batch_timeout_s, remaining)
            batch.calls += 1
            batch.in_flight = True
            try:
                answer = await client.complete(wire_model, batch.messages, max_tokens=_max_tokens(len(expected)),
                                               json_mode=policy.scorer_json_mode, timeout_s=timeout)
            except ScorerCallError as exc:
                batch.in_flight = False
                if exc.reason == REASON_TIMEOUT:
                    batch.prompt_tokens += batch.prompt_estimate  # sent, so billed
                    batch.reason = REASON_TIMEOUT if timeout >= policy.scorer_batch_timeout_s else REASON_DEADLINE
                else:
                    batch.reason = exc.reason
                log.info("scorer batch failed (%s)", batch.reason)
                return
            batch.in_flight = False
            batch.prompt_tokens += answer.prompt_tokens if answer.prompt_tokens is not None \
                else sum(counter.count_message(m) for m in batch.messages)
            batch.completion_tokens += answer.completion_tokens if answer.completion_tokens is not None \
                else counter.count_text(answer.text)
            try:
                parsed = parse_scores(answer.text, expected)
            except ScoreParseError:
                batch.reason = REASON_PARSE
                continue  # one retry
            if parsed.ok:
                batch.scores, batch.reason = parsed.scores, None
                return
            batch.reason = REASON_MISMATCH
        log.info("scorer batch malformed after a retry (%s): falling back", batch.reason)


def _max_tokens(units: int) -> int:
    return OUTPUT_TOKENS_BASE + OUTPUT_TOKENS_PER_UNIT * units


def _cache_key(org: str, context: str, view: UnitView) -> str:
    # Per org: a hit would tell one org that another sent the same text.
    digest = hashlib.blake2b(f"{context}\x00{view.content_hash}".encode(), digest_size=16).hexdigest()
    return f"{org}:{digest}"


def _merge(local: UnitScore, score: int, reason: str) -> UnitScore:
    return UnitScore(score, local.relevance, f"llm: {reason}" if reason else "llm", local.hard)


def _fallback(local: UnitScore, policy: Policy) -> UnitScore:
    if policy.scorer_fallback == "keep":
        return UnitScore(5, local.relevance, "scorer unavailable: kept", local.hard)
    return local
