"""Bytes to typed records and back; a record that cannot be read gets a named reason instead.

`encode` is byte-stable (sorted keys, unset optional fields left out), so a record decoded and
encoded again is the same bytes: ids and hashes computed from encodings do not drift.
`decode_input` never raises: it returns the model, or a `DecodeFailure` whose `code` and
`reason` go to the dead-letter topic together with the original bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, get_args

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from .base import SCHEMA_VERSION, WireModel
from .control import Control
from .dead_letters import UnreadableCode
from .events import Event
from .jobs import ModelJob, ModelResult
from .messages import Message

__all__ = [
    "INPUT_TYPES", "DecodeFailure", "InputRecord",
    "decode_event", "decode_input", "decode_job", "encode",
]

#: A record of the input log `<ns>.log`.
InputRecord = Annotated[Message | Control | ModelResult, Field(discriminator="type")]
_Input = TypeAdapter(InputRecord)
_Event = TypeAdapter(Event)
_INPUT_CLASSES = (Message, *get_args(get_args(Control)[0]), ModelResult)
#: The `type`s `decode_input` reads; anything else is `unknown-type`.
INPUT_TYPES = frozenset(cls.model_fields["type"].default for cls in _INPUT_CLASSES)


@dataclass(frozen=True)
class DecodeFailure:
    code: UnreadableCode
    reason: str


def encode(model: WireModel) -> bytes:
    return orjson.dumps(model.wire(), option=orjson.OPT_SORT_KEYS)


def decode_input(raw: bytes | None) -> Message | Control | ModelResult | DecodeFailure:
    """A record of the input log `<ns>.log`; `type` defaults to message."""
    try:
        data = orjson.loads(raw or b"")
    except orjson.JSONDecodeError as exc:
        return DecodeFailure("not-json", f"record is not JSON: {exc}")
    if not isinstance(data, dict):
        return DecodeFailure("invalid", "record must be a JSON object")
    data.setdefault("type", "message")
    kind = data["type"]
    if not isinstance(kind, str) or kind not in INPUT_TYPES:
        return DecodeFailure("unknown-type", f"unknown record type {kind!r}; known: {', '.join(sorted(INPUT_TYPES))}")
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
    """A record of `<ns>.jobs`; raises `ValueError` (pydantic's) when it is not a valid job."""
    return ModelJob.model_validate_json(raw)


def decode_event(raw: bytes) -> Event:
    """A record of `<ns>.events`; raises `ValueError` (pydantic's) when it is not a valid event."""
    return _Event.validate_json(raw)
