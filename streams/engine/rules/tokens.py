"""Token counting: two interchangeable counters with the original's overheads.

`tokenx` reproduces the estimator the original uses (tokenx 1.3.0, for parity runs); `tiktoken`
counts exactly with `o200k_base` (the default).  Both add 3.8 tokens per message and 24 per
conversation, so thresholds mean the same under either.  Counts are taken once, at ingest, and
carry the counter's name.

Messages are counted part by part with the original's rules (spec §5.2); only the string
estimator differs between the two counters:

* text: the text;  reasoning and `data-*` parts: 0;
* tool call: name + arguments (a string as-is; an object as `JSON.stringify`, overhead -12);
* tool result: one more message (+3.8) + the name + what the model saw: `modelOutput` in
  `providerMetadata.mastra` first, else the multimodal `content`, else `result`; an empty one is
  `[empty result]` (an error without output: the error or `Tool execution failed`), a denial its
  reason or `Tool call was not approved by the user`; multimodal blocks one by one (attachments
  as attachments); objects as 2-space JSON with long `encryptedContent` stripped, overhead -12;
* image and file: the attachment estimators of `attachments` (spec §5.3), for the actor's model
  (message metadata), else the observer's model string passed in; a part's
  `providerMetadata.mastra.tokenEstimate` with `source: 'client'` is used verbatim.

`metadata.clientTokenEstimate`: a message that has attachments counts as that number, verbatim
(role and overheads included), under either counter; a message without attachments ignores it,
since its text is counted, not estimated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any, Protocol

from omstream.schemas.messages import FilePart, ImagePart, Message, TextPart, ToolCallPart, ToolResultPart

from .attachments import (
    ModelContext,
    client_token_estimate,
    file_descriptor,
    image_tokens,
    is_image_like_file,
    model_context,
    non_image_file_tokens,
)

__all__ = [
    "TOKENS_PER_CONVERSATION",
    "TOKENS_PER_MESSAGE",
    "Counter",
    "TiktokenCounter",
    "TokenxCounter",
    "actor_context",
    "attachment_tokens",
    "count_message",
    "count_messages",
    "count_text_message",
    "format_tool_result",
    "get_counter",
    "js_json",
    "js_length",
]

TOKENS_PER_MESSAGE = 3.8
TOKENS_PER_CONVERSATION = 24


class Counter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


# --- tokenx 1.3.0 -----------------------------------------------------------------------------
_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u30a0-\u30ff\u2e80-\u2eff\u31c0-\u31ef"
    "\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff]"
)
_PUNCT = r"[.,!?;(){}\[\]<>:/\\|@#$%^&*+=`~_-]"
_SPLIT = re.compile(rf"(\s+|{_PUNCT}+)")
_PUNCT_ANY = re.compile(_PUNCT)
_NUMERIC = re.compile(r"^[0-9]+(?:[.,][0-9]+)*$")
_WHITESPACE = re.compile(r"^\s+$")
_LANGUAGES = (
    (re.compile("[äöüßẞ]", re.IGNORECASE), 3.0),
    (re.compile("[éèêëàâîïôûùüÿçœæáíóúñ]", re.IGNORECASE), 3.0),
    (re.compile("[ąćęłńóśźżěščřžýůúďťň]", re.IGNORECASE), 3.5),
)


def _js_length(segment: str) -> int:
    """`String.prototype.length`: UTF-16 code units, so an emoji counts 2."""
    return len(segment) + sum(1 for ch in segment if ord(ch) > 0xFFFF)


@lru_cache(maxsize=1 << 16)
def _segment_tokens(segment: str) -> int:
    # Cached: words repeat, and the regular expressions below cost far more than a lookup.
    if _WHITESPACE.match(segment):
        return 0
    if _CJK.search(segment):
        return len(segment)
    if _NUMERIC.match(segment):
        return 1
    length = _js_length(segment)
    if length <= 3:
        return 1
    if _PUNCT_ANY.search(segment):
        return math.ceil(length / 2)
    for pattern, chars_per_token in _LANGUAGES:
        if pattern.search(segment):
            return math.ceil(length / chars_per_token)
    return math.ceil(length / 6)


class TokenxCounter:
    """The tokenx heuristic estimator, segment by segment."""

    name = "tokenx"

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > _LONG_TEXT and "\n" in text:
            # A newline is whitespace (0 tokens) and always ends a segment, so a text counts
            # as the sum of its lines.  The observation log is counted again at every observer
            # call and every cycle's end; counting its lines once each keeps that cost
            # independent of the log's length.
            return sum(_tokenx_line(line) for line in text.split("\n"))
        return _tokenx(text)


#: Texts longer than this (characters) are counted line by line, with cached line counts.
_LONG_TEXT = 2048


def _tokenx(text: str) -> int:
    return sum(map(_segment_tokens, filter(None, _SPLIT.split(text))))


@lru_cache(maxsize=1 << 16)
def _tokenx_line(line: str) -> int:
    return _tokenx(line)


# --- tiktoken ---------------------------------------------------------------------------------
class TiktokenCounter:
    """Exact BPE counts with tiktoken (`o200k_base` by default)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        import tiktoken  # its encoding files: the package's start-up points it at them (omstream.__init__)

        self._encoding = tiktoken.get_encoding(encoding)
        self.name = f"tiktoken:{encoding}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text, disallowed_special=()))


