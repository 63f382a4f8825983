"""Model calls as data: jobs on `<ns>.jobs`, results on `<ns>.results`.

The fold never awaits a model.  It emits a `ModelJob` carrying the full request and its content
hash; a model agent runs it through litellm and answers with a `ModelResult` keyed by the same
memory key.  The fold checks the result against the head it was computed for (`cycleId`,
`generation`, `cursor`) before applying it: a result for a superseded head is recorded and
ignored, never applied twice.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import orjson

from .base import SCHEMA_VERSION, WireModel

__all__ = ["ChatMessage", "JobKind", "ModelJob", "ModelResult", "Usage", "request_hash"]

JobKind = Literal["observe", "buffer", "reflect", "buffer-reflection"]


class ChatMessage(WireModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Usage(WireModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


class ModelJob(WireModel):
    type: Literal["model-job"] = "model-job"
    schema_version: int = SCHEMA_VERSION
    kind: JobKind
    cycle_id: str
    memory_key: str
    thread_id: str
    generation: int
    cursor: str | None = None
    model: str
    messages: tuple[ChatMessage, ...]
    settings: dict[str, Any] = {}
    request_hash: str
    created_at: datetime


class ModelResult(WireModel):
    type: Literal["model-result"] = "model-result"
    schema_version: int = SCHEMA_VERSION
    kind: JobKind
    cycle_id: str
    memory_key: str
    thread_id: str
    request_hash: str
    ok: bool
    output: str | None = None
    error: str | None = None
    model: str
    attempts: int = 1
    usage: Usage | None = None
    provider_metadata: dict[str, Any] | None = None
    started_at: datetime
    completed_at: datetime


def request_hash(model: str, messages: tuple[ChatMessage, ...], settings: dict[str, Any]) -> str:
    """Content hash of a model request: equal requests may share one cached result."""
    body = orjson.dumps(
        {"model": model, "messages": [m.wire() for m in messages], "settings": settings},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(body).hexdigest()
