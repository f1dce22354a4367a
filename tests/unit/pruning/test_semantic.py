"""The mixing stage (gateway.pruning.semantic), pure: real model vectors handed in as data."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.embedding.model import EmbeddingModel
from gateway.pruning.conversation import build_conversation
from gateway.pruning.messages import fingerprint, message_token_text
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.semantic import SemanticOutcome, SemanticScorer, mixed_relevance
from gateway.pruning.tokens import TokenCounters
from tests.support.embedding import ANSWER, chat_messages, model_dir

COUNTER = TokenCounters().for_model("gpt-4o-mini")


@pytest.fixture(scope="module")
def model() -> EmbeddingModel:
    return EmbeddingModel.load(model_dir())


def vectors_of(model: EmbeddingModel, messages: list[dict]) -> dict[str, np.ndarray]:
    found = model.encode([message_token_text(m) for m in messages]).astype(np.float16).astype(np.float32)
    return {fingerprint(m): v for m, v in zip(messages, found)}


def kept_answer(result) -> bool:
    return any(ANSWER in (m.get("content") or "") for m in result.request["messages"])


def test_meaning_keeps_the_answer_that_words_miss(model: EmbeddingModel) -> None:
    messages = chat_messages()
    body = {"model": "gpt-4o-mini", "messages": messages}
    target = int(0.3 * sum(COUNTER.count_message(m) for m in messages))
    local = prune(body, Policy(), scorer=LocalScorer(), counter=COUNTER, steering=Steering(target_tokens=target))
    scorer = SemanticScorer(LocalScorer(), vectors_of(model, messages))
    mixed = prune(body, Policy(), scorer=scorer, counter=COUNTER, steering=Steering(target_tokens=target))
    assert scorer.outcome is SemanticOutcome.MIXED
    assert not kept_answer(local) and kept_answer(mixed)
    assert mixed.forwarded_tokens <= target


def test_a_candidate_without_a_vector_leaves_the_local_scores(model: EmbeddingModel) -> None:
    messages = chat_messages()
    conv = build_conversation(messages, COUNTER.count_message)
    candidates, window = list(range(1, len(conv.units) - 2)), [len(conv.units) - 2, len(conv.units) - 1]
    vectors = vectors_of(model, messages)
    del vectors[fingerprint(messages[5])]  # one message the worker has not reached
    scorer = SemanticScorer(LocalScorer(), vectors)
    assert scorer.score(conv, candidates, window) == LocalScorer().score(conv, candidates, window)
    assert scorer.outcome is SemanticOutcome.COLD
    without_request = {fp: v for fp, v in vectors_of(model, messages).items() if fp != fingerprint(messages[-1])}
    scorer = SemanticScorer(LocalScorer(), without_request)
    assert scorer.score(conv, candidates, window) == LocalScorer().score(conv, candidates, window)
    assert scorer.outcome is SemanticOutcome.NO_REQUEST


def test_the_mix_is_a_weighted_sum_of_normalised_signals_on_the_local_range() -> None:
    local = {1: 0.2, 2: 0.6, 3: 1.0, 4: 0.4}
    cosines = {1: 0.9, 2: 0.1, 3: 0.5, 4: 0.3}
    only_local = mixed_relevance(local, set(), cosines=cosines, weight=0.0)
    assert only_local == pytest.approx(local)
    only_model = mixed_relevance(local, set(), cosines=cosines, weight=1.0)
    assert sorted(only_model, key=only_model.get) == [2, 4, 3, 1]
    assert min(only_model.values()) == pytest.approx(0.2) and max(only_model.values()) == pytest.approx(1.0)
    half = mixed_relevance(local, {3}, cosines=cosines, weight=0.5)
    assert half[3] == 1.0  # a hard user constraint keeps the local scorer's word
    # Over the three others: local 0.2/0.6/0.4 -> 0/1/0.5, cosine 0.9/0.1/0.3 -> 1/0/0.25.
    assert half[1] == pytest.approx(0.2 + 0.5 * 0.4) and half[2] == pytest.approx(0.2 + 0.5 * 0.4)
    assert half[4] == pytest.approx(0.2 + 0.375 * 0.4)


def test_the_same_vectors_give_the_same_bytes(model: EmbeddingModel) -> None:
    messages = chat_messages()
    body = {"model": "gpt-4o-mini", "messages": messages}
    vectors = vectors_of(model, messages)
    runs = [prune(body, Policy(), scorer=SemanticScorer(LocalScorer(), dict(vectors)), counter=COUNTER,
                  steering=Steering(target_tokens=400)).request for _ in range(2)]
    assert runs[0] == runs[1]
