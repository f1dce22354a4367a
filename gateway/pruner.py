"""The pruning step of a request: state in, pure pipeline, state out; fail-open.

Around ``gateway.pruning.pipeline.prune`` (pure) this adds what needs I/O:
the conversation's frozen plan from the state store, and saving the new one.
A store or pipeline failure never fails the request: it is forwarded
unpruned and the failure is counted (``sieve_fail_open_total{reason}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping

import orjson

from gateway.api.protocol import SieveHeaders
from gateway.errors import Forbidden
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.pipeline import PruneResult, prune
from gateway.pruning.policy import Policy
from gateway.pruning.scoring import Scorer
from gateway.pruning.tokens import TokenCounters
from gateway.state.protocols import ConversationStore
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("sieve.pruner")

# Bodies above this size are pruned in a worker thread so one cold 100k-token
# prune does not stall every other request on the event loop.
THREAD_THRESHOLD_BYTES = 256 * 1024


@dataclass(slots=True)
class PruneOutcome:
    result: PruneResult
    conversation_key: str
    previous_fingerprints: list[str] | None   # of the previous unpruned request (savings)
    prune_s: float
    failed: str | None = None                 # fail-open reason, if any


class Pruner:
    def __init__(self, counters: TokenCounters, scorer: Scorer, store: ConversationStore,
                 metrics: Metrics) -> None:
        self._counters = counters
        self._scorer = scorer
        self._store = store
        self._metrics = metrics

    async def prune(self, body: dict[str, Any], org: str, headers: SieveHeaders, policy: Policy,
                    body_bytes: int) -> PruneOutcome:
        overrides = headers.target_tokens or headers.strategy or headers.goal
        if overrides and not policy.allow_overrides:
            raise Forbidden(f"policy {policy.name!r} does not allow x-sieve-target-tokens, "
                            "x-sieve-strategy or x-sieve-goal overrides")
        key = conversation_key(org, body, headers.conversation_id)
        failed = None
        state = None
        try:
            raw = await self._store.get(key)
            state = FrozenPlan.from_bytes(raw) if raw else None
        except Exception as exc:  # noqa: BLE001 - any store failure: prune without state
            failed = "state_store"
            self._metrics.fail_open.labels(reason="state_store").inc()
            log.warning("state store unavailable (%s): pruning without conversation state", exc)
        previous = list(state.fingerprints) if state is not None else None
        goal = headers.goal or _metadata_goal(body)
        counter = self._counters.for_model(body["model"])
        t0 = time.perf_counter()
        call = lambda: prune(body, policy, scorer=self._scorer, counter=counter, state=state,  # noqa: E731
                             target=headers.target_tokens, strategy=headers.strategy, goal=goal)
        try:
            result = await asyncio.to_thread(call) if body_bytes > THREAD_THRESHOLD_BYTES else call()
        except Exception as exc:  # noqa: BLE001 - a pruning bug must not fail the request
            log.exception("pruning failed; forwarding unpruned: %s", exc)
            self._metrics.fail_open.labels(reason="pruning_error").inc()
            result = prune(body, policy, scorer=self._scorer, counter=counter, strategy="none")
            failed = "pruning_error"
        prune_s = time.perf_counter() - t0
        self._metrics.prune_seconds.observe(prune_s)
        if failed != "state_store":
            try:
                await self._store.put(key, result.state.to_bytes(), policy.state_ttl_s)
            except Exception as exc:  # noqa: BLE001
                self._metrics.fail_open.labels(reason="state_store").inc()
                log.warning("state store unavailable (%s): decisions of this request not saved", exc)
        return PruneOutcome(result, key, previous, prune_s, failed)


def conversation_key(org: str, body: Mapping[str, Any], conversation_id: str | None) -> str:
    """``x-sieve-conversation-id`` if given, else a hash of org + model + the first
    messages (the system prompt and the first user message: a task's identity)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(org.encode())
    if conversation_id:
        h.update(b"\x00id\x00" + conversation_id.encode())
        return "conv:" + h.hexdigest()
    h.update(b"\x00derived\x00" + str(body.get("model")).encode())
    for message in body.get("messages") or ():
        h.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
        if message.get("role") == "user":
            break
    return "conv:" + h.hexdigest()


def _metadata_goal(body: Mapping[str, Any]) -> str | None:
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("sieve_goal"), str):
        return metadata["sieve_goal"] or None
    return None
