"""Model calls as data: jobs on `<ns>.jobs`, results on the input log `<ns>.log`.

The fold never awaits a model.  It emits a `ModelJob` carrying the full request and its content
hash; a model agent runs it through litellm and answers with a `ModelResult` keyed by the same
memory key.  The fold checks the result against the head it was computed for (`cycleId`,
`generation`, `cursor`) before applying it: a result for a superseded head is recorded and
ignored, never applied twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = [
    "ChatMessage",
    "ContentPart",
    "FileContent",
    "FileReference",
    "ImageContent",
    "ImageUrl",
    "ModelCall",
    "TextContent",
    "JobKind",
    "JobTrigger",
    "ModelJob",
    "ModelResult",
    "Usage",
    "request_hash",
]

#: `observe`/`reflect` block the memory; `buffer`/`buffer-reflection` run in the background;
#: `extract` runs an extractor's structured follow-up.
JobKind = Literal["observe", "buffer", "reflect", "buffer-reflection", "extract"]
#: Why the job exists: a manual command, a threshold reached during a turn, or async buffering.
JobTrigger = Literal["manual", "turn-sync", "async-buffer"]


class _LitellmPart(BaseModel):
    """A content part in litellm's (OpenAI's) own shape: its snake_case names are the wire's,
    since a model agent hands the parts to litellm as they are."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class TextContent(_LitellmPart):
    """Text, within a message of parts."""

    type: Literal["text"]
    """Part kind: always `text`."""
    text: str
    """The text."""


class ImageUrl(_LitellmPart):
    """Where an image is."""

    url: NonEmptyStr
    """An `https` URL or a `data:` URI (`data:image/png;base64,...`)."""
    detail: Literal["low", "high", "auto"] | None = None
    """OpenAI image detail level. Absent leaves it to the provider."""


class ImageContent(_LitellmPart):
    """An image (an image-like file is sent as one)."""

    type: Literal["image_url"]
    """Part kind: always `image_url`."""
    image_url: ImageUrl
    """The image."""


class FileReference(_LitellmPart):
    """A file, inline or by reference: one of `file_data` and `file_id`."""

    file_data: str | None = None
    """The file's bytes as a `data:` URI (`data:application/pdf;base64,...`). Absent when the
    file is given by `file_id`."""
    file_id: str | None = None
    """A URL the provider fetches, or an id of a file uploaded to the provider. Absent when the
    file is inline."""
    filename: str | None = None
    """The file's name. Absent when unnamed."""
    format: str | None = None
    """The file's media type (`application/pdf`), for a file given by `file_id`. Absent when
    inline (the `data:` URI says it)."""


class FileContent(_LitellmPart):
    """A non-image file (a PDF, ...)."""

    type: Literal["file"]
    """Part kind: always `file`."""
    file: FileReference
    """The file."""


#: One part of a message of parts, in litellm's (OpenAI's) multimodal format.
ContentPart = Annotated[TextContent | ImageContent | FileContent, Field(discriminator="type")]


class ChatMessage(WireModel):
    """One message of a model request."""

    role: Literal["system", "user", "assistant"]
    """Who speaks: the prompt (`system`), the input (`user`) or an earlier answer (`assistant`)."""
    content: str | tuple[ContentPart, ...]
    """The message text, or a list of parts in litellm's (OpenAI's) format: text, `image_url`
    and `file` parts (an observer request forwards the attachments of the messages it covers
    this way, after its text)."""


class Usage(WireModel):
    """What the provider reported the call cost."""

    input_tokens: Count | None = None
    """Prompt size, in tokens. Absent when the provider did not report it."""
    output_tokens: Count | None = None
    """Answer size, in tokens. Absent when the provider did not report it."""
    total_tokens: Count | None = None
    """Prompt and answer together, in tokens. Absent when the provider did not report it."""


class ModelCall(WireModel):
    """One entry of a job's model list (a `ModelWithRetries` entry of the configuration)."""

    model: NonEmptyStr
    """The model to call, as litellm names it."""
    id: str | None = None
    """The entry's name from the configuration; the answer's `providerMetadata.omstream.modelId`
    when this entry answered. Absent when the entry has none."""
    max_retries: Count | None = None
    """Retries of this entry before the next is tried. Absent: the worker's `model_retries`."""
    settings: dict[str, Any] = {}
    """This entry's model settings, over the job's `settings`. Empty when none."""
    provider_options: dict[str, Any] | None = None
    """This entry's provider options, instead of the job's. Absent: the job's."""
    headers: dict[str, str] = {}
    """HTTP headers of this entry's calls (litellm `extra_headers`). Empty when none."""