@cache
def get_counter(name: str) -> Counter:
    """`tokenx`, `tiktoken` (o200k_base) or `tiktoken:<encoding>`."""
    if name == "tokenx":
        return TokenxCounter()
    if name == "tiktoken":
        return TiktokenCounter()
    if name.startswith("tiktoken:"):
        return TiktokenCounter(name.split(":", 1)[1])
    raise ValueError(f"unknown token counter {name!r}: use 'tiktoken' or 'tokenx'")


# --- JSON as JavaScript writes it -------------------------------------------------------------
def _js_value(value: Any) -> Any:
    """JSON-ready data with JavaScript's number forms (`1.0` -> `1`, NaN/Infinity -> null)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, Mapping):
        return {str(k): _js_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_js_value(v) for v in value]
    return value


def js_json(value: Any, *, indent: int | None = None) -> str:
    """`JSON.stringify(value)` (or `JSON.stringify(value, null, indent)`): keys in insertion order,
    no ASCII escaping, compact separators."""
    if indent is None:
        return json.dumps(_js_value(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return json.dumps(_js_value(value), ensure_ascii=False, indent=indent, default=str)


def js_length(text: str) -> int:
    """`String.prototype.length`: UTF-16 code units."""
    return _js_length(text)


_ENCRYPTED_KEY = "encryptedContent"
_ENCRYPTED_MAX = 256


def _strip_encrypted(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, entry in value.items():
            if key == _ENCRYPTED_KEY and isinstance(entry, str) and _js_length(entry) > _ENCRYPTED_MAX:
                out[key] = f"[stripped encryptedContent: {_js_length(entry)} characters]"
            else:
                out[key] = _strip_encrypted(entry)
        return out
    if isinstance(value, list | tuple):
        return [_strip_encrypted(v) for v in value]
    return value


def format_tool_result(value: Any) -> str:
    """A tool result as counted and shown: a string as-is, anything else as 2-space JSON with
    long `encryptedContent` strings replaced by a marker."""
    if isinstance(value, str):
        return value
    return js_json(_strip_encrypted(value), indent=2)


# --- messages ---------------------------------------------------------------------------------
EMPTY_RESULT = "[empty result]"
TOOL_FAILED = "Tool execution failed"
TOOL_DENIED = "Tool call was not approved by the user"
_JSON_OVERHEAD = -12  # JSON arguments or results: the structure costs less than the estimate


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, list | tuple) and not value)


def tool_result_value(part: ToolResultPart) -> tuple[Any, bool]:
    """What the model saw as the result: `providerMetadata.mastra.modelOutput` when present, else
    the multimodal `content` blocks (as wire dicts), else `result`.  The flag says `content`."""
    mastra = (part.provider_metadata or {}).get("mastra")
    if isinstance(mastra, Mapping) and "modelOutput" in mastra:
        return mastra["modelOutput"], False
    if part.content is not None:
        return [block.model_dump(by_alias=True, exclude_none=True) for block in part.content], True
    return part.result, False


def denial_reason(part: ToolResultPart) -> str:
    if part.error:
        return part.error
    return part.result if isinstance(part.result, str) and part.result else TOOL_DENIED


def is_tool_error(part: ToolResultPart) -> bool:
    return bool(part.is_error) or part.error is not None


def multimodal_blocks(value: Any) -> list[Any] | None:
    """The block list of a multimodal result (`{type: 'content', value: [...]}` or `{content: [...]}`)."""
    if isinstance(value, Mapping):
        blocks = value.get("value") if value.get("type") == "content" else value.get("content")
        return blocks if isinstance(blocks, list) else None
    return None


def block_attachment(block: Any) -> dict[str, Any] | None:
    """A tool-result block that is an attachment, as an `image` or `file` part; else None."""
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    media = block.get("mediaType") or block.get("mimeType")
    asset = next((block[k] for k in ("data", "image", "url") if isinstance(block.get(k), str)), None)
    extra = {k: block[k] for k in ("providerOptions", "providerMetadata", "width", "height", "detail",
                                   "imageDetail", "mediaResolution") if k in block}
    if asset is None:
        return None
    is_image = kind in ("image", "image-data", "image-url") or (
        kind == "media" and isinstance(media, str) and media.lower().startswith("image/"))
    if is_image:
        return {"type": "image", "image": asset, "mimeType": media, "filename": block.get("filename"), **extra}
    if kind in ("file", "file-data", "file-url", "audio", "media"):
        return {"type": "file", "data": asset, "mimeType": media, "filename": block.get("filename"), **extra}
    return None


def attachment_tokens(part: Mapping[str, Any], counter: Counter, context: ModelContext | None) -> float:
    """An image or file part (wire dict): the caller's pinned estimate, else the §5.3 rules."""
    pinned = client_token_estimate(part)
    if pinned is not None:
        return pinned
    if part.get("type") == "image" or is_image_like_file(part):
        return image_tokens(part, context)
    by_bytes = non_image_file_tokens(part, context)
    if by_bytes is not None:
        return by_bytes
    return counter.count(js_json(file_descriptor(part)))


