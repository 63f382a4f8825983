"""The pipeline's sealer: a record's content sealed and opened, the marker, shredding, blobs."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson
import pytest

from omstream.crypto import PLAIN, Sealer, Shredded, content_owner
from tests.unit.crypto.keys import MemoryRing

MESSAGE = {"id": "m1", "threadId": "t1", "role": "user", "content": "my locker code is 4711",
           "createdAt": "2026-01-01T00:00:00Z"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_sealed_record_hides_its_content_and_opens_equal() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    raw = orjson.dumps(MESSAGE)
    sealed = run(sealer.seal(raw, "thread:t1"))
    assert b"4711" not in sealed and b'"omSealed":1' in sealed
    assert orjson.loads(sealed)["id"] == "m1"  # identifiers stay readable
    run(sealer.prepare([sealed]))
    assert orjson.loads(sealer.open(sealed, "thread:t1")) == MESSAGE


def test_deterministic_context_writes_the_same_bytes_twice() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    key = run(sealer.key_of("thread:t1"))
    raw = orjson.dumps(MESSAGE)
    assert sealer.seal_with(raw, key, context=b"e1") == sealer.seal_with(raw, key, context=b"e1")
    assert run(sealer.seal(raw, "thread:t1")) != run(sealer.seal(raw, "thread:t1"))  # random nonces


def test_an_unmarked_record_is_never_opened_even_if_it_looks_sealed() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    fake = orjson.dumps({**MESSAGE, "content": "om1:a:b:c"})
    assert sealer.open(fake, "thread:t1") == fake


def test_a_shredded_owner_cannot_be_opened() -> None:
    ring = MemoryRing()
    sealer = Sealer(cast(Any, ring))
    sealed = run(sealer.seal(orjson.dumps(MESSAGE), "thread:t1"))
    blob = sealer.seal_blob(b'{"observations":"4711"}', run(sealer.key_of("thread:t1")), context=b"s")
    run(sealer.shred("thread:t1"))
    run(sealer.prepare([sealed]))
    with pytest.raises(Shredded):
        sealer.open(sealed, "thread:t1")
    with pytest.raises(Shredded):
        sealer.open_blob(blob, "thread:t1")


def test_blobs_round_trip_and_plain_blobs_pass() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    key = run(sealer.key_of("resource:r"))
    raw = '{"observations":"Ünïcode 🔴 4711"}'.encode()
    blob = sealer.seal_blob(raw, key, context=b"state")
    assert b"4711" not in blob and sealer.blob_key_ids(blob) == {key.key_id}
    assert sealer.open_blob(blob, "resource:r") == raw
    assert sealer.open_blob(raw, "resource:r") == raw


def test_plain_passes_everything_through() -> None:
    raw = orjson.dumps(MESSAGE)
    assert run(PLAIN.seal(raw, "thread:t1")) == raw and PLAIN.open(raw, "thread:t1") == raw
    assert not PLAIN.enabled


def test_messages_of_a_resource_are_owned_by_their_thread() -> None:
    assert content_owner("resource:r", "t1", is_message=True) == "thread:resource:r/t1"
    assert content_owner("resource:r", "t1", is_message=False) == "resource:r"
    assert content_owner("thread:t1", "t1", is_message=True) == "thread:t1"


def test_one_sealer_serves_every_part_of_a_process() -> None:
    """The ring starts with the first user and stops with the last, once each."""

    class CountingRing(MemoryRing):
        starts = stops = 0

        async def start(self) -> None:
            await asyncio.sleep(0.01)  # a second user waits until the ring has read the topic
            self.starts += 1

        async def stop(self) -> None:
            self.stops += 1

    ring = CountingRing()
    sealer = Sealer(cast(Any, ring))

    async def users() -> list[int]:
        seen = []

        async def user() -> None:
            await sealer.start()
            seen.append(ring.starts)  # started before any user goes on
        await asyncio.gather(user(), user(), user())
        await sealer.stop()
        await sealer.stop()
        seen.append(ring.stops)
        await sealer.stop()
        await sealer.stop()  # one stop too many changes nothing
        return [*seen, ring.stops]

    assert run(users()) == [1, 1, 1, 0, 1]
