"""Model calls as data: jobs on `<ns>.jobs`, results on `<ns>.results`.

The fold never awaits a model.  It emits a `ModelJob` carrying the full request and its content
hash; a model agent runs it through litellm and answers with a `ModelResult` keyed by the same
memory key.  The fold checks the result against the head it was computed for (`cycleId`,
`generation`, `cursor`) before applying it: a result for a superseded head is recorded and
ignored, never applied twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import Field

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = [
    "ChatMessage",
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


class ChatMessage(WireModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Usage(WireModel):
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    total_tokens: Count | None = None


class ModelJob(WireModel):
    """One model request, complete: a model agent needs nothing else to run it."""

    type: Literal["model-job"] = "model-job"
    schema_version: int = SCHEMA_VERSION
    kind: JobKind
    cycle_id: NonEmptyStr
    memory_key: NonEmptyStr
    thread_id: NonEmptyStr
    # The head the request was computed against; the result is applied only to this head.
    generation: Count
    cursor: str | None = None
    model: NonEmptyStr
    messages: tuple[ChatMessage, ...]
    settings: dict[str, Any] = {}
    provider_options: dict[str, Any] | None = None
    # Models to try, in order, when `model` keeps failing.
    fallbacks: tuple[NonEmptyStr, ...] | None = None
    request_hash: NonEmptyStr
    created_at: Timestamp
    trigger: JobTrigger | None = None
    input_tokens: Count | None = None


class ModelResult(WireModel):
    """A model agent's answer to one job: the output, or the error after the last attempt."""

    type: Literal["model-result"] = "model-result"
    schema_version: int = SCHEMA_VERSION
    kind: JobKind
    cycle_id: NonEmptyStr
    memory_key: NonEmptyStr
    thread_id: NonEmptyStr
    request_hash: NonEmptyStr
    ok: bool
    output: str | None = None
    error: str | None = None
    # What kind of failure `error` is (for example `timeout`, `rate-limited`), and its HTTP
    # status when there was one (429, 500, ...).
    error_code: str | None = None
    error_status: int | None = Field(default=None, ge=100, le=599)
    # The model that answered (after any fallback), as litellm names it.
    model: NonEmptyStr
    attempts: Count = 1
    usage: Usage | None = None
    provider_metadata: dict[str, Any] | None = None
    started_at: Timestamp
    completed_at: Timestamp


def request_hash(model: str, messages: Sequence[ChatMessage], settings: dict[str, Any], *,
                 provider_options: dict[str, Any] | None = None,
                 fallbacks: Sequence[str] | None = None) -> str:
    """Content hash of a model request: equal requests may share one cached result.

    Provider options and fallbacks enter the hash only when given, so the hashes of requests
    without them are those earlier builds wrote.
    """
    body: dict[str, Any] = {"model": model, "messages": [m.wire() for m in messages], "settings": settings}
    if provider_options:
        body["providerOptions"] = provider_options
    if fallbacks:
        body["fallbacks"] = list(fallbacks)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
