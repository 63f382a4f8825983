"""The feed's frames against the committed JSON Schemas, as a client in another language checks
them: the frame against `data-part.json`, its `data` against the event type's own schema."""

import json
from functools import cache

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from omstream.projections.views.parts import data_part, frame_json
from omstream.schemas.events import EVENT_TYPES
from omstream.schemas.jsonschema import DEFAULT_DIR
from tests.unit.projections.test_feed_sse import lifecycle
from tests.unit.schemas.test_wire_roundtrip import wire_instances


@cache
def schema(file: str) -> dict:
    return json.loads((DEFAULT_DIR / file).read_text(encoding="utf-8"))


@cache
def part_validator() -> Draft202012Validator:
    Draft202012Validator.check_schema(schema("data-part.json"))
    return Draft202012Validator(schema("data-part.json"))


@cache
def data_validator(event_type: str) -> Draft202012Validator:
    """`properties.data` of the event type's schema, with the `$defs` its references point to."""
    event = schema(f"{event_type}.json")
    return Draft202012Validator({**event["properties"]["data"], "$defs": event.get("$defs", {})})


def errors_of(frame_text: str, event_type: str) -> list[str]:
    frame = orjson.loads(frame_text)
    found = [f"frame {list(e.absolute_path)}: {e.message}" for e in part_validator().iter_errors(frame)]
    return found + [f"data {list(e.absolute_path)}: {e.message}"
                    for e in data_validator(event_type).iter_errors(frame["data"])]


def test_the_frames_of_a_memorys_lifecycle_validate():
    _, events, _ = lifecycle()
    for event in events:
        assert not errors_of(frame_json(data_part(event)), event.type), event.type
    print(f"{len(events)} frames of {len({e.type for e in events})} event types validated")


@pytest.mark.parametrize("cls", list(EVENT_TYPES.values()), ids=list(EVENT_TYPES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_frame_of_every_event_type_validates(cls: type, data: st.DataObject) -> None:
    event = data.draw(wire_instances(cls))
    assert not errors_of(frame_json(data_part(event)), event.type)


def test_the_schema_refuses_what_is_not_a_four_key_part():
    _, events, _ = lifecycle()
    frame = orjson.loads(frame_json(data_part(events[0])))
    assert not list(part_validator().iter_errors(frame))
    for broken in ({**frame, "seq": 1}, {k: v for k, v in frame.items() if k != "id"},
                   {**frame, "type": frame["type"].removeprefix("data-")}, {**frame, "transient": "yes"}):
        assert list(part_validator().iter_errors(broken)), broken
    # A `data` of another event type is caught by that type's schema, not by the frame's.
    status = next(e for e in events if e.type == "data-om-status")
    assert data_validator("data-om-observation-end").is_valid(status.data.wire()) is False
