"""The embedding scorer in the gateway, on the real weights: loading, caching, fallback.

A conversation is first scored by the local scorer alone (its history has no vectors
yet, and the request does not wait), its messages go to the background worker, and the
conversation's next decision mixes the model's relevance in. Each message is embedded
once. A decision taken cold stays frozen. A missing or corrupt model directory is a
start-up error under ``embedding_required: true``, else a logged fallback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from gateway.embedding.model import EmbeddingModel, ModelUnavailable, check_directory
from gateway.errors import ConfigError
from gateway.api.services import Services
from gateway.config.settings import Settings
from tests.support.embedding import ANSWER, chat_messages, copy_of_model, model_dir
from tests.support.gateway_server import GatewayServer
from tests.support.redis_server import RedisServer, skip_without_redis
from tests.support import metric_value, wait_until

MODEL = "gpt-4o-mini"
TARGET = 420  # about 30 % of the chat
EMBEDDING_POLICY = "strategy: relevance\nscorer: embedding\nexpand_tool: false\n"


def policies(tmp_path: Path, extra: str = "") -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "default.yaml").write_text(EMBEDDING_POLICY + extra)
    return folder


def prune(gw: GatewayServer, messages: list[dict], conversation: str | None = None) -> dict:
    headers = {"x-sieve-target-tokens": str(TARGET)}
    if conversation:
        headers["x-sieve-conversation-id"] = conversation
    resp = gw.post("/v1/prune", json={"model": MODEL, "messages": messages}, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


def decisions(gw: GatewayServer, outcome: str) -> float:
    return metric_value(gw.metrics, "sieve_embedding_decisions_total", outcome=outcome)


def embedded(gw: GatewayServer, outcome: str = "embedded") -> float:
    return metric_value(gw.metrics, "sieve_embedding_messages_total", outcome=outcome)


def wait_embedded(gw: GatewayServer) -> None:
    assert wait_until(lambda: gw.services.embedder.idle(), timeout_s=60.0, interval_s=0.05)


def kept_answer(answer: dict) -> bool:
    return any(ANSWER in (m.get("content") or "") for m in answer["request"]["messages"])


# -- the model directory ----------------------------------------------------------------

def test_the_built_model_embeds_by_meaning() -> None:
    model = EmbeddingModel.load(model_dir())
    found = model.encode(["A man is eating food.", "A man is eating a piece of bread.", "The girl carries a baby."])
    assert found.shape == (3, 384)
    assert np.allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-3)
    similar, unrelated = float(found[0] @ found[1]), float(found[0] @ found[2])
    assert similar > 0.7 and unrelated < 0.2


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=f"{tmp_path / 'nowhere'} does not exist"):
        EmbeddingModel.load(tmp_path / "nowhere")


def test_a_corrupt_or_incomplete_directory_is_refused(tmp_path: Path) -> None:
    folder = copy_of_model(tmp_path)
    check_directory(folder)
    with (folder / "model.onnx").open("r+b") as fh:  # one byte of the weights changed
        fh.seek(4096)
        byte = fh.read(1)
        fh.seek(4096)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelUnavailable, match="model.onnx: SHA-256 .* does not match the manifest"):
        EmbeddingModel.load(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(ModelUnavailable, match="lacks manifest.json"):
        EmbeddingModel.load(folder)


async def test_a_policy_that_requires_the_model_refuses_to_start_without_it(tmp_path: Path) -> None:
    settings = Settings(policies_dir=policies(tmp_path, "embedding_required: true\n"),
                        embedding_model_dir=tmp_path / "missing")
    with pytest.raises(ConfigError, match="does not exist .*embedding_required: true"):
        await Services.start(settings)


def test_without_the_model_the_local_scorer_decides_and_it_is_logged(tmp_path: Path, upstream,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sieve.services")
    settings = Settings(upstream_base_url=upstream.base_url, policies_dir=policies(tmp_path),
                        embedding_model_dir=tmp_path / "missing")
    with GatewayServer(settings) as gw:
        answer = prune(gw, chat_messages())
        assert gw.services.embedder is None
        assert answer["report"]["mode"] == "stateless"
        assert decisions(gw, "unavailable") == 1
    assert any("scores with the local scorer alone" in r.getMessage() for r in caplog.records)


# -- caching and the background worker ---------------------------------------------------

def test_a_cold_history_is_scored_locally_then_mixed_once_embedded(tmp_path: Path, upstream) -> None:
    messages = chat_messages()
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=policies(tmp_path))) as gw:
        first = prune(gw, messages)
        assert decisions(gw, "cold") == 1 and not kept_answer(first)
        wait_embedded(gw)
        # Every message with text once; the question was embedded on the request path.
        assert embedded(gw) == len(messages) - 1
        again = prune(gw, messages[:-1] + [{"role": "user", "content": "Which animal did Maria bring home?"}])
        assert decisions(gw, "mixed") == 1 and kept_answer(again)
        wait_embedded(gw)
        assert embedded(gw) == len(messages) - 1  # nothing embedded twice
        assert metric_value(gw.metrics, "sieve_embedding_cpu_seconds_total") > 0


def test_a_decision_taken_cold_stays_frozen_when_the_vectors_arrive(tmp_path: Path, upstream) -> None:
    messages = chat_messages()
    with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=policies(tmp_path))) as gw:
        first = prune(gw, messages, conversation="frozen-1")
        # Forwarded, the decision is the conversation's plan (a dry run writes none).
        sent = gw.post("/v1/chat/completions", json={"model": MODEL, "messages": messages},
                       headers={"x-sieve-target-tokens": str(TARGET), "x-sieve-conversation-id": "frozen-1"})
        assert sent.status_code == 200 and upstream.requests[-1].json["messages"] == first["request"]["messages"]
        wait_embedded(gw)
        more = messages + [{"role": "assistant", "content": "Let me think."}, {"role": "user", "content": "Go on."}]
        second = prune(gw, more, conversation="frozen-1")
        assert second["report"]["mode"] == "frozen"
        assert second["request"]["messages"][:len(first["request"]["messages"])] == first["request"]["messages"]
        assert decisions(gw, "mixed") == 0


@pytest.mark.redis
def test_replicas_share_vectors_through_redis(tmp_path: Path, upstream) -> None:
    skip_without_redis()
    messages = chat_messages()
    with RedisServer() as redis:
        settings = Settings(upstream_base_url=upstream.base_url, policies_dir=policies(tmp_path),
                            redis_url=redis.url)
        with GatewayServer(settings) as first:
            prune(first, messages)
            wait_embedded(first)
            assert embedded(first) == len(messages) - 1
        with GatewayServer(settings) as second:
            prune(second, messages)
            wait_embedded(second)
            assert embedded(second, "shared") == len(messages) - 1 and embedded(second) == 0
            again = prune(second, messages[:-1] + [{"role": "user", "content": "Which animal did Maria bring home?"}])
            assert decisions(second, "mixed") == 1 and kept_answer(again)
