"""The pruning step of a request: state in, pure pipeline, state out; fail-open.

Around ``gateway.pruning.pipeline.prune`` (pure) this adds what needs I/O:
the conversation's frozen plan from the state store, and saving the new one.
A store or pipeline failure never fails the request: it is forwarded
unpruned and the failure is counted (``sieve_fail_open_total{reason}``).

When the policy names an LLM scorer (``scorer: llm | hybrid``), the pipeline
runs first with the local scorer behind a ``CapturingScorer``; if it scored
anything (an epoch or a stateless prune), the cheap model scores those units
(``gateway.scorers.llm``) and the pipeline runs again with its scores. A
frozen or under-the-trigger request never reaches the model.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping

import orjson

from gateway.exchange.big_bodies import THREAD_THRESHOLD_BYTES, BigBodies
from gateway.exchange.recent_messages import RecentMessages
from gateway.exchange.recent_plans import RecentPlans
from gateway.embedding import Embedder
from gateway.errors import Forbidden
from gateway.pruning import (Cohort, FrozenPlan, LocalScorer, Mode, OVERRIDES, PinnedRoom, Policy, PolicyMode,
    Precomputed, PruneResult, Scorer, SemanticOutcome, SemanticScorer, Steering, Strategy, TokenCounter,
    TokenCounters, UnitScore, cohort_of, prune)
from gateway.scorers import CapturingScorer, LLMScorer, ScorerRun, Summarizer, SummaryRun
from gateway.state import ConversationStore
from gateway.telemetry import FailOpen, Metrics
from gateway.wire import Identity, ModelCall, SieveHeaders, more_steps_follow

log = logging.getLogger("sieve.pruner")
CONTROL = "control group: this conversation is never pruned (policy control_share)"


@dataclass(slots=True)
class PruneOutcome:
    result: PruneResult
    conversation_key: str
    previous_fingerprints: list[str] | None   # of the previous unpruned request (savings)
    prune_s: float
    failed: FailOpen | None = None            # why it was served unpruned or its plan not saved
    scorer: ScorerRun | None = None           # the LLM scoring round, when one ran
    summary: SummaryRun | None = None         # summaries written for omitted spans
    unpruned_reason: str | None = None        # why the request was forwarded as it came, untouched
    cohort: Cohort = Cohort.PRUNED            # the conversation's comparison group (gateway.pruning.cohort)

    @property
    def scorer_usd(self) -> float:
        return (self.scorer.usd if self.scorer is not None else 0.0) + \
            (self.summary.usd if self.summary is not None else 0.0)


class Pruner:
    def __init__(self, counters: TokenCounters, scorer: LocalScorer, store: ConversationStore,
                 metrics: Metrics, llm: LLMScorer | None = None, summarizer: Summarizer | None = None,
                 big: BigBodies | None = None, embedder: Embedder | None = None) -> None:
        self._counters = counters
        # The key of the cohort hash (gateway.pruning.cohort), set once at start-up (gateway.api.services).
        self.cohort_secret = b""
        self._big = big or BigBodies(max_bytes=8 * 1024 * 1024)  # the default SIEVE_MAX_PRUNE_BYTES_IN_FLIGHT
        self._scorer = scorer
        self._store = store
        self._metrics = metrics
        self._llm = llm
        self._summarizer = summarizer
        self._embedder = embedder
        self.recent_plans = RecentPlans()  # the plans saved last: a warm step reads its own back without a decode
        # The messages each conversation sent last: a warm step fingerprints only its new ones.
        self.recent_messages = RecentMessages()

    async def prune(self, call: ModelCall, target_tokens: int | None = None,
                    pinned: tuple[PinnedRoom, ...] = (), *, dry_run: bool = False) -> PruneOutcome:
        """Prune ``call``'s body under its conversation's frozen plan. ``target_tokens``,
        when given, is a target Sieve itself imposes (a budget running low): it replaces
        the request's own and is no client override. ``pinned``: the conversation's pinned
        sieve_expand exchanges (``gateway.expand``), held under the target.

        ``dry_run`` (``/v1/prune``): the decision a pruned conversation would get, and its
        cohort neither applied nor told (a client must not learn which conversations go
        unpruned before it sends them). A dry run never writes the live conversation's plan
        (its next step must find the plan its last forward left): it reads its own rehearsal
        plan (``rehearsal_key``), else the live one, and moves only the rehearsal on, so a
        conversation replayed step by step through ``/v1/prune`` (``replay.py``) plays out
        its epochs as forwards would."""
        check_overrides(call.sieve, call.policy)
        key = conversation_key(call.identity.org, call.body, call.sieve.conversation_id)
        cohort = cohort_of(call.policy, key, self.cohort_secret)
        if dry_run:
            cohort = Cohort.SHADOW if call.policy.mode is PolicyMode.SHADOW else Cohort.PRUNED
        elif cohort is Cohort.CONTROL:
            return await self.pass_through(call, CONTROL)
        saved_as = loaded_from = rehearsal_key(key, call.identity) if dry_run else key
        raw, failed = await self._load(saved_as)
        if dry_run and raw is None and failed is None:
            loaded_from = key
            raw, failed = await self._load(key)
        state, own = self._plan_of(loaded_from, raw) if raw else (None, False)
        # Read before the pipeline runs: a frozen replay moves the plan on to this request.
        previous = list(state.fingerprints) if state is not None else None
        run = _Run(call, self._counters.for_model(call.body["model"]), target_tokens, self._big, pinned,
                   (self.recent_messages, key))
        t0 = time.perf_counter()
        try:
            result, scorer_run = await self._decide(run, raw, state)
        except Exception as exc:  # noqa: BLE001 - a pruning bug must not fail the request
            log.exception("pruning failed (%s); forwarding unpruned", type(exc).__name__)
            self._metrics.fail_open.labels(reason=FailOpen.PRUNING_ERROR).inc()
            result, scorer_run = prune(call.body, call.policy, scorer=self._scorer, counter=run.counter,
                                       steering=Steering(strategy=Strategy.NONE)), None
            failed = FailOpen.PRUNING_ERROR
        summary_run = await self._summarize(run, result)
        prune_s = time.perf_counter() - t0
        self._metrics.observe(self._metrics.prune_seconds, prune_s)
        # A frozen replay of the plan this process wrote changed none of its decisions: kept as written.
        replayed = raw if own and result.mode is Mode.FROZEN and result.state is state else None
        if failed is not FailOpen.STATE_STORE and not await self._save(saved_as, result, call.policy, replayed):
            failed = failed or FailOpen.STATE_STORE
        return PruneOutcome(result, key, previous, prune_s, failed, scorer_run, summary_run, cohort=cohort)

    async def pass_through(self, call: ModelCall, reason: str, failed: FailOpen | None = None) -> PruneOutcome:
        """``call`` forwarded as it came, for ``reason`` (its history is kept at the provider, or
        a pruning bug, ``failed``): counted like strategy ``none``, and its conversation's stored
        plan neither read nor written, since the body may hold only the newest turn of it."""
        check_overrides(call.sieve, call.policy)
        if failed is not None:
            self._metrics.fail_open.labels(reason=failed).inc()
        t0 = time.perf_counter()
        counter = self._counters.for_model(call.body["model"])
        result = prune(call.body, call.policy, scorer=self._scorer, counter=counter,
                       steering=Steering(strategy=Strategy.NONE))
        prune_s = time.perf_counter() - t0
        self._metrics.observe(self._metrics.prune_seconds, prune_s)
        key = conversation_key(call.identity.org, call.body, call.sieve.conversation_id)
        return PruneOutcome(result, key, None, prune_s, failed, unpruned_reason=reason,
                            cohort=cohort_of(call.policy, key, self.cohort_secret))

    async def _load(self, key: str) -> tuple[bytes | None, FailOpen | None]:
        """The conversation's stored plan, and the fail-open reason when the store failed."""
        try:
            return await self._store.get(key), None
        except Exception as exc:  # noqa: BLE001 - any store failure: prune without state
            self._metrics.fail_open.labels(reason=FailOpen.STATE_STORE).inc()
            log.warning("state store unavailable (%s): pruning without conversation state", exc)
            return None, FailOpen.STATE_STORE

    def _plan_of(self, key: str, raw: bytes) -> tuple[FrozenPlan | None, bool]:
        """The plan ``raw`` (read under ``key``) encodes, and whether it is the one this process
        saved there last (a copy of it; ``raw`` is then ``to_bytes()``'s own), else decoded."""
        plan = self.recent_plans.plan(key, raw)
        return (plan, True) if plan is not None else (FrozenPlan.from_bytes(raw), False)

    async def _save(self, key: str, result: PruneResult, policy: Policy, replayed: bytes | None = None) -> bool:
        """Save ``result``'s plan; ``replayed``: the bytes of the plan its frozen replay moved on."""
        try:
            plan = result.state
            raw = plan.to_bytes_replayed(replayed) if replayed is not None else plan.to_bytes()
            await self._store.put(key, raw, policy.state_ttl_s)
        except Exception as exc:  # noqa: BLE001
            self.recent_plans.forget(key)
            self._metrics.fail_open.labels(reason=FailOpen.STATE_STORE).inc()
            log.warning("state store unavailable (%s): decisions of this request not saved", exc)
            return False
        self.recent_plans.remember(key, raw, result.state)
        return True

    async def _decide(self, run: _Run, raw: bytes | None,
                      state: FrozenPlan | None) -> tuple[PruneResult, ScorerRun | None]:
        """The pipeline's decision; with an LLM scorer, a second pass on the model's scores
        when the first one scored anything (an epoch or a stateless prune)."""
        policy = run.call.policy
        if policy.scorer == "embedding":
            return await self._decide_embedded(run, state), None
        capture = CapturingScorer(self._scorer) if self._llm is not None and policy.scorer != "local" else None
        result = await run.prune(state, capture or self._scorer)
        if capture is None or capture.request is None:
            return result, None
        scorer_run = await self._score_with_llm(capture, policy, run.call.identity.org, run.call.body["model"],
                                                result)
        if scorer_run is not None and scorer_run.scores:
            # The epoch/stateless paths leave the stored plan untouched, but a
            # fresh decode costs microseconds and rules out any aliasing.
            fresh = FrozenPlan.from_bytes(raw) if raw else None
            result = await run.prune(fresh, self._scorer, scorer_run.scores)
        return result, scorer_run

    async def _decide_embedded(self, run: _Run, state: FrozenPlan | None) -> PruneResult:
        """The local scorer with the embedding model's relevance mixed in, from the vectors the
        worker has made (``gateway.embedding.worker``); then the request's messages that have
        none go to the worker, for the conversation's next decision."""
        org, messages, policy = run.call.identity.org, run.call.body["messages"], run.call.policy
        if self._embedder is None:
            result = await run.prune(state, self._scorer)
            if result.scored_units:
                self._metrics.embedding_decisions.labels(outcome="unavailable").inc()
            return result
        if len(messages) >= policy.min_messages:  # a shorter history has little to rank
            try:
                await self._embedder.embed_request(org, messages)
            except Exception as exc:  # noqa: BLE001 - the local scores stand
                log.warning("embedding the request failed (%s); scoring without it", exc)
        scorer = SemanticScorer(self._scorer, self._embedder.view(org), policy.embedding_weight)
        result = await run.prune(state, scorer)
        if scorer.outcome is not SemanticOutcome.UNSCORED:
            self._metrics.embedding_decisions.labels(outcome=scorer.outcome.value).inc()
        if len(result.state.fingerprints) == len(messages):
            self._embedder.note(org, messages, result.state.fingerprints)
        return result

    async def _summarize(self, run: _Run, result: PruneResult) -> SummaryRun | None:
        policy, body = run.call.policy, run.call.body
        if not policy.summaries or self._summarizer is None or result.mode not in (Mode.EPOCH, Mode.STATELESS):
            return None
        try:
            return await self._summarizer.summarize(result, body["messages"], run.goal or _first_user_text(body),
                                                    policy, run.counter, result.state.target_tokens)
        except Exception as exc:  # noqa: BLE001 - the plain markers stand
            log.exception("summaries failed (%s); keeping the plain markers", type(exc).__name__)
            return None

    async def _score_with_llm(self, capture: CapturingScorer, policy: Policy, org: str, model: str,
                              first: PruneResult) -> ScorerRun | None:
        assert self._llm is not None and capture.request is not None
        try:
            return await self._llm.score(capture.request, policy, org=org, model=model,
                                         saved_tokens=first.saved_tokens)
        except Exception as exc:  # noqa: BLE001 - the local decision stands
            log.exception("LLM scorer failed (%s); keeping the local scores", type(exc).__name__)
            self._metrics.scorer_failures.labels(reason="error").inc()
            return None


