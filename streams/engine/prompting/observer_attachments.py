"""What the Observer model is sent of a message's images and files (spec §7.2, `observeAttachments`).

An `Attachment` (`state`) is kept per image or file of a pending message; `observer_user_content`
turns the ones the policy allows into litellm's (OpenAI's) content parts after the prompt text,
each named by the placeholder the transcript shows for it.  Whether a model takes attachments
at all (the "auto" policy) is a question for a model table; the caller passes the answer
(`Capability`), the engine reads no table itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

from ..rules.attachments import HTTP_URL, attachment_label, extension_of, is_image_like_file, url_path
from ..state import Attachment

__all__ = [
    "FORWARD_LIMIT",
    "OCTET_STREAM",
    "Attached",
    "AttachmentPolicy",
    "Capability",
    "attachment_of",
    "content_part",
    "forwarded_attachments",
    "mime_allowed",
    "observer_user_content",
    "placeholder_text",
    "unknown_capability",
]

#: The user message of one observer request stays under this many bytes, its text and its
#: forwarded attachments together.  A job is one record of `<ns>.jobs`, and the worker refuses
#: an input whose outputs pass 900 KiB (`omstream.pipeline.folding.MAX_OUTPUT_BYTES`): the step that starts the
#: cycle would be dead-lettered, and every later one, so the memory would never observe.  What
#: is left (260 KiB) is for the system prompt and the job's other fields.  An attachment that
#: does not fit is not sent (its placeholder stays in the transcript); later, smaller ones are.
FORWARD_LIMIT = 640 * 1024

#: `observation.observeAttachments` as resolved: true, false, "auto" or mime patterns.
AttachmentPolicy = bool | str | Sequence[str]
#: Whether a model takes image and file input: True, False, or None when nothing says.
Capability = Callable[[str], bool | None]


class Attached(Protocol):
    """A message as the observer request forwards it (`state.PendingMessage`, or anything that
    holds its attachments the same way)."""

    @property
    def attachments(self) -> tuple[Attachment, ...]: ...


OCTET_STREAM = "application/octet-stream"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# The first bytes of common image formats, base64-encoded: the mime type of bare base64 images.
_IMAGE_MAGIC = {"iVBORw0KGgo": "image/png", "/9j/": "image/jpeg", "R0lGOD": "image/gif", "UklGR": "image/webp"}
# A fixed table, not `mimetypes`: that one reads the host's files, and the fold must not differ
# from host to host.
_IMAGE_TYPES = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp",
                "gif": "image/gif", "bmp": "image/bmp", "tiff": "image/tiff", "tif": "image/tiff",
                "heic": "image/heic", "heif": "image/heif", "avif": "image/avif"}
_DETAILS: dict[str, Literal["low", "high", "auto"]] = {"low": "low", "high": "high", "auto": "auto"}
# What one forwarded attachment costs besides its URL: its naming text part and the JSON around.
_PART_OVERHEAD = 96


def placeholder_text(kind: str, number: int, label: str | None) -> str:
    """`[Image #1: cat.png]`, `[File #2]`: the transcript's name of an attachment."""
    title = "Image" if kind == "image" else "File"
    return f"[{title} #{number}: {label}]" if label else f"[{title} #{number}]"


def _text_field(part: Mapping[str, Any], key: str) -> str | None:
    value = part.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _data_uri_mime(asset: str) -> str | None:
    if not asset.startswith("data:"):
        return None
    header = asset[5:].split(",", 1)[0].split(";", 1)[0].strip()
    return header or None


def _image_mime(declared: str | None, asset: str, filename: str | None) -> str | None:
    """An image's type: declared if it says image/*, else from a data: URI, the first bytes of
    bare base64, or the URL's or file name's extension; else whatever was declared."""
    if declared and declared.lower().startswith("image/"):
        return declared
    from_uri = _data_uri_mime(asset)
    if from_uri and from_uri.lower().startswith("image/"):
        return from_uri
    if not _SCHEME.match(asset):
        sniffed = next((m for prefix, m in _IMAGE_MAGIC.items() if asset.startswith(prefix)), None)
        if sniffed:
            return sniffed
    for name in (url_path(asset) if HTTP_URL.match(asset) else None, filename):
        if name and extension_of(name) in _IMAGE_TYPES:
            return _IMAGE_TYPES[extension_of(name)]
    return declared or from_uri


def _requested_detail(part: Mapping[str, Any]) -> Literal["low", "high", "auto"] | None:
    """The part's own `detail`, else the OpenAI provider option; None leaves it to the provider."""
    options = part.get("providerOptions")
    openai = options.get("openai") if isinstance(options, Mapping) else None
    openai = openai if isinstance(openai, Mapping) else {}
    for hint in (part.get("detail"), openai.get("detail"), openai.get("imageDetail")):
        if isinstance(hint, str) and hint in _DETAILS:
            return _DETAILS[hint]
    return None


