"""Every wire type survives encode -> decode -> encode, byte for byte and as an equal model.

Instances are generated from the models' own field declarations (types, bounds, patterns), so a
field or a type added later is covered without touching this file; the one cross-field rule a
declaration cannot express (a file part has exactly one source) gets an explicit strategy.
`wire_instances` is shared with the JSON Schema tests, which check the same instances against
the exported schema files.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from omstream.schemas.base import SCHEMA_VERSION, WireModel
from omstream.schemas.codec import DecodeFailure, decode_event, decode_input, decode_job, encode
from omstream.schemas.control import Control
from omstream.schemas.events import EVENT_TYPES, EventEnvelope
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.messages import FilePart, Message, MessageMetadata, MessagePart

__all__ = ["PART_CLASSES", "WIRE_CLASSES", "decode_as", "wire_instances"]

PART_CLASSES: tuple[type[WireModel], ...] = tuple(get_args(m)[0] for m in get_args(get_args(MessagePart)[0]))
CONTROL_CLASSES: tuple[type[WireModel], ...] = get_args(get_args(Control)[0])
#: Every top-level record type of every topic, plus every message part on its own.
WIRE_CLASSES: tuple[type[WireModel], ...] = (
    *PART_CLASSES, Message, *CONTROL_CLASSES, ModelJob, ModelResult, *EVENT_TYPES.values(),
)

_PARTS = TypeAdapter(MessagePart)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
# Offsets that ISO-8601 writes exactly (no seconds); the instants stay well inside datetime's range.
_ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
_TIMES = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=_ZONES)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
# Fields whose value is fixed by the format rather than free.
_BY_NAME: dict[str, st.SearchStrategy] = {"schema_version": st.just(SCHEMA_VERSION)}


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    """Bounds, lengths and patterns from pydantic/annotated-types metadata."""
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found.update(_constraints(item.metadata))
            continue
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            value = getattr(item, name, None)
            if value is not None:
                found[name] = value
    return found


def _strategy(tp: Any, metadata: list[Any] = ()) -> st.SearchStrategy:
    limits = _constraints(list(metadata))
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extra = get_args(tp)
        return _strategy(base, [*metadata, *extra])
    if tp is Any:
        return _JSON
    if tp is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin in (Union, types.UnionType):
        return st.one_of([_strategy(arg, metadata) for arg in get_args(tp)])
    if origin is tuple:
        return st.lists(_strategy(get_args(tp)[0]), max_size=3).map(tuple)
    if origin is list:
        return st.lists(_strategy(get_args(tp)[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_TEXT, _strategy(get_args(tp)[1]), max_size=3)
    if tp is bool:
        return st.booleans()
    if tp is int:
        low = limits.get("ge", limits["gt"] + 1 if "gt" in limits else -(2**31))
        high = limits.get("le", limits["lt"] - 1 if "lt" in limits else 2**31)
        return st.integers(low, high)
    if tp is str:
        if "pattern" in limits:
            return st.from_regex(limits["pattern"], alphabet=st.characters(blacklist_categories=("Cs",)))
        return st.text(st.characters(blacklist_categories=("Cs",)), min_size=limits.get("min_length", 0), max_size=12)
    if tp is datetime:
        return _TIMES
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return wire_instances(tp)
    raise TypeError(f"no strategy for {tp!r}: extend _strategy")


def _fields(cls: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    required, optional = {}, {}
    for name, info in cls.model_fields.items():
        strategy = _BY_NAME[name] if name in _BY_NAME else _strategy(info.annotation, info.metadata)
        (required if info.is_required() else optional)[name] = strategy
    return st.fixed_dictionaries(required, optional=optional)


def _file_parts() -> st.SearchStrategy[FilePart]:
    source = st.sampled_from(["data", "url"]).flatmap(
        lambda key: _strategy(FilePart.model_fields[key].annotation).filter(bool).map(lambda v: {key: v}))
    return st.tuples(_fields(FilePart), source).map(
        lambda pair: FilePart(**{**{k: v for k, v in pair[0].items() if k not in ("data", "url")}, **pair[1]}))


def _metadata() -> st.SearchStrategy[MessageMetadata]:
    # Extra keys pass through; prefixed so they never collide with a typed key or its alias.
    extras = st.dictionaries(st.text("abcxyz", min_size=1, max_size=5).map(lambda k: f"x-{k}"),
                             _JSON.filter(lambda v: v is not None), max_size=2)
    return st.tuples(_fields(MessageMetadata), extras).map(lambda pair: MessageMetadata(**pair[0], **pair[1]))


_EXPLICIT: dict[type[BaseModel], Callable[[], st.SearchStrategy]] = {
    FilePart: _file_parts,
    MessageMetadata: _metadata,
}


def wire_instances(cls: type[BaseModel]) -> st.SearchStrategy:
    """Valid instances of `cls`, built from its field declarations."""
    if cls in _EXPLICIT:
        return st.deferred(_EXPLICIT[cls])
    return _fields(cls).map(lambda kwargs: cls(**kwargs))


def decode_as(cls: type[WireModel], raw: bytes) -> WireModel:
    """Decode `raw` with the decoder its topic uses."""
    if cls in PART_CLASSES:
        return _PARTS.validate_json(raw)
    if cls is ModelJob:
        return decode_job(raw)
    if issubclass(cls, EventEnvelope):
        return decode_event(raw)
    record = decode_input(raw)
    assert not isinstance(record, DecodeFailure), record.reason
    return record


@pytest.mark.parametrize("cls", WIRE_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_wire_type_round_trips_byte_stably(cls: type[WireModel], data: st.DataObject) -> None:
    original = data.draw(wire_instances(cls))
    raw = encode(original)
    decoded = decode_as(cls, raw)
    assert type(decoded) is cls
    assert decoded == original
    assert encode(decoded) == raw


def test_a_message_may_leave_out_its_type_and_version() -> None:
    raw = b'{"id":"m1","threadId":"t1","role":"user","content":"hi","createdAt":"2025-03-03T09:00:00Z"}'
    message = decode_input(raw)
    assert isinstance(message, Message) and message.text() == "hi"
    assert encode(message) == (b'{"content":"hi","createdAt":"2025-03-03T09:00:00Z","id":"m1","role":"user",'
                               b'"schemaVersion":1,"threadId":"t1","type":"message"}')


def test_parts_are_typed_and_data_parts_share_one_model() -> None:
    message = decode_input(
        b'{"id":"m1","threadId":"t1","role":"assistant","createdAt":"2025-03-03T09:00:00Z","content":['
        b'{"type":"text","text":"one"},{"type":"reasoning","text":"hidden"},'
        b'{"type":"tool-call","toolCallId":"c1","toolName":"weather","args":{"city":"Lyon"}},'
        b'{"type":"data-om-status","data":{"x":1}},{"type":"data-weather","data":[1,2]},'
        b'{"type":"text","text":"two"}],'
        b'"metadata":{"provider":"openai","model":"gpt-4o","clientTokenEstimate":12,"traceId":"abc"}}'
    )
    assert isinstance(message, Message), message
    kinds = [type(p).__name__ for p in message.content]
    assert kinds == ["TextPart", "ReasoningPart", "ToolCallPart", "DataPart", "DataPart", "TextPart"]
    assert message.text() == "one\ntwo"
    assert message.metadata.provider == "openai" and message.metadata.client_token_estimate == 12
    assert message.metadata.model_extra == {"traceId": "abc"}
