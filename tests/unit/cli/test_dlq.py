"""`om dlq` without a broker: a dead letter's thread and record as `show` prints them, and the
check `resend` makes before sending (what the worker would refuse again is refused here)."""

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from omstream.cli.common import EXIT_INPUT, CommandError
from omstream.cli.dlq import Letter, _record_view, checked_record
from omstream.schemas.codec import encode
from omstream.schemas.dead_letters import DeadLetter
from omstream.schemas.jobs import ModelResult
from omstream.schemas.messages import Message
from omstream.settings import Settings
from tests.helpers import message


def letter(value: bytes, key: bytes | None = b"thread:t9", code="invalid") -> Letter:
    return Letter(0, 7, DeadLetter.of(code=code, reason="r", topic="om.log", partition=1, offset=3,
                                      key=key, value=value))


def test_a_dead_letter_knows_its_thread_however_broken_its_record():
    good = orjson.dumps(message(0).wire())
    assert letter(good).thread_id == "t1"
    assert letter(orjson.dumps({"threadId": "t2", "role": "robot"})).thread_id == "t2"
    assert letter(b"\xff\xfe garbage").thread_id == "t9"
    assert letter(b"{", key=None).thread_id is None
    assert letter(good).summary()["position"] == "0:7"


def test_show_decodes_what_decodes_and_keeps_the_rest_as_text_or_base64():
    assert _record_view(orjson.dumps(message(0).wire()))["decoded"]["id"] == "t1-m0"
    as_text = _record_view(b'{"role": "robot"}')
    assert as_text["decodes"] is False and as_text["text"] == '{"role": "robot"}' and "invalid" in as_text["why"]
    assert _record_view(b"\xff\x00")["base64"] == "/wA="


@pytest.mark.parametrize(("raw", "code"), [
    (b"not json", "not-json"),
    (orjson.dumps({**message(0).wire(), "role": "robot"}), "invalid"),
    (orjson.dumps({**message(0).wire(), "content": "x" * 200_000}), "text-too-long"),
    (b"[" * 100 + b"]" * 100, "too-deep"),
    (orjson.dumps({**message(0).wire(), "createdAt": (datetime.now(UTC) + timedelta(days=2)).isoformat()}),
     "future-time"),
])
def test_resend_refuses_a_record_the_worker_would_refuse_again(raw, code):
    with pytest.raises(CommandError) as caught:
        checked_record(raw, Settings())
    assert caught.value.status == EXIT_INPUT and f"({code})" in str(caught.value) and "nothing sent" in str(caught.value)


def test_resend_takes_a_valid_record_and_never_a_model_result():
    record = checked_record(orjson.dumps(message(0).wire()), Settings())
    assert isinstance(record, Message) and record.id == "t1-m0"
    result = ModelResult(kind="observe", cycle_id="c", memory_key="thread:t1", thread_id="t1", request_hash="h",
                         ok=True, output="x", model="scripted/observer", attempts=1,
                         started_at=datetime.now(UTC), completed_at=datetime.now(UTC))
    with pytest.raises(CommandError, match="only by the model agents"):
        checked_record(encode(result), Settings())
