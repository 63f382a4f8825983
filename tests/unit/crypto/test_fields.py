"""The field policy over the real wire models: every content field sealed, the rest clear, and
the record comes back equal (hypothesis instances of every wire type)."""

from __future__ import annotations

import copy
import os
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from omstream.crypto import CONTENT_FIELDS, DataKey, Shredded, Tampered, decrypt_fields, encrypt_fields, sealed_key_ids
from omstream.schemas.events import EVENT_TYPES
from omstream.schemas.messages import Message
from tests.unit.schemas.test_wire_roundtrip import CONTROL_CLASSES, WIRE_CLASSES, decode_as, wire_instances

KEY = DataKey("k1", "thread:t1", os.urandom(32))
BY_TYPE: dict[str, type[BaseModel]] = {
    cls.model_fields["type"].default: cls for cls in WIRE_CLASSES if "type" in cls.model_fields
}
TOP_LEVEL = [cls for cls in WIRE_CLASSES if cls is Message or cls in CONTROL_CLASSES
             or cls.__name__ in ("ModelJob", "ModelResult") or cls in EVENT_TYPES.values()]


class Keys(dict):
    def key(self, key_id: str) -> DataKey:
        if key_id not in self:
            raise Shredded(key_id)
        return self[key_id]


def _field(cls: type[BaseModel], alias: str):
    return next(f for name, f in cls.model_fields.items() if (f.alias or name) == alias)


@pytest.mark.parametrize("kind", sorted(CONTENT_FIELDS))
def test_every_policy_path_names_a_field_of_its_model(kind):
    """A renamed or removed field breaks here, not silently in production."""
    assert kind in BY_TYPE, f"no wire type {kind}"
    for path in CONTENT_FIELDS[kind]:
        cls = BY_TYPE[kind]
        *parents, name = path.split(".")
        for part in parents:
            cls = _field(cls, part).annotation
        assert _field(cls, name) is not None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(TOP_LEVEL).flatmap(wire_instances), st.booleans())
def test_round_trip_over_every_wire_type(instance, deterministic):
    record = instance.wire()
    before = copy.deepcopy(record)
    sealed = encrypt_fields(record, KEY, context=b"event-7" if deterministic else None)
    assert record == before  # the caller's record is never changed
    kind = record.get("type", "message")
    paths = CONTENT_FIELDS.get(kind, ())
    clear = orjson.loads(orjson.dumps(sealed))
    for path in paths:
        holder_in, holder_out = record, clear
        for part in path.split("."):
            holder_in = holder_in.get(part) if isinstance(holder_in, dict) else None
            holder_out = holder_out.get(part) if isinstance(holder_out, dict) else None
        assert (holder_out is None) == (holder_in is None)
        if holder_in is not None:
            assert isinstance(holder_out, str) and holder_out.startswith("om1")
    if not paths:
        assert sealed == record
    sealed_before = copy.deepcopy(sealed)
    opened = decrypt_fields(sealed, "thread:t1", Keys(k1=KEY))
    assert opened == record and sealed == sealed_before
    assert decode_as(type(instance), orjson.dumps(opened)) == instance
    assert sealed_key_ids(sealed) <= {"k1"}


def test_a_secret_leaves_no_readable_trace_and_ids_stay_clear():
    secret = "locker code 4711-SECRET"
    msg = Message(id="m1", thread_id="t1", role="user", created_at=datetime(2025, 1, 1, tzinfo=UTC), content=[
        {"type": "text", "text": secret},
        {"type": "tool-call", "toolCallId": "c1", "toolName": "lookup", "args": {"q": secret}},
        {"type": "file", "data": "U0VDUkVU", "mimeType": "application/pdf", "filename": f"{secret}.pdf"},
    ])
    accepted = EVENT_TYPES["om-message-accepted"](
        event_id="e1", memory_key="thread:t1", thread_id="t1", seq=3,
        event_time=datetime(2025, 1, 1, tzinfo=UTC), data={"message": msg})
    for record in (msg.wire(), accepted.wire()):
        sealed = orjson.dumps(encrypt_fields(record, KEY))
        assert secret.encode() not in sealed and b"U0VDUkVU" not in sealed
        assert b'"m1"' in sealed and b'"t1"' in sealed
    assert orjson.loads(orjson.dumps(encrypt_fields(accepted.wire(), KEY)))["seq"] == 3


def test_shredded_and_moved_records():
    record = encrypt_fields({"type": "model-result", "output": "the answer"}, KEY)
    with pytest.raises(Shredded):
        decrypt_fields(record, "thread:t1", Keys())
    with pytest.raises(Tampered):  # pasted into another memory's record
        decrypt_fields(record, "thread:t2", Keys(k1=KEY))
    moved = {"type": "thread-patched", "title": record["output"]}  # into another field
    with pytest.raises(Tampered):
        decrypt_fields(moved, "thread:t1", Keys(k1=KEY))


def test_a_plain_record_passes_unchanged_and_sealing_twice_is_once():
    plain = {"type": "message", "content": "plain producer"}
    assert decrypt_fields(plain, "thread:t1", Keys()) == plain
    once = encrypt_fields(plain, KEY, context=b"e")
    assert encrypt_fields(once, KEY, context=b"e") == once
