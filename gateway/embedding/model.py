"""The sentence-embedding model: an ONNX encoder and its tokenizer, loaded from a directory.

    model = EmbeddingModel.load(Path("/opt/sieve/models/minilm-l6-int8"))   # or ModelUnavailable
    vectors = model.encode(["Caroline: I went to a support group", "When did she go?"])  # (2, 384), unit length

A directory holds ``model.onnx``, ``tokenizer.json`` and ``manifest.json`` (written by
``gateway.embedding.build``; a user may point ``SIEVE_EMBEDDING_MODEL_DIR`` at another
directory of the same shape: any BERT-like encoder whose graph takes ``input_ids`` and
``attention_mask`` and returns one pooled vector per row). Every file the manifest
names is checked against its SHA-256 before the runtime reads it: a truncated or
swapped file is refused at start-up with what was wrong, never half loaded.

onnxruntime runs on one thread per call (``intra_op_num_threads=1``): the background
worker's CPU share is its own business, not the runtime's thread pool's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gateway.errors import ConfigError

REQUIRED_FILES = ("model.onnx", "tokenizer.json", "manifest.json")
# Word pieces read per text: a message's head says what it is about, and the model's cost
# grows with its length (128 pieces: about a short paragraph, or a tool output's first lines).
DEFAULT_MAX_TOKENS = 128


class ModelUnavailable(ConfigError):
    """The model directory is missing, incomplete or corrupt (the message says which)."""


@dataclass(frozen=True, slots=True)
class Manifest:
    model_id: str
    dimensions: int
    max_tokens: int
    files: dict[str, str]   # file name -> SHA-256

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        path = folder / "manifest.json"
        try:
            raw = json.loads(path.read_text())
            return cls(str(raw["model_id"]), int(raw["dimensions"]), int(raw["max_tokens"]),
                       {str(k): str(v) for k, v in dict(raw["files"]).items()})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelUnavailable(f"{path}: not a readable model manifest ({exc})") from exc


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_directory(folder: Path) -> Manifest:
    """The directory's manifest, once every file is present and matches its checksum."""
    if not folder.is_dir():
        raise ModelUnavailable(f"embedding model directory {folder} does not exist "
                               "(build it: python -m gateway.embedding.build --out DIR)")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise ModelUnavailable(f"embedding model directory {folder} lacks {', '.join(missing)}")
    manifest = Manifest.read(folder)
    for name in ("model.onnx", "tokenizer.json"):
        expected = manifest.files.get(name)
        found = sha256_of(folder / name)
        if expected != found:
            raise ModelUnavailable(f"{folder / name}: SHA-256 {found} does not match the manifest's {expected} "
                                   "(a corrupt or replaced file)")
    return manifest


class EmbeddingModel:
    def __init__(self, manifest: Manifest, session: Any, tokenizer: Any) -> None:
        self.manifest = manifest
        self._session = session
        self._tokenizer = tokenizer

    @property
    def model_id(self) -> str:
        return self.manifest.model_id

    @property
    def max_tokens(self) -> int:
        """Word pieces read per text (the rest is cut)."""
        return self._tokenizer.truncation["max_length"]

    @classmethod
    def load(cls, folder: Path, max_tokens: int = DEFAULT_MAX_TOKENS) -> "EmbeddingModel":
        """The checked directory's model, ready to encode (``max_tokens``: word pieces read per
        text, at most the model's own limit)."""
        manifest = check_directory(folder)
        try:
            import onnxruntime  # noqa: PLC0415 - only where the embedding scorer is used
            from tokenizers import Tokenizer  # noqa: PLC0415

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(str(folder / "model.onnx"), options,
                                                   providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except ImportError as exc:
            raise ModelUnavailable(f"the embedding runtime is not installed ({exc.name})") from exc
        except Exception as exc:  # noqa: BLE001 - the runtime's own errors name no common type
            raise ModelUnavailable(f"{folder}: the model does not load ({exc})") from exc
        tokenizer.no_padding()
        tokenizer.enable_truncation(min(max_tokens, manifest.max_tokens))
        model = cls(manifest, session, tokenizer)
        model._check_output()
        return model

    def _check_output(self) -> None:
        probe = self.encode(["sieve"])
        if probe.shape != (1, self.manifest.dimensions) or not np.isfinite(probe).all():
            raise ModelUnavailable(f"model {self.model_id} answers {probe.shape}, not (1, {self.manifest.dimensions})")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 vector per text; texts of similar length share a batch."""
        encodings = self._tokenizer.encode_batch([t if t.strip() else "." for t in texts])
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), np.int64)
        mask = np.zeros((len(encodings), width), np.int64)
        for row, enc in enumerate(encodings):
            ids[row, :len(enc.ids)] = enc.ids
            mask[row, :len(enc.ids)] = 1
        return self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0].astype(np.float32)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]