def _blocks_tokens(blocks: list[Any], counter: Counter, context: ModelContext | None, *, always: bool) -> float | None:
    """Block by block (attachments as attachments); None when no block is an attachment and
    `always` is off, so the caller counts the whole value as JSON instead."""
    tokens: float = 0
    attached = False
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            text = block.get("text")
            tokens += counter.count(text if isinstance(text, str) else str(block.get("value") or ""))
            continue
        attachment = block_attachment(block)
        if attachment is not None:
            attached = True
            tokens += attachment_tokens(attachment, counter, context)
        else:
            tokens += counter.count(format_tool_result(block))
    return tokens if attached or always else None


def _signature(name: str, args: Any, counter: Counter) -> tuple[float, float]:
    """A tool call's name and arguments; JSON arguments lower the overhead by 12."""
    tokens = counter.count(name)
    if isinstance(args, str):
        return tokens + (counter.count(args) if args else 0), 0
    if args is None:
        return tokens, 0
    return tokens + counter.count(js_json(args)), _JSON_OVERHEAD


def _tool_result_tokens(part: ToolResultPart, counter: Counter, context: ModelContext | None) -> tuple[float, float]:
    tokens, overhead = _signature(part.tool_name, None, counter)
    overhead += TOKENS_PER_MESSAGE  # the result travels as a message of its own
    if part.denied:
        return tokens + counter.count(denial_reason(part)), overhead
    value, typed_blocks = tool_result_value(part)
    if _is_empty(value):
        text = (part.error or TOOL_FAILED) if is_tool_error(part) else EMPTY_RESULT
        return tokens + counter.count(text), overhead
    if is_tool_error(part) and part.error:
        tokens += counter.count(part.error)
    if isinstance(value, str):
        return tokens + counter.count(value), overhead
    blocks = value if typed_blocks else multimodal_blocks(value)
    counted = _blocks_tokens(blocks, counter, context, always=typed_blocks) if blocks is not None else None
    if counted is None:
        counted = counter.count(format_tool_result(value))
    return tokens + counted, overhead + _JSON_OVERHEAD


def has_attachments(message: Message) -> bool:
    """An image or file part, at the top level or in a tool result's `content`."""
    if isinstance(message.content, str):
        return False
    for part in message.content:
        if isinstance(part, ImagePart | FilePart):
            return True
        if isinstance(part, ToolResultPart) and any(isinstance(b, ImagePart | FilePart) for b in part.content or ()):
            return True
    return False


def actor_context(message: Message, model: str | None = None) -> ModelContext | None:
    """The model that reads the attachments: the message's `provider`/`model`, else `model`."""
    meta = message.metadata
    if meta is not None and (meta.model or meta.provider):
        return model_context(meta.model, meta.provider)
    return model_context(model)


def count_message(message: Message, counter: Counter, model: str | None = None) -> int:
    """Tokens of one message: role + payload + the per-message overhead, rounded (spec §5.2).

    `model` is the observer's model string: the attachment estimators use it when the message
    metadata names no provider or model.  A message with attachments that carries
    `metadata.clientTokenEstimate` counts as that number, verbatim (the caller knows what the
    attachments cost); a message without attachments ignores it.
    """
    meta = message.metadata
    if meta is not None and meta.client_token_estimate is not None and has_attachments(message):
        return meta.client_token_estimate
    payload: float = counter.count(message.role)
    overhead: float = TOKENS_PER_MESSAGE
    if isinstance(message.content, str):
        payload += counter.count(message.content)
    else:
        context = actor_context(message, model)
        for part in message.content:
            if isinstance(part, TextPart):
                payload += counter.count(part.text)
            elif isinstance(part, ImagePart | FilePart):
                payload += attachment_tokens(part.model_dump(by_alias=True, exclude_none=True), counter, context)
            elif isinstance(part, ToolCallPart):
                tokens, delta = _signature(part.tool_name, part.args, counter)
                payload, overhead = payload + tokens, overhead + delta
            elif isinstance(part, ToolResultPart):
                tokens, delta = _tool_result_tokens(part, counter, context)
                payload, overhead = payload + tokens, overhead + delta
            # reasoning and data-* parts count 0
    return max(0, math.floor(payload + overhead + 0.5))


def count_text_message(role: str, text: str, counter: Counter) -> int:
    """Tokens of a message of one text part (spec §5.2): what the original counts for a
    temporal-gap marker, stored as a `signal` message whose part is the reminder's contents."""
    return max(0, math.floor(counter.count(role) + counter.count(text) + TOKENS_PER_MESSAGE + 0.5))


def count_messages(counts: list[int]) -> int:
    """A conversation of messages with these counts: their sum plus the conversation overhead."""
    return TOKENS_PER_CONVERSATION + sum(counts) if counts else 0
