"""Vectors per message, embedded once, in the background, within a CPU share.

The pruner hands the ``Embedder`` every request's messages after its prune
(``note``): those without a vector go on a bounded queue, and a worker embeds them
in batches on its own thread, then sleeps so that the model takes at most
``cpu_share`` of one core. Nothing on the request path waits for that: a history the
worker has not reached yet is scored by the local scorer alone
(``gateway.pruning.semantic``), and a decision taken then stays frozen; the vectors
serve the conversation's next epoch. One text is embedded on the request path: the
request's own newest user message (``embed_request``), short and bounded in word
pieces, without which a new question could never be matched.

    embedder = Embedder(model, metrics, shared=stores.scores)      # shared: Redis, or None
    await embedder.start()
    await embedder.embed_request(org, messages)       # the question, if it is new
    scorer = SemanticScorer(local, embedder.view(org), weight)
    ...prune...
    embedder.note(org, messages, result.state.fingerprints)

Vectors are kept in process (an LRU) and, with Redis, in the shared score store
(``{org}:emb:<model>:<fingerprint>``, float16), so a replica that never saw a
conversation reads them instead of embedding again. Keys are per org, like scores:
a hit must not tell one org that another sent the same text. Vectors are float16
wherever they come from, so every replica mixes the same numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from gateway.embedding.model import EmbeddingModel
from gateway.pruning import content_text, fingerprint, message_token_text
from gateway.state import ScoreCache
from gateway.telemetry import EmbeddingOutcome, Metrics

log = logging.getLogger("sieve.embedding")
_Key = tuple[str, str]  # org, message fingerprint


class VectorCache:
    """Unit vectors (float16) by (org, fingerprint), the least recently used evicted first."""

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[_Key, np.ndarray] = OrderedDict()
        self._max = max_entries
        # The fingerprints held, per org: a request's messages are checked against it in one
        # set operation (a loop over a 20k-token history's keys cost 0.2 ms per request).
        self.held: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: _Key) -> np.ndarray | None:
        vector = self._entries.get(key)
        if vector is not None:
            with contextlib.suppress(KeyError):  # evicted meanwhile (a big prune reads from its thread)
                self._entries.move_to_end(key)
        return vector

    def put(self, key: _Key, vector: np.ndarray) -> None:
        self._entries[key] = vector
        self._entries.move_to_end(key)
        self.held.setdefault(key[0], set()).add(key[1])
        while len(self._entries) > self._max:
            (org, fp), _ = self._entries.popitem(last=False)
            self.held[org].discard(fp)


class RequestVectors(Mapping):
    """One request's read of the cache: the first answer for a fingerprint stands for the
    whole request (the worker may add vectors meanwhile; a decision retaken in the same
    request must see what the first one saw)."""

    def __init__(self, cache: VectorCache, org: str) -> None:
        self._cache, self._org = cache, org
        self._seen: dict[str, np.ndarray | None] = {}

    def __getitem__(self, fp: str) -> np.ndarray:
        vector = self.get(fp)
        if vector is None:
            raise KeyError(fp)
        return vector

    def get(self, fp: str, default: Any = None) -> Any:
        if fp not in self._seen:
            found = self._cache.get((self._org, fp))
            self._seen[fp] = None if found is None else found.astype(np.float32)
        found = self._seen[fp]
        return default if found is None else found

    def __iter__(self) -> Iterator[str]:
        return iter([fp for fp, v in self._seen.items() if v is not None])

    def __len__(self) -> int:
        return sum(1 for v in self._seen.values() if v is not None)


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    """What bounds the background work and the memory it keeps."""

    max_queue: int = 20_000         # messages waiting; more are dropped (counted) and handed in again later
    # Taken from the queue at once and sorted by length, then run in small batches: padding
    # costs as much as text, and one batch of mixed lengths is mostly padding.
    window: int = 64
    batch_size: int = 8
    cpu_share: float = 0.25         # of one core: the worker sleeps (1 - share) / share of what a batch took
    # Vectors kept in process: about 1.1 KiB each with their keys, so 55 MiB at most (the
    # histories of some 60 conversations of 100k tokens); an evicted one is queued again
    # when its conversation comes back, and read from Redis where there is one.
    cache_entries: int = 50_000
    ttl_s: int = 7 * 24 * 3600      # in the shared store


class Embedder:
    """The model, the vectors it made, and the worker that makes them (see the module doc)."""

    def __init__(self, model: EmbeddingModel, metrics: Metrics, *, shared: ScoreCache | None = None,
                 limits: WorkerLimits = WorkerLimits()) -> None:
        self.model = model
        self._metrics = metrics
        self._shared = shared
        self._cache = VectorCache(limits.cache_entries)
        self._queue: asyncio.Queue[tuple[_Key, str]] = asyncio.Queue(limits.max_queue)
        self._queued: dict[str, set[str]] = {}  # per org, the fingerprints waiting
        self._window = limits.window
        self._batch_size = limits.batch_size
        self._cpu_share = limits.cpu_share
        self._ttl_s = limits.ttl_s
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sieve-embedding")
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sieve-embedding-worker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._thread.shutdown(wait=True, cancel_futures=True)

    def view(self, org: str) -> RequestVectors:
        return RequestVectors(self._cache, org)

    def idle(self) -> bool:
        """Nothing queued or being embedded (tests and benchmarks wait for it)."""
        return not any(self._queued.values())

    def note(self, org: str, messages: Sequence[Mapping[str, Any]], fingerprints: Sequence[str]) -> int:
        """Queue the messages that have no vector yet (each once); returns how many were queued.
        A full queue drops the rest, counted: the next request of the conversation hands them in again."""
        waiting = self._queued.setdefault(org, set())
        new = set(fingerprints).difference(self._cache.held.get(org, ()), waiting)
        queued = 0
        for message, fp in zip(messages, fingerprints) if new else ():
            if fp not in new:
                continue
            new.discard(fp)  # a message sent twice in one request is queued once
            text = message_token_text(message)
            if not text.strip():  # nothing to read: a zero vector (cosine 0), never queued again
                self._cache.put((org, fp), np.zeros(self.model.manifest.dimensions, np.float16))
                continue
            try:
                # Only the head is read: the queue holds no long tool output whole.
                self._queue.put_nowait(((org, fp), _head(text, self.model.max_tokens)))
            except asyncio.QueueFull:
                self._metrics.embedding_messages.labels(outcome=EmbeddingOutcome.DROPPED).inc()
                continue
            waiting.add(fp)
            queued += 1
        if queued:
            self._metrics.embedding_queue.set(self._waiting())
        return queued

    def _waiting(self) -> int:
        return sum(len(fps) for fps in self._queued.values())

    async def embed_request(self, org: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Embed the newest user message now if it has no vector: the one text a decision cannot
        do without, cut like every text to the model's word-piece limit (a few milliseconds)."""
        message = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if message is None or not content_text(message.get("content")).strip():
            return
        key = (org, fingerprint(message))
        if key in self._cache:
            return
        text = message_token_text(message)
        vectors, _ = await asyncio.get_running_loop().run_in_executor(None, self._encode, [text])
        self._cache.put(key, vectors[0])

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, float]:
        """Vectors (float16) and the CPU seconds they took, on the calling thread, in batches
        of similar lengths (``texts`` sorted by length)."""
        started = time.thread_time()
        cut = [_head(t, self.model.max_tokens) for t in texts]
        vectors = np.vstack([self.model.encode(cut[k:k + self._batch_size])
                             for k in range(0, len(cut), self._batch_size)]).astype(np.float16)
        spent = time.thread_time() - started
        self._metrics.embedding_cpu_seconds.inc(spent)
        return vectors, spent

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._window and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                spent = await self._embed_batch(loop, batch)
            except Exception:  # noqa: BLE001 - the worker outlives a bad batch
                log.exception("embedding batch failed; its messages stay unembedded")
                self._metrics.embedding_messages.labels(outcome=EmbeddingOutcome.FAILED).inc(len(batch))
                spent = 0.0
            finally:
                for (org, fp), _ in batch:
                    self._queued.get(org, set()).discard(fp)
                self._metrics.embedding_queue.set(self._waiting())
            if spent > 0 and self._cpu_share < 1:
                await asyncio.sleep(spent * (1 - self._cpu_share) / self._cpu_share)

    async def _embed_batch(self, loop: asyncio.AbstractEventLoop, batch: list[tuple[_Key, str]]) -> float:
        found = await self._read_shared([key for key, _ in batch])
        for key, vector in found.items():
            self._cache.put(key, vector)
        todo = [(key, text) for key, text in batch if key not in found]
        self._metrics.embedding_messages.labels(outcome=EmbeddingOutcome.SHARED).inc(len(found))
        if not todo:
            return 0.0
        todo.sort(key=lambda item: len(item[1]))  # similar lengths share a batch
        vectors, spent = await loop.run_in_executor(self._thread, self._encode, [text for _, text in todo])
        for (key, _), vector in zip(todo, vectors):
            self._cache.put(key, vector)
        self._metrics.embedding_messages.labels(outcome=EmbeddingOutcome.EMBEDDED).inc(len(todo))
        await self._write_shared({key: vector for (key, _), vector in zip(todo, vectors)})
        return spent

    def _shared_key(self, key: _Key) -> str:
        org, fp = key
        return f"{org}:emb:{self.model.model_id}:{fp}"

    async def _read_shared(self, keys: list[_Key]) -> dict[_Key, np.ndarray]:
        if self._shared is None:
            return {}
        try:
            raw = await self._shared.get_many([self._shared_key(k) for k in keys])
        except Exception as exc:  # noqa: BLE001 - the model can still embed them
            log.warning("shared vector store unavailable (%s): embedding locally", exc)
            return {}
        width = self.model.manifest.dimensions * 2
        return {k: np.frombuffer(v, dtype=np.float16).copy() for k, v in zip(keys, raw)
                if v is not None and len(v) == width}

    async def _write_shared(self, vectors: dict[_Key, np.ndarray]) -> None:
        if self._shared is None or not vectors:
            return
        try:
            await self._shared.put_many({self._shared_key(k): v.tobytes() for k, v in vectors.items()}, self._ttl_s)
        except Exception as exc:  # noqa: BLE001 - this replica keeps them; others embed their own
            log.warning("shared vector store unavailable (%s): vectors kept in this process only", exc)


def _head(text: str, max_tokens: int) -> str:
    """About ``max_tokens`` word pieces' worth of ``text`` (4 characters each, generously):
    the tokenizer then cuts exactly, without reading a long paste whole."""
    return text[: max_tokens * 6]
