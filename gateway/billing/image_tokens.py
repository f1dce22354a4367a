"""What an image in a prompt is billed, in tokens, at most: part of a budget reservation.

Pure (no I/O): the size of an inline image is read from its first bytes; an image
given by URL is never fetched, so its size is unknown and the most its model's
rule can bill stands in.

::

    image_tokens("gpt-4o", detail="high", size=(1024, 1024))   # -> 765
    image_tokens("gpt-4o", detail="auto", size=None)            # -> 1445, the rule's maximum
    image_size(data_url_bytes)                                  # -> (width, height) or None

OpenAI's published rules (platform.openai.com, "Images and vision", calculating costs):

* **tiles** (gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3): ``detail: low`` costs the
  base; otherwise the image is fitted in 2048 x 2048, its short side scaled to 768,
  and each 512 px tile costs ``per_tile`` on top of the base. At most 2 x 4 tiles.
* **patches** (gpt-4.1-mini/nano, gpt-5-mini/nano, o4-mini): one token per 32 px
  patch, at most 1,536 patches, times a model multiplier; ``detail`` does not lower it.

Whether a small image is scaled *up* to a 768 px short side is not said; the
estimate takes the larger of both readings, so it never falls short. ``detail``
missing or ``auto`` counts as high (the provider may choose high).

Models with no published rule (other providers) get ``UNLISTED_MODEL_IMAGE_TOKENS``
per image: Anthropic's ceiling (an image is scaled to at most about 1.15
megapixels, about 1,600 tokens), above the gpt-4o rule's 1,445. That is an
estimate, not a promise: a provider billing an image more cannot be foreseen.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass

__all__ = ["UNLISTED_MODEL_IMAGE_TOKENS", "image_size", "image_tokens", "data_url_size"]

UNLISTED_MODEL_IMAGE_TOKENS = 1_600
_MAX_TILES_SIDE = 2048
_SHORT_SIDE = 768
_TILE = 512
_PATCH = 32
_MAX_PATCHES = 1536
# Enough of a base64 payload to reach a JPEG's frame header past its metadata segments.
_HEAD_B64_CHARS = 64 * 1024


@dataclass(frozen=True)
class _Tiles:
    base: int
    per_tile: int

    def tokens(self, detail: str, size: tuple[int, int] | None) -> int:
        if detail == "low":
            return self.base
        tiles = 8 if size is None else max(_tiles(*size, upscale=False), _tiles(*size, upscale=True))
        return self.base + self.per_tile * tiles


@dataclass(frozen=True)
class _Patches:
    multiplier: float

    def tokens(self, detail: str, size: tuple[int, int] | None) -> int:
        patches = _MAX_PATCHES if size is None else \
            min(math.ceil(size[0] / _PATCH) * math.ceil(size[1] / _PATCH), _MAX_PATCHES)
        return math.ceil(patches * self.multiplier)


# Most specific prefix first: "gpt-4o-mini" before "gpt-4o", "gpt-5-mini" before "gpt-5".
_RULES: tuple[tuple[str, _Tiles | _Patches], ...] = (
    ("gpt-4.1-mini", _Patches(1.62)), ("gpt-4.1-nano", _Patches(2.46)),
    ("gpt-5-mini", _Patches(1.62)), ("gpt-5-nano", _Patches(2.46)), ("o4-mini", _Patches(1.72)),
    ("gpt-4o-mini", _Tiles(2833, 5667)),
    ("gpt-5", _Tiles(70, 140)), ("o1", _Tiles(75, 150)), ("o3", _Tiles(75, 150)),
    ("computer-use", _Tiles(65, 129)),
    ("gpt-4o", _Tiles(85, 170)), ("chatgpt-4o", _Tiles(85, 170)), ("gpt-4.1", _Tiles(85, 170)),
    ("gpt-4.5", _Tiles(85, 170)), ("gpt-4-turbo", _Tiles(85, 170)), ("gpt-4-vision", _Tiles(85, 170)),
)


def image_tokens(model: str, detail: str | None, size: tuple[int, int] | None) -> int:
    """The most one image can be billed for ``model`` (``size`` = (width, height) if known)."""
    name = model.rsplit("/", 1)[-1].lower()
    for prefix, rule in _RULES:
        if name.startswith(prefix):
            return rule.tokens(detail if isinstance(detail, str) else "auto", size)
    return UNLISTED_MODEL_IMAGE_TOKENS


def _tiles(width: int, height: int, *, upscale: bool) -> int:
    w, h = float(max(width, 1)), float(max(height, 1))
    fit = min(1.0, _MAX_TILES_SIDE / max(w, h))
    w, h = w * fit, h * fit
    short = min(w, h)
    if short > _SHORT_SIDE or upscale:
        w, h = w * _SHORT_SIDE / short, h * _SHORT_SIDE / short
        refit = min(1.0, _MAX_TILES_SIDE / max(w, h))
        w, h = w * refit, h * refit
    return math.ceil(w / _TILE) * math.ceil(h / _TILE)


def data_url_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a ``data:image/...;base64,`` URL's image; None for anything else."""
    if not url.startswith("data:"):
        return None
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    chunk = payload[:_HEAD_B64_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        return image_size(base64.b64decode(chunk, validate=False))
    except (binascii.Error, ValueError):
        return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, GIF, JPEG or WebP image; None otherwise."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The frame header (SOF0..SOF15 but DHT, JPG, DAC) gives the size; other segments are skipped."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None