class _Run:
    """One request's pipeline runs: its body, counter and target, in the thread or not."""

    def __init__(self, call: ModelCall, counter: TokenCounter, target_tokens: int | None, big: BigBodies,
                 pinned: tuple[PinnedRoom, ...] = (), recent: tuple[RecentMessages, str] | None = None) -> None:
        self.call = call
        self.recent = recent  # the memo of the conversation's last messages, and its key
        self.counter = counter
        self.big = big
        self.goal = call.sieve.goal or _metadata_goal(call.body)
        self.steering = Steering(target_tokens=target_tokens or call.sieve.target_tokens,
                                 strategy=call.sieve.strategy, goal=self.goal, pinned=pinned)
        self.continued = more_steps_follow(call.sent_body, call.format, call.sieve.conversation_id)

    def _prune(self, plan: FrozenPlan | None, scorer: Scorer,
               scores: Mapping[int, UnitScore] | None = None) -> PruneResult:
        # A conversation that says it goes on: its first decision leaves the next steps room.
        messages = self.call.body["messages"]
        fingerprints = self.recent[0].fingerprints(self.recent[1], messages) if self.recent is not None else None
        return prune(self.call.body, self.call.policy, scorer=scorer, counter=self.counter, state=plan,
                     steering=self.steering, known=Precomputed(scores, fingerprints), continued=self.continued)

    async def prune(self, plan: FrozenPlan | None, scorer: Scorer,
                    scores: Mapping[int, UnitScore] | None = None) -> PruneResult:
        if self.call.body_bytes > THREAD_THRESHOLD_BYTES:
            self.big.watch(self.call)
            async with self.big.slot(self.call.body_bytes):
                return await asyncio.to_thread(self._prune, plan, scorer, scores)
        return self._prune(plan, scorer, scores)


