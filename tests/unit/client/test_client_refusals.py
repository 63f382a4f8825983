"""`OmClient` refuses, before sending anything, what the worker would dead-letter on sight, and
every refusal is an `OmError` said in one line: a bad `Message` built in code, a record over a
limit or invalid, a command the worker cannot key, an error answer of `om serve`.

The dead-letter codes expected here are those tests/integration/test_guards.py sees the worker
give the same records."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import orjson
import pytest

from omstream.client import OmClient
from omstream.client.om_client import RefusedRecord, ServerRefused, _refusal
from omstream.crypto import PLAIN
from omstream.schemas.config import load_om_config
from omstream.schemas.control import ResourceDeleted, ThreadPatched
from omstream.schemas.errors import OmError
from omstream.schemas.keys import UnroutedRecord
from omstream.schemas.messages import InvalidMessage, Message, TextPart
from omstream.settings import Settings
from tests.unit.client.test_client_sealing import Producer

NOW = datetime.now(UTC)


def client(settings: Settings | None = None) -> tuple[OmClient, Producer]:
    om = OmClient(settings or Settings(), sealer=PLAIN)
    producer = Producer()
    om._producer = cast(Any, producer)
    return om, producer


def message(i: int = 0, **fields: Any) -> Message:
    base: dict[str, Any] = {"id": f"m{i}", "thread_id": "t1", "role": "user", "content": f"hello {i}",
                            "created_at": NOW - timedelta(minutes=1)}
    return Message(**{**base, **fields})


def one_line_om_error(exc: BaseException) -> str:
    assert isinstance(exc, OmError), type(exc)
    text = str(exc)
    assert text and "\n" not in text, text
    return text


@pytest.mark.parametrize("fields, named", [
    ({"role": "robot"}, "role"),
    ({"created_at": datetime(2026, 1, 1)}, "created_at"),  # no time zone
    ({"id": ""}, "id"),
    ({"content": [{"type": "text"}]}, "content"),
    ({"thread_id": None}, "thread_id"),
])
def test_a_bad_message_built_in_code_is_one_line_naming_the_field(fields, named):
    with pytest.raises(InvalidMessage) as caught:
        message(**fields)
    text = one_line_om_error(caught.value)
    assert text.startswith("invalid message: ") and named in text, text
    assert isinstance(caught.value, ValueError)  # what pydantic's error was: `except ValueError` still holds


def test_decoders_still_get_pydantics_error():
    # The worker and the readers decode with model_validate: their handling is unchanged.
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        Message.model_validate({"id": "m", "threadId": "t", "role": "robot", "content": "x",
                                "createdAt": "2026-01-01T00:00:00Z"})
    # pydantic's own error, field by field (not the one-line error of a constructor run inside it)
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [(("role",), "literal_error")]


REFUSED = {
    "too-large": lambda: message(content="x" * (600 * 1024)),
    "text-too-long": lambda: message(content="y" * 100_001),
    "too-many-parts": lambda: message(content=[TextPart(text="p")] * 201),
    "future-time": lambda: message(created_at=NOW + timedelta(days=1)),
    # Built without validation (model_copy does not validate): the worker's decoder refuses it.
    "invalid": lambda: message().model_copy(update={"role": "robot"}),
    "newer-schema": lambda: message().model_copy(update={"schema_version": 99}),
}


@pytest.mark.parametrize("code", sorted(REFUSED))
def test_what_the_worker_would_dead_letter_is_refused_before_anything_is_sent(code):
    om, producer = client()
    good, bad = message(1), REFUSED[code]()

    async def send() -> None:
        await om.send_messages([good, bad])

    with pytest.raises(RefusedRecord) as caught:
        asyncio.run(send())
    assert caught.value.code == code
    assert one_line_om_error(caught.value).startswith(f"{code}: ")
    assert producer.sent == []  # not even the good message before it: the batch is checked first


def test_messages_at_the_limits_are_sent():
    om, producer = client()
    at_limits = [message(1, content="y" * 100_000), message(2, content=[TextPart(text="p")] * 200),
                 message(3, created_at=NOW + timedelta(minutes=4))]  # within the 5 min of skew allowed
    asyncio.run(om.send_messages(at_limits))
    assert len(producer.sent) == 3


def test_the_limits_are_the_settings_the_worker_reads():
    om, producer = client(Settings(max_record_bytes=2048))
    with pytest.raises(RefusedRecord, match="max_record_bytes") as caught:
        asyncio.run(om.send_messages([message(content="z" * 4096)]))
    assert caught.value.code == "too-large" and producer.sent == []


def test_send_messages_takes_messages_only():
    om, producer = client()
    with pytest.raises(RefusedRecord, match="takes Message records, not dict"):
        asyncio.run(om.send_messages([cast(Any, message().wire())]))
    assert producer.sent == []


def test_commands_the_worker_would_refuse_are_refused():
    om, producer = client()
    with pytest.raises(RefusedRecord) as caught:  # thread scope: a resource-wide deletion needs threads
        asyncio.run(om.send_control(ResourceDeleted(resource_id="u1", at=NOW)))
    assert caught.value.code == "invalid" and one_line_om_error(caught.value)
    with pytest.raises(RefusedRecord) as caught:
        asyncio.run(om.set_title("t1", "T" * (600 * 1024)))
    assert caught.value.code == "too-large"
    resource = replace(Settings(), om=load_om_config({"scope": "resource"}))
    om_resource, sent_resource = client(resource)
    with pytest.raises(UnroutedRecord) as unrouted:  # resource scope: a command must name its resource
        asyncio.run(om_resource.send_control(ThreadPatched(thread_id="t1", title="x", at=NOW)))
    one_line_om_error(unrouted.value)
    assert producer.sent == [] and sent_resource.sent == []


class _Answer:
    def __init__(self, status: int, body: bytes, reason: str = "Error") -> None:
        self.status, self._body, self.reason = status, body, reason

    async def read(self) -> bytes:
        return self._body


@pytest.mark.parametrize("status, body, expected", [
    (401, orjson.dumps({"error": "unauthorized", "detail": "unknown token"}),
     "om serve refused the thread list: 401 unauthorized: unknown token"),
    (400, orjson.dumps({"error": "bad-parameter", "detail": "wait must be\na number"}),
     "om serve refused the thread list: 400 bad-parameter: wait must be a number"),
    (502, b"<html>bad gateway</html>", "om serve refused the thread list: 502 http-error: Bad Gateway"),
])
def test_an_error_answer_of_om_serve_is_one_line_with_its_code(status, body, expected):
    refused = asyncio.run(_refusal(_Answer(status, body, "Bad Gateway"), "the thread list"))
    assert isinstance(refused, ServerRefused) and (refused.status, str(refused)) == (status, expected)
    one_line_om_error(refused)


def test_the_answer_of_a_refusal_is_read_from_its_json():
    refused = asyncio.run(_refusal(_Answer(403, orjson.dumps({"error": "forbidden", "detail": "no"})), "x"))
    assert (refused.code, refused.detail) == ("forbidden", "no")
