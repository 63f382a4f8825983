"""`OmClient` seals what it sends when the namespace seals (a `Sealer` on a `MemoryRing`, a
producer faked): messages under their owner's key (a resource's thread), prompts and titles
under the memory's, nothing made for a record without content; PLAIN sends today's bytes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import orjson

from omstream.client import OmClient
from omstream.crypto import PLAIN, Sealer
from omstream.crypto.opening import Opener
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.config import load_om_config
from omstream.schemas.control import ReflectRequested, ThreadPatched
from omstream.schemas.messages import Message
from omstream.settings import Settings
from tests.unit.crypto.keys import MemoryRing

T = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "my locker code is 4711"


class Producer:
    """aiokafka's producer, as far as the client uses it: what was sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[Any]:
        self.sent.append((topic, value, key))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(partition=0, offset=len(self.sent) - 1))
        return done

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
        return await (await self.send(topic, value, key))


def client(sealer: Sealer, settings: Settings | None = None) -> tuple[OmClient, Producer]:
    om = OmClient(settings or Settings(), sealer=sealer)
    producer = Producer()
    om._producer = cast(Any, producer)
    return om, producer


def message(thread: str = "t1", resource: str | None = None, content: Any = SECRET) -> Message:
    return Message(id="m1", thread_id=thread, resource_id=resource, role="user", content=content, created_at=T)


async def test_plain_client_sends_todays_bytes() -> None:
    om, producer = client(PLAIN)
    await om.send_message(message())
    await om.reflect("t1", prompt="focus on the locker")
    [(_, sent, _), (_, reflect, _)] = producer.sent
    assert sent == encode(message())
    assert reflect == encode(ReflectRequested(thread_id="t1", prompt="focus on the locker", at=decode_at(reflect)))


async def test_a_message_is_sealed_under_its_memory_key_and_opens_equal() -> None:
    ring = MemoryRing()
    sealer = Sealer(cast(Any, ring))
    om, producer = client(sealer)
    await om.send_message(message(content=[{"type": "text", "text": SECRET}]))
    [(topic, value, key)] = producer.sent
    assert topic == om.topics.log and key == b"thread:t1"
    assert b"locker" not in value and b'"omSealed":1' in value
    await sealer.prepare([value])
    assert Opener(sealer).open(value, "thread:t1") == encode(message(content=[{"type": "text", "text": SECRET}]))


async def test_in_resource_scope_a_message_is_sealed_under_its_threads_key() -> None:
    ring = MemoryRing()
    sealer = Sealer(cast(Any, ring))
    settings = replace(Settings(), om=load_om_config({"scope": "resource"}))
    om, producer = client(sealer, settings)
    await om.send_message(message("t1", "r1"))
    await om.set_title("t1", "the locker thread", resource_id="r1")
    [(_, sent, key), (_, title, _)] = producer.sent
    assert key == b"resource:r1"
    # The thread's key, not the resource's: deleting the thread shreds its messages only.
    assert ring.book.current("thread:resource:r1/t1") is not None
    assert b"locker" not in title
    await sealer.shred("thread:resource:r1/t1")
    assert await Opener(sealer).open_all([sent, title], "resource:r1") == [
        encode(ThreadPatched(thread_id="t1", resource_id="r1", title="the locker thread",
                             at=decode_at(title)))]


def decode_at(value: bytes) -> datetime:
    return datetime.fromisoformat(orjson.loads(value)["at"])


async def test_prompts_and_titles_are_sealed_and_records_without_content_make_no_key() -> None:
    ring = MemoryRing()
    sealer = Sealer(cast(Any, ring))
    om, producer = client(sealer)
    await om.step_started("t1", step_number=0)
    await om.reflect("t2")  # no prompt: nothing to seal
    assert ring.book.live == {}  # no key made for them
    assert [orjson.loads(v).get("omSealed") for _, v, _ in producer.sent] == [None, None]
    await om.reflect("t1", prompt="focus on the locker")
    value = producer.sent[-1][1]
    assert b"locker" not in value and orjson.loads(value)["type"] == "reflect-requested"
    await sealer.prepare([value])
    record = decode_input(Opener(sealer).open(value, "thread:t1"))
    assert isinstance(record, ReflectRequested) and record.prompt == "focus on the locker"


async def test_send_raw_stays_raw() -> None:
    om, producer = client(Sealer(cast(Any, MemoryRing())))
    raw = orjson.dumps({"id": "m1", "threadId": "t1", "content": SECRET})
    await om.send_raw("om.log", b"thread:t1", raw)
    assert producer.sent == [("om.log", raw, b"thread:t1")]


async def test_reading_passes_over_a_shredded_record_and_keeps_plain_ones() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    om, producer = client(sealer)
    await om.send_message(message())
    plain = encode(message("t1"))
    await sealer.shred("thread:t1")
    assert await Opener(sealer).open_all([producer.sent[0][1], plain], "thread:t1") == [plain]