def check_overrides(headers: SieveHeaders, policy: Policy) -> None:
    """The x-sieve-* steering headers this org's policy allows, or a 403 that says which is not."""
    for name in OVERRIDES:
        if getattr(headers, name) is not None and name not in policy.allow_overrides:
            raise Forbidden(f"policy {policy.name!r} does not allow the x-sieve-{name.replace('_', '-')} header",
                            param=f"x-sieve-{name.replace('_', '-')}", code="override_not_allowed")
    target, low, high = headers.target_tokens, policy.override_min_target_tokens, policy.override_max_target_tokens
    if target is not None and (target < low or (high and target > high)):
        allowed = f"{low}..{high}" if high else f">= {low}"
        raise Forbidden(f"x-sieve-target-tokens {target} is outside what policy {policy.name!r} allows ({allowed})",
                        param="x-sieve-target-tokens", code="override_not_allowed")


def rehearsal_key(key: str, identity: Identity) -> str:
    """Where a dry run keeps its plan: beside the live conversation's, per calling key, so
    neither a rehearsal nor another key's rehearsal can move a live prefix or each other."""
    return f"{key}|dry|{identity.team or ''}|{identity.key_name or ''}"


def conversation_key(org: str, body: Mapping[str, Any], conversation_id: str | None) -> str:
    """``<org>:<hash>``: of ``x-sieve-conversation-id`` if given, else of model + the
    first messages (the system prompt and the first user message: a task's identity).
    The org leads the key in plain sight, so one org's id can never name another's
    state, and an operator can find (or delete) one org's keys."""
    h = hashlib.blake2b(digest_size=16)
    h.update(org.encode())
    if conversation_id:
        h.update(b"\x00id\x00" + conversation_id.encode())
        return f"{org}:{h.hexdigest()}"
    h.update(b"\x00derived\x00" + str(body.get("model")).encode())
    for message in body.get("messages") or ():
        h.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
        if message.get("role") == "user":
            break
    return f"{org}:{h.hexdigest()}"


def _first_user_text(body: Mapping[str, Any]) -> str:
    for message in body.get("messages") or ():
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def _metadata_goal(body: Mapping[str, Any]) -> str | None:
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("sieve_goal"), str):
        return metadata["sieve_goal"] or None
    return None
