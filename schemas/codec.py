"""Bytes to typed records and back; a record that cannot be read gets a named reason instead.

`decode_input` never raises: it returns the model, or a `DecodeFailure` whose `code` and
`reason` go to the dead-letter topic together with the original bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Union

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from .base import SCHEMA_VERSION, WireModel
from .control import StepStarted, TurnEnded
from .events import Event
from .jobs import ModelJob, ModelResult
from .messages import Message

__all__ = ["DecodeFailure", "decode_event", "decode_input", "decode_job", "encode"]

_Input = TypeAdapter(
    Annotated[Union[Message, StepStarted, TurnEnded, ModelResult], Field(discriminator="type")]
)
_Event = TypeAdapter(Event)


@dataclass(frozen=True)
class DecodeFailure:
    code: str  # not-json | unknown-type | newer-schema | invalid
    reason: str


def encode(model: WireModel) -> bytes:
    return orjson.dumps(model.wire(), option=orjson.OPT_SORT_KEYS)


def decode_input(raw: bytes | None) -> Message | StepStarted | TurnEnded | ModelResult | DecodeFailure:
    """A record of `<ns>.messages`, `<ns>.control` or `<ns>.results`."""
    try:
        data = orjson.loads(raw or b"")
    except orjson.JSONDecodeError as exc:
        return DecodeFailure("not-json", f"record is not JSON: {exc}")
    if not isinstance(data, dict):
        return DecodeFailure("invalid", "record must be a JSON object")
    data.setdefault("type", "message")
    kind = data["type"]
    if kind not in {"message", "step-started", "turn-ended", "model-result"}:
        return DecodeFailure("unknown-type", f"unknown record type {kind!r}")
    version = data.get("schemaVersion", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return DecodeFailure(
            "newer-schema",
            f"schemaVersion {version!r} is newer than this worker reads ({SCHEMA_VERSION}); upgrade omstream",
        )
    try:
        return _Input.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][1:]) or '(record)'}: {err['msg']}" for err in exc.errors()
        )
        return DecodeFailure("invalid", f"invalid {kind}: {problems}")


def decode_job(raw: bytes) -> ModelJob:
    return ModelJob.model_validate_json(raw)


def decode_event(raw: bytes):
    return _Event.validate_json(raw)
