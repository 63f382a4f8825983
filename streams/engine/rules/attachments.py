"""Token estimates for image and file parts (spec §5.3, the original's sync path).

Everything here works on a part as a plain mapping with the wire's camelCase keys (`mimeType`,
`providerOptions`, ...), so the typed parts of a message and the loose blocks of a tool's
`modelOutput` go through the same rules.  Nothing is fetched: a URL-only image is estimated
from what the part says about itself, and image dimensions are read from the header of inline
bytes (PNG, JPEG, GIF, WebP) with the standard library only.

The estimate depends on the model that will read the attachment: the actor's, taken from the
message metadata, else the observer's model string (`ModelContext`).

* Google: Gemini 3 models are priced by `mediaResolution`; older ones 258 tokens per 768 px tile.
* Anthropic: `ceil(w*h/750)` after fitting the long edge into 1568 px, else by byte buckets.
* OpenAI and every other or unknown provider: `base + tiles*tile` by model family and detail.
* Non-image files: by byte size (PDFs per provider), else the caller counts a descriptor.

What the Observer model gets to see of the attachments is `observer_attachments`'.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = [
    "HTTP_URL",
    "ModelContext",
    "attachment_label",
    "base64_size",
    "client_token_estimate",
    "extension_of",
    "file_descriptor",
    "file_tokens_from_bytes",
    "image_dimensions",
    "image_tokens",
    "is_image_like_file",
    "model_context",
    "non_image_file_tokens",
    "url_path",
]

IMAGE_EXTENSIONS = frozenset({"png", "jpg", "jpeg", "webp", "gif", "bmp", "tiff", "tif", "heic", "heif", "avif"})

KIB = 1024
MIB = 1024 * 1024

#: OpenAI-style estimator per model family: (base, per tile, tiles when nothing is known).
_OPENAI_DEFAULT = (85, 170, 4)
_GOOGLE_TILE_TOKENS = 258
_GEMINI_3_BY_RESOLUTION = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240, "unspecified": 1120}
_ANTHROPIC_MAX_LONG_EDGE = 1568
_ANTHROPIC_TOKENS_PER_PIXEL = 1 / 750

# litellm provider prefixes that mean one of the three estimators.
_PROVIDER_ALIASES = {
    "google": "google", "gemini": "google", "vertex_ai": "google", "vertex_ai_beta": "google",
    "anthropic": "anthropic",
    "openai": "openai", "azure": "openai", "text-completion-openai": "openai",
}

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
HTTP_URL = re.compile(r"^https?://", re.IGNORECASE)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")
_EXTENSION = re.compile(r"\.([a-z0-9]+)$", re.IGNORECASE)


# --- model context ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModelContext:
    """The provider (`google`, `anthropic`, `openai` or anything else) and the model id."""

    provider: str | None
    model_id: str


def model_context(model: str | None, provider: str | None = None) -> ModelContext | None:
    """Parse `provider/model` (litellm or the original's form), with an explicit provider first.

    litellm prefixes map to the three estimators (`gemini/…`, `vertex_ai/…` are Google, `azure/…`
    OpenAI); a bare `gemini-*` or `claude-*` name, as litellm accepts them, implies its provider.
    Any other provider keeps its name and gets the OpenAI-style fallback.
    """
    model = (model or "").strip()
    if "/" in model:
        prefix, model = model.split("/", 1)
        provider = provider or prefix
        model = model.rsplit("/", 1)[-1]
    if not model and not provider:
        return None
    model_id = model.lower()
    name = (provider or "").strip().lower() or None
    if name is None:
        if model_id.startswith("gemini"):
            name = "google"
        elif model_id.startswith("claude"):
            name = "anthropic"
    return ModelContext(_PROVIDER_ALIASES.get(name, name) if name else None, model_id)


# --- small readers ----------------------------------------------------------------------------
def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _js_round(value: float) -> int:
    return math.floor(value + 0.5)


def _asset(part: Mapping[str, Any]) -> Any:
    for key in ("image", "data", "url"):
        if part.get(key) is not None:
            return part[key]
    return None


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and bool(_URL.match(value))


def client_token_estimate(part: Mapping[str, Any]) -> float | None:
    """A caller's pinned count, `providerMetadata.mastra.tokenEstimate` with `source: 'client'`.

    One entry (`{v: 0, source: 'client', key: 'client', tokens: N}`) or an object of entries
    keyed by their `key`; `tokens` must be a finite number ≥ 0.
    """
    cache = _get(part, "providerMetadata", "mastra", "tokenEstimate")
    if not isinstance(cache, Mapping):
        return None
    for entry in (cache, *cache.values()):
        if isinstance(entry, Mapping) and entry.get("source") == "client":
            tokens = entry.get("tokens")
            if (not isinstance(tokens, bool) and isinstance(tokens, int | float) and math.isfinite(tokens)
                    and tokens >= 0):
                return tokens
    return None


# --- bytes and dimensions ---------------------------------------------------------------------
def base64_size(encoded: str) -> int:
    """Decoded size of base64 text: `floor(len*3/4) - padding`, whitespace ignored."""
    clean = "".join(encoded.split())
    padding = 2 if clean.endswith("==") else 1 if clean.endswith("=") else 0
    return max(0, len(clean) * 3 // 4 - padding)


def _size_bytes(asset: Any) -> int | None:
    """Byte size of an inline asset; None for a URL or nothing."""
    if isinstance(asset, bytes | bytearray):
        return len(asset)
    if not isinstance(asset, str) or _is_url(asset):
        return None
    if asset.startswith("data:"):
        comma = asset.find(",")
        return base64_size(asset[comma + 1:] if comma != -1 else "")
    return base64_size(asset)


def _likely_base64(value: str) -> bool:
    if len(value) < 16 or len(value) % 4 or any(c.isspace() for c in value):
        return False
    if value.startswith(("/", "./", "../", "~/")) or _WINDOWS_PATH.match(value) or "\\" in value:
        return False
    return bool(_BASE64.match(value))


def _inline_prefix(asset: Any, limit: int) -> bytes | None:
    """Up to `limit` leading bytes of an inline asset (data URI, base64 text or bytes)."""
    if isinstance(asset, bytes | bytearray):
        return bytes(asset[:limit])
    if not isinstance(asset, str) or HTTP_URL.match(asset):
        return None
    if asset.startswith("data:"):
        comma = asset.find(",")
        if comma == -1:
            return None
        header, payload = asset[:comma], asset[comma + 1:]
        if ";base64" not in header.lower():
            return unquote(payload).encode()[:limit]
        payload = "".join(payload.split())
    elif _likely_base64(asset):
        payload = asset
    else:
        return None
    chars = min(len(payload), -(-limit // 3) * 4)
    chunk = payload[:chars - chars % 4] if chars < len(payload) else payload
    try:
        return base64.b64decode(chunk + "=" * (-len(chunk) % 4))[:limit]
    except (binascii.Error, ValueError):
        return None


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, WebP or JPEG header; None if unrecognised or cut short."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_dimensions(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_dimensions(data)
    return None


def _webp_dimensions(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


_JPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg_dimensions(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in _JPEG_FRAMES:
            if i + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def _dimensions(part: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """Width and height: declared on the part or its metadata, else read from inline bytes."""
    declared = _get(part, "providerMetadata", "mastra", "imageDimensions")
    width = _positive(part.get("width")) or _positive(part.get("imageWidth")) or _positive(_get(declared, "width"))
    height = (_positive(part.get("height")) or _positive(part.get("imageHeight"))
              or _positive(_get(declared, "height")))
    if width and height:
        return width, height
    asset = _asset(part)
    measured = None
    # A JPEG's frame header may follow large EXIF blocks: read more only when needed.
    for limit in (64 * KIB, 1 * MIB, None):
        head = _inline_prefix(asset, limit if limit is not None else 1 << 62)
        if head is None:
            break
        measured = image_dimensions(head)
        if measured is not None or head[:2] != b"\xff\xd8" or len(head) < (limit or 0):
            break
    if measured and measured[0] > 0 and measured[1] > 0:
        return width or measured[0], height or measured[1]
    return width, height


# --- images -----------------------------------------------------------------------------------
def _openai_config(model_id: str) -> tuple[int, int, int]:
    if model_id.startswith("gpt-5"):
        return 70, 140, 4
    if model_id.startswith("gpt-4o-mini"):
        return 2833, 5667, 1
    if model_id.startswith(("o1", "o3")):
        return 75, 150, 4
    if "computer-use" in model_id:
        return 65, 129, 4
    return _OPENAI_DEFAULT


def _detail(part: Mapping[str, Any]) -> str:
    """The first detail hint set anywhere on the part; `auto` unless it says low or high."""
    for value in (
        part.get("detail"), part.get("imageDetail"),
        _get(part, "providerOptions", "openai", "detail"), _get(part, "providerOptions", "openai", "imageDetail"),
        _get(part, "providerMetadata", "openai", "detail"), _get(part, "providerMetadata", "openai", "imageDetail"),
        _get(part, "providerMetadata", "mastra", "imageDetail"),
    ):
        if value is not None:
            return value if value in ("low", "high") else "auto"
    return "auto"


def _media_resolution(part: Mapping[str, Any]) -> str:
    for value in (
        part.get("mediaResolution"), _get(part, "providerOptions", "google", "mediaResolution"),
        _get(part, "providerMetadata", "google", "mediaResolution"),
        _get(part, "providerMetadata", "mastra", "mediaResolution"),
    ):
        if isinstance(value, str):
            value = value.lower().removeprefix("media_resolution_")
            if value in _GEMINI_3_BY_RESOLUTION:
                return value
    return "unspecified"


def _openai_tiles(width: float | None, height: float | None, size: int | None, fallback: int) -> int:
    if width and height:
        largest = max(width, height)
        if largest > 2048:
            width, height = width * (2048 / largest), height * (2048 / largest)
        shortest = min(width, height)
        if shortest > 768:
            width, height = width * (768 / shortest), height * (768 / shortest)
        width, height = max(1, _js_round(width)), max(1, _js_round(height))
        return max(1, math.ceil(width / 512) * math.ceil(height / 512))
    if size is not None:
        return 1 if size <= 512 * KIB else 4 if size <= 2 * MIB else 6 if size <= 4 * MIB else 8
    return fallback


def _anthropic_tokens(width: float | None, height: float | None, size: int | None) -> int:
    if width and height:
        largest = max(width, height)
        if largest > _ANTHROPIC_MAX_LONG_EDGE:
            ratio = _ANTHROPIC_MAX_LONG_EDGE / largest
            width, height = max(1, _js_round(width * ratio)), max(1, _js_round(height * ratio))
        return max(1, math.ceil(width * height * _ANTHROPIC_TOKENS_PER_PIXEL))
    if size is not None:
        return 341 if size <= 512 * KIB else 1366 if size <= 2 * MIB else 2048 if size <= 4 * MIB else 2731
    return 1600


def image_tokens(part: Mapping[str, Any], context: ModelContext | None) -> int:
    """Tokens of an image (or an image-like file) for the model in `context`."""
    provider = context.provider if context else None
    model_id = context.model_id if context else ""
    width, height = _dimensions(part)
    size = _size_bytes(_asset(part))
    if provider == "google":
        if model_id.startswith("gemini-3"):
            return _GEMINI_3_BY_RESOLUTION[_media_resolution(part)]
        tiles = math.ceil(width / 768) * math.ceil(height / 768) if width and height else 1
        return max(1, tiles) * _GOOGLE_TILE_TOKENS
    if provider == "anthropic":
        return _anthropic_tokens(width, height, size)
    base, tile, fallback = _openai_config(model_id)
    detail = _detail(part)
    if detail == "auto":
        if width and height:
            detail = "high" if max(width, height) > 768 else "low"
        else:
            detail = "high" if size is not None and size > MIB else "low"
    return base if detail == "low" else base + _openai_tiles(width, height, size, fallback) * tile


# --- files ------------------------------------------------------------------------------------
def extension_of(value: str) -> str:
    match = _EXTENSION.search(value.split("#", 1)[0].split("?", 1)[0])
    return match.group(1).lower() if match else ""


def url_path(value: Any) -> str | None:
    if not _is_url(value):
        return None
    try:
        path: str = urlsplit(value).path
    except ValueError:
        return None
    return path


def is_image_like_file(part: Mapping[str, Any]) -> bool:
    """A `file` part that holds an image: by mime type, `data:image/` URI, or URL/name extension."""
    if part.get("type") != "file":
        return False
    mime = part.get("mimeType")
    if isinstance(mime, str) and mime.lower().startswith("image/"):
        return True
    asset = _asset(part)
    if isinstance(asset, str) and asset.startswith("data:image/"):
        return True
    path = url_path(asset) if isinstance(asset, str) and HTTP_URL.match(asset) else None
    if path is not None and extension_of(path) in IMAGE_EXTENSIONS:
        return True
    filename = part.get("filename")
    return isinstance(filename, str) and extension_of(filename) in IMAGE_EXTENSIONS


def file_tokens_from_bytes(provider: str | None, mime_type: str | None, size: int) -> int:
    """A non-image file of `size` bytes: PDFs per provider, anything else a token per 4 bytes."""
    mime = (mime_type or "").lower().split(";", 1)[0].strip()
    if mime == "application/pdf":
        if provider == "google":
            return max(258, math.ceil(size / 20))
        if provider == "anthropic":
            return max(1500, math.ceil(size / 3))
        return max(500, math.ceil(size / 4))
    return max(1, math.ceil(size / 4))


def non_image_file_tokens(part: Mapping[str, Any], context: ModelContext | None) -> int | None:
    """Tokens of a non-image file with inline bytes; None when it is known by URL only."""
    size = _size_bytes(_asset(part))
    if size is None:
        return None
    return file_tokens_from_bytes(context.provider if context else None, _mime_type(part), size)


def _mime_type(part: Mapping[str, Any]) -> str:
    mime = part.get("mimeType")
    if isinstance(mime, str) and mime.strip():
        return mime.strip()
    asset = _asset(part)
    if isinstance(asset, str) and asset.startswith("data:"):
        ends = [i for i in (asset.find(";"), asset.find(",")) if i != -1]
        if ends and min(ends) > 5:
            return asset[5:min(ends)]
    return "application/octet-stream"


def _url_basename(value: Any) -> str | None:
    path = url_path(value)
    name = next((s for s in reversed((path or "").split("/")) if s), None)
    return unquote(name) if name else None


def file_descriptor(part: Mapping[str, Any]) -> dict[str, Any]:
    """What a URL-only file is counted as: `{type: 'file', mimeType, filename}`."""
    filename = part.get("filename")
    name = filename.strip() if isinstance(filename, str) and filename.strip() else _url_basename(_asset(part))
    return {"type": "file", "mimeType": part.get("mimeType"), "filename": name}


def attachment_label(part: Mapping[str, Any]) -> str | None:
    """The observer's placeholder label: file name, else URL basename, else mime type."""
    filename = part.get("filename")
    if isinstance(filename, str) and filename.strip():
        return filename.strip()
    mime = part.get("mimeType") if isinstance(part.get("mimeType"), str) and part.get("mimeType") else None
    asset = _asset(part)
    if not isinstance(asset, str) or asset.startswith("data:"):
        return mime
    return _url_basename(asset) or mime