def attachment_of(part: Mapping[str, Any]) -> Attachment:
    """An image or file part (wire dict, camelCase; a message part or a lifted tool-result
    block) as an `Attachment`.  Bare base64 becomes a data: URI of its type (images: sniffed,
    else PNG; files: declared, else octet-stream); a URL or a data: URI is kept as it is."""
    asset = next((part[key] for key in ("image", "data", "url") if isinstance(part.get(key), str)), "")
    declared = _text_field(part, "mimeType")
    filename = part.get("filename") if isinstance(part.get("filename"), str) and part.get("filename") else None
    if part.get("type") == "image" or is_image_like_file(part):
        mime = _image_mime(declared, asset, filename)
        url = asset if _SCHEME.match(asset) else f"data:{mime or 'image/png'};base64,{asset}"
        return Attachment(kind="image", url=url, mime_type=mime, label=attachment_label(part),
                          filename=filename, detail=_requested_detail(part))
    mime = declared or _data_uri_mime(asset)
    url = asset if _SCHEME.match(asset) else f"data:{mime or OCTET_STREAM};base64,{asset}"
    return Attachment(kind="file", url=url, mime_type=mime, label=attachment_label(part), filename=filename)


def content_part(attachment: Attachment) -> dict[str, Any]:
    """The attachment as an OpenAI content part, as litellm takes it: `image_url` for images
    (image-like files too: OpenAI's `file` input takes documents only), `file` for the rest,
    inline bytes as `file_data`, a link as `file_id` with its type in `format` (litellm hands
    URLs to the providers that fetch them)."""
    if attachment.kind == "image":
        image_url: dict[str, Any] = {"url": attachment.url}
        if attachment.detail is not None:
            image_url["detail"] = attachment.detail
        return {"type": "image_url", "image_url": image_url}
    if attachment.url.startswith("data:"):
        file: dict[str, Any] = {"file_data": attachment.url}
    else:
        file = {"file_id": attachment.url, "format": attachment.mime_type or OCTET_STREAM}
    if attachment.filename:
        file["filename"] = attachment.filename
    return {"type": "file", "file": file}


def mime_allowed(patterns: Iterable[str], mime_type: str | None, kind: str = "file") -> bool:
    """Whether an allow-list lets an attachment through: case-insensitive exact types
    (`application/pdf`), wildcard subtypes (`image/*`) and a lone `*`.  An image (image-like
    files included) is `image/*` even when its exact type is unknown."""
    mime = (mime_type or "").split(";", 1)[0].strip().lower()
    for pattern in patterns:
        wanted = pattern.strip().lower()
        if wanted == "*" or (mime and wanted == mime):
            return True
        if wanted.endswith("/*"):
            major = wanted[:-2]
            if (mime and mime.split("/", 1)[0] == major) or (kind == "image" and major == "image"):
                return True
    return False


def unknown_capability(model: str) -> bool | None:
    """No model table: every model's capability is unknown (the engine reads none itself; the
    edge passes one, see `EngineConfig.takes_attachments`)."""
    return None


def _policy(policy: AttachmentPolicy, model: str, capability: Capability) -> Callable[[Attachment], bool]:
    """Which attachments `policy` forwards to `model`."""
    if policy is True or policy is False:
        return lambda _: policy
    if isinstance(policy, str):
        if policy != "auto":
            raise ValueError(f"observeAttachments {policy!r}: use true, false, 'auto' or mime patterns")
        # Unknown capability forwards: the documented choice, so a model missing from the
        # tables is not silently cut off from what the user shared.
        takes = capability(model) is not False
        return lambda _: takes
    patterns = tuple(policy)
    return lambda attachment: mime_allowed(patterns, attachment.mime_type, attachment.kind)


def _numbered(messages: Iterable[Attached]) -> list[tuple[str, Attachment]]:
    """Every attachment with its placeholder, numbered as the transcript numbers them: from 1
    in every observer call, images and files apart."""
    counts = {"image": 0, "file": 0}
    out: list[tuple[str, Attachment]] = []
    for message in messages:
        for attachment in message.attachments:
            counts[attachment.kind] += 1
            out.append((placeholder_text(attachment.kind, counts[attachment.kind], attachment.label), attachment))
    return out


def forwarded_attachments(messages: Sequence[Attached], policy: AttachmentPolicy, model: str, *,
                          room: int = FORWARD_LIMIT,
                          capability: Capability | None = None) -> list[tuple[str, Attachment]]:
    """The attachments of `messages` sent to the observer `model`, with their placeholders, in
    transcript order: those `policy` allows, as long as they fit in `room` bytes."""
    if policy is False or not any(m.attachments for m in messages):
        return []
    allowed = _policy(policy, model, capability or unknown_capability)
    chosen: list[tuple[str, Attachment]] = []
    for name, attachment in _numbered(messages):
        if not allowed(attachment):
            continue
        cost = len(attachment.url.encode()) + len(name.encode()) + _PART_OVERHEAD
        if cost > room:
            continue
        room -= cost
        chosen.append((name, attachment))
    return chosen


def observer_user_content(text: str, messages: Sequence[Attached], policy: AttachmentPolicy,
                          model: str, *, capability: Capability | None = None) -> str | list[dict[str, Any]]:
    """The observer's user message: `text` alone when no attachment is forwarded (the request,
    and its hash, are then exactly what they were before attachments were sent), else `text`
    and, after it, each forwarded attachment preceded by a text part naming its placeholder
    (`[Image #1: cat.png]`), so the model can tie it to its line of the transcript."""
    room = FORWARD_LIMIT - len(text.encode())
    chosen = forwarded_attachments(messages, policy, model, room=room, capability=capability)
    if not chosen:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for name, attachment in chosen:
        parts += [{"type": "text", "text": name}, content_part(attachment)]
    return parts