class ModelJob(WireModel):
    """One model request, complete: a model agent needs nothing else to run it."""

    type: Literal["model-job"] = "model-job"
    """Record kind: always `model-job`."""
    schema_version: int = SCHEMA_VERSION
    """The wire-format version of the job. Absent means the current version."""
    kind: JobKind
    """What the call is for: `observe`, `reflect` (blocking), `buffer`, `buffer-reflection`
    (background) or `extract` (an extractor's follow-up)."""
    cycle_id: NonEmptyStr
    """The cycle the job belongs to; its events and result carry the same id."""
    memory_key: NonEmptyStr
    """The memory the job is for (`thread:<threadId>` or `resource:<resourceId>`); the result is
    keyed by it."""
    thread_id: NonEmptyStr
    """The thread whose step or command started the job."""
    generation: Count
    """The memory's generation (number of reflections so far) the request was built on; a result
    for another generation is ignored."""
    cursor: str | None = None
    """The memory's cursor when the request was built: the `createdAt` (ISO-8601) of the newest
    observed message. Absent before the first observation."""
    model: NonEmptyStr
    """The model to call, as litellm names it (`openai/gpt-4o-mini`)."""
    messages: tuple[ChatMessage, ...]
    """The complete prompt, in order."""
    settings: dict[str, Any] = {}
    """Model settings (`temperature`, `maxOutputTokens`, ...), passed to litellm. Empty when none."""
    provider_options: dict[str, Any] | None = None
    """Per-provider options keyed by provider (`{"google": {"thinkingConfig": ...}}`). Absent
    when none."""
    fallbacks: tuple[NonEmptyStr, ...] | None = None
    """Models to try, in order, when `model` keeps failing. Absent when there are none."""
    models: tuple[ModelCall, ...] | None = None
    """The configuration's model list with each entry's own retries, settings, provider options
    and headers, tried in order (`model` is its first entry; `fallbacks` is then absent). Absent
    when the list sets none of them: `model`, then `fallbacks`."""
    request_hash: NonEmptyStr
    """SHA-256 (hex) of model, messages, settings, provider options and fallbacks: equal requests
    may share one cached result."""
    created_at: Timestamp
    """When the fold emitted the job, ISO-8601 (event time)."""
    trigger: JobTrigger | None = None
    """Why the job exists: `manual` command, `turn-sync` threshold, or `async-buffer`. Absent on
    jobs from builds that did not record it."""
    input_tokens: Count | None = None
    """The size of what is being observed or reflected, in tokens. Absent when not counted."""
    sample: Count | None = None
    """Which answer to the same request is wanted: a request asked again on purpose (an
    observer answer that looped) is sample 1, so the cache does not hand back the answer that
    looped. Absent means 0."""
    version: NonEmptyStr | None = None
    """The memory version that made the job (`live` when absent); its result goes to it."""
    config_digest: NonEmptyStr | None = None
    """Digest of the configuration the job was built under: a version that follows the log
    applies results of its own digest wherever they come from. Absent on older jobs."""


class ModelResult(WireModel):
    """A model agent's answer to one job: the output, or the error after the last attempt."""

    type: Literal["model-result"] = "model-result"
    """Record kind: always `model-result`."""
    schema_version: int = SCHEMA_VERSION
    """The wire-format version of the result. Absent means the current version."""
    kind: JobKind
    """The kind of the job answered (see `model-job`)."""
    cycle_id: NonEmptyStr
    """The `cycleId` of the job answered."""
    memory_key: NonEmptyStr
    """The memory key of the job answered; the result is keyed by it."""
    thread_id: NonEmptyStr
    """The thread of the job answered."""
    request_hash: NonEmptyStr
    """The `requestHash` of the job answered."""
    ok: bool
    """True when the model answered (`output`), false when the last attempt failed (`error`)."""
    output: str | None = None
    """The model's answer text. Absent when the call failed."""
    error: str | None = None
    """Why the call failed (message, `HTTP <status>`, provider error; at most 2 000 characters).
    Absent when it succeeded."""
    error_code: str | None = None
    """What kind of failure `error` is (for example `timeout`, `rate-limited`). Absent when the
    call succeeded or the failure has no code."""
    error_status: int | None = Field(default=None, ge=100, le=599)
    """The HTTP status of the failure (429, 500, ...). Absent when it succeeded or there was no
    HTTP response."""
    model: NonEmptyStr
    """The model that answered (after any fallback), as litellm names it."""
    attempts: Count = 1
    """How many calls were made, retries and fallbacks included. Absent means 1."""
    usage: Usage | None = None
    """Token usage the provider reported. Absent when it reported none."""
    provider_metadata: dict[str, Any] | None = None
    """Provider details of the call (for example `litellm.provider`). Absent when none."""
    started_at: Timestamp
    """When the first attempt started, ISO-8601 (wall clock of the model agent)."""
    completed_at: Timestamp
    """When the last attempt ended, ISO-8601 (wall clock of the model agent)."""
    version: NonEmptyStr | None = None
    """The `version` of the job answered (`live` when absent)."""
    config_digest: NonEmptyStr | None = None
    """The `configDigest` of the job answered. Absent on older results."""
    cached: bool | None = None
    """True when the answer came from the model-result cache (an earlier call with the same
    `requestHash`), without a model call. Absent means a model call was made."""


def request_hash(model: str, messages: Sequence[ChatMessage], settings: dict[str, Any], *,
                 provider_options: dict[str, Any] | None = None,
                 fallbacks: Sequence[str] | None = None, sample: int = 0,
                 models: Sequence[ModelCall] | None = None) -> str:
    """Content hash of a model request: equal requests may share one cached result.

    Provider options, fallbacks and a sample number enter the hash only when given, so the
    hashes of requests without them are those earlier builds wrote.
    """
    body: dict[str, Any] = {"model": model, "messages": [m.wire() for m in messages], "settings": settings}
    if provider_options:
        body["providerOptions"] = provider_options
    if fallbacks:
        body["fallbacks"] = list(fallbacks)
    if models:
        body["models"] = [m.wire() for m in models]
    if sample:
        body["sample"] = sample
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
