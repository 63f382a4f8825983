"""The intake relay's parts without a broker: owners, the seal of a plain record, the dedup of a
batch relayed twice, the order of a batch's steps (send, ack, commit, delete), the topic layout,
and the warning about unsealed records written to the log directly."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson
from aiokafka import TopicPartition

from omstream.crypto import PLAIN, Sealer
from omstream.settings import Settings
from omstream.topics import Topics, intake_config, sealed
from omstream.worker.relay import (
    INTAKE_FROM,
    TICK,
    IntakeRelay,
    PlainWatch,
    _Partition,
    already_relayed,
    intake_from,
    owner_of,
    seal_record,
)
from tests.unit.crypto.keys import MemoryRing

MESSAGE = {"id": "m1", "threadId": "t1", "resourceId": "u1", "role": "user", "content": "locker 4711",
           "createdAt": "2026-01-01T00:00:00Z"}
DELETED = {"type": "thread-deleted", "threadId": "t1", "resourceId": "u1", "at": "2026-01-01T00:00:01Z"}


def test_owner_is_the_memory_but_a_resource_message_is_its_threads() -> None:
    assert owner_of(b"thread:t1", orjson.dumps({**MESSAGE, "resourceId": None})) == "thread:t1"
    assert owner_of(b"resource:u1", orjson.dumps(MESSAGE)) == "thread:resource:u1/t1"
    assert owner_of(b"resource:u1", orjson.dumps(DELETED)) == "resource:u1"
    patched = {"type": "thread-patched", "threadId": "t1", "resourceId": "u1", "title": "secret title"}
    assert owner_of(b"resource:u1", orjson.dumps(patched)) == "resource:u1"


def test_what_cannot_be_sealed_has_no_owner() -> None:
    assert owner_of(None, orjson.dumps(MESSAGE)) is None  # unrouted: the fold dead-letters it
    assert owner_of(b"thread:t1", b"not json") is None
    assert owner_of(b"thread:t1", b"[1, 2]") is None
    assert owner_of(b"\xff", orjson.dumps(MESSAGE)) is None
    assert owner_of(b"thread:t1", None) is None


def test_a_plain_record_is_sealed_and_a_broken_one_forwarded_as_it_is() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    sealed_bytes = asyncio.run(seal_record(sealer, b"resource:u1", orjson.dumps(MESSAGE)))
    assert sealed_bytes is not None and b"4711" not in sealed_bytes and b'"omSealed":1' in sealed_bytes
    asyncio.run(sealer.prepare([sealed_bytes]))
    assert orjson.loads(sealer.open(sealed_bytes, "thread:resource:u1/t1") or b"") == MESSAGE
    for broken in (b"not json {4711", b'"4711"'):
        assert asyncio.run(seal_record(sealer, b"thread:t1", broken)) == broken
    deletion = orjson.dumps(DELETED)  # no content: nothing to seal, the bytes stay as sent
    assert asyncio.run(seal_record(sealer, b"resource:u1", deletion)) == deletion


def test_without_a_key_the_relay_forwards_bytes_unchanged() -> None:
    raw = orjson.dumps(MESSAGE)
    assert asyncio.run(seal_record(PLAIN, b"resource:u1", raw)) == raw


def test_the_last_relayed_offset_is_read_from_the_headers_of_its_partition() -> None:
    headers = [[(INTAKE_FROM, b"n.intake:0:7")], None, [("om-signature", b"x")], [(INTAKE_FROM, b"n.intake:1:99")],
               [(INTAKE_FROM, b"n.intake:0:9")], [(INTAKE_FROM, b"n.intake:0:8")],
               [(INTAKE_FROM, b"old.intake:0:500")]]  # copied by om repartition from another namespace
    assert intake_from(headers[0], "n.intake") == (0, 7) and intake_from(headers[2], "n.intake") is None
    assert intake_from(headers[-1], "n.intake") is None
    assert already_relayed(headers, "n.intake", 0) == 9
    assert already_relayed(headers, "n.intake", 1) == 99
    assert already_relayed(headers, "n.intake", 2) == -1


def test_intake_topic_only_with_a_namespace_key() -> None:
    plain = replace(Settings(), namespace="n", partitions=3)
    assert not sealed(plain)
    assert all(s.name != "n.intake" for s in Topics.of(plain).specs(plain))
    keyed = replace(plain, namespace_key="k" * 40)
    [spec] = [s for s in Topics.of(keyed).specs(keyed) if s.name == "n.intake"]
    assert spec.partitions == 3  # as the log: a memory's partition is the same in both
    config = intake_config(5000)
    assert config["segment.ms"] == "5000" and config["message.timestamp.type"] == "LogAppendTime"
    assert int(config["retention.ms"]) >= 24 * 3600 * 1000  # a stopped relay loses nothing for days


# --- a batch, with fake clients -------------------------------------------------------------


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 1000
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class Meta:
    offset: int


class Clients:
    """A producer, a group consumer and an admin client that write down what they were asked."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Any]] = []
        self.log: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]] = []

    async def send(self, topic: str, value: bytes | None, *, key: bytes | None, partition: int,
                   timestamp_ms: int | None = None, headers: Any = None) -> Any:
        self.log.append((key, value, partition, headers))
        offset = len(self.log) - 1
        self.steps.append(("send", offset))
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        future.set_result(Meta(offset))
        return future

    async def commit(self, offsets: Any) -> None:
        self.steps.append(("commit", {tp.partition: (om.offset, om.metadata) for tp, om in offsets.items()}))

    async def delete_records(self, records: Any) -> Any:
        self.steps.append(("delete", {tp.partition: r.before_offset for tp, r in records.items()}))
        return {tp: r.before_offset for tp, r in records.items()}

    async def end_offsets(self, tps: Any) -> Any:
        return {tp: len(self.log) for tp in tps}


def relay_with(clients: Clients, sealer: Sealer, skip_through: int = -1) -> IntakeRelay:
    relay = IntakeRelay("nowhere:9092", "n.intake", "n.log", "n.intake-relay", sealer)
    relay._producer = cast(Any, clients)
    relay._consumer = cast(Any, clients)
    relay._admin = cast(Any, clients)
    relay._held[0] = _Partition(skip_through=skip_through)
    return relay


def test_a_batch_is_sent_acked_then_committed_then_deleted_in_order() -> None:
    clients, sealer = Clients(), Sealer(cast(Any, MemoryRing()))
    relay = relay_with(clients, sealer)
    records = [Record(10 + i, b"resource:u1", orjson.dumps({**MESSAGE, "id": f"m{i}"})) for i in range(3)]
    records.append(Record(13, b"resource:u1", orjson.dumps(DELETED)))
    asyncio.run(relay._relay(TopicPartition("n.intake", 0), records))
    assert [s[0] for s in clients.steps] == ["send"] * 4 + ["commit", "delete"]
    assert clients.steps[-2][1] == {0: (14, "4")}  # next intake offset; the log's end after the batch
    assert clients.steps[-1][1] == {0: 14}
    assert [h[-1] for *_, h in clients.log] == [(INTAKE_FROM, f"n.intake:0:{o}".encode()) for o in (10, 11, 12, 13)]
    assert all(p == 0 for _, _, p, _ in clients.log)  # the same partition of the log
    assert [orjson.loads(v or b"").get("id") for _, v, _, _ in clients.log[:3]] == ["m0", "m1", "m2"]
    assert not any(b"4711" in (v or b"") for _, v, _, _ in clients.log)
    assert relay.stats.relayed == 4 and relay.stats.deleted_to == {0: 14}


def test_a_batch_found_on_the_log_is_not_relayed_twice_and_ticks_never() -> None:
    clients = Clients()
    relay = relay_with(clients, PLAIN, skip_through=11)  # 10 and 11 landed before a crash
    records = [Record(o, b"thread:t1", orjson.dumps({**MESSAGE, "id": f"m{o}"})) for o in (10, 11, 12)]
    records.append(Record(13, None, b"{}", headers=((TICK, b"1"),)))
    asyncio.run(relay._relay(TopicPartition("n.intake", 0), records))
    assert [orjson.loads(v or b"")["id"] for _, v, _, _ in clients.log] == ["m12"]
    assert relay.stats.skipped == 2 and relay.stats.relayed == 1
    assert clients.steps[-1] == ("delete", {0: 14})


def test_a_producer_header_cannot_pose_as_the_relays() -> None:
    clients = Clients()
    relay = relay_with(clients, PLAIN)
    forged = Record(5, b"thread:t1", orjson.dumps(MESSAGE), headers=((INTAKE_FROM, b"n.intake:0:999"), ("x", b"y")))
    asyncio.run(relay._relay(TopicPartition("n.intake", 0), [forged]))
    assert clients.log[0][3] == [("x", b"y"), (INTAKE_FROM, b"n.intake:0:5")]


def test_unsealed_content_on_the_log_is_warned_about_once_per_memory(caplog: Any) -> None:
    watch = PlainWatch()
    plain = orjson.dumps(MESSAGE)
    with caplog.at_level(logging.WARNING, logger="omstream.worker.relay"):
        assert watch.note(b"thread:t1", plain, None)
        assert watch.note(b"thread:t1", plain, [])
        assert watch.note(b"thread:t2", plain, {"x": b"y"})
    assert [r.getMessage().split()[3] for r in caplog.records] == ["thread:t1", "thread:t2"]
    assert "4711" not in caplog.text  # never the text itself
    assert not watch.note(b"thread:t3", plain, [(INTAKE_FROM, b"0:1")])  # relayed
    assert not watch.note(b"thread:t3", orjson.dumps({**MESSAGE, "omSealed": 1}), None)
    assert not watch.note(b"thread:t3", orjson.dumps(DELETED), None)  # no content
    assert not watch.note(b"thread:t3", orjson.dumps({"type": "model-result", "output": "x"}), None)
    assert not watch.note(b"thread:t3", b"not json", None)


def test_the_barrier_is_inactive_without_a_namespace_key() -> None:
    from omstream.client.intake import IntakeBarrier

    async def body() -> None:
        barrier = IntakeBarrier(replace(Settings(), bootstrap="nowhere:1"))  # never contacted
        await barrier.start()
        assert not barrier.active
        await barrier.settled(b"thread:t1")
        await barrier.stop()

    asyncio.run(body())


class _Offsets:
    """A reader of the intake's offsets: `end` grows as plain producers write, `start` as the relay
    deletes what it relayed (it relays one record per `beginning_offsets` call here)."""

    def __init__(self, end: int) -> None:
        self.start, self.end, self.calls = 0, end, 0

    async def end_offsets(self, tps):  # type: ignore[no-untyped-def]
        self.calls += 1
        return {tp: self.end for tp in tps}

    async def beginning_offsets(self, tps):  # type: ignore[no-untyped-def]
        self.calls += 1
        self.start = min(self.start + 1, self.end)
        return {tp: self.start for tp in tps}


def test_the_barrier_waits_for_what_was_written_and_skips_the_second_trip_when_nothing_was() -> None:
    from omstream.client.intake import IntakeBarrier

    async def body() -> None:
        barrier = IntakeBarrier(replace(Settings(), bootstrap="nowhere:1"))
        reader = barrier._reader = _Offsets(end=3)  # type: ignore[assignment]
        barrier._partitions = [0]
        await barrier.settled(b"thread:t1")
        assert reader.start == 3 and reader.calls == 1 + 3  # waited until the relay passed offset 3
        reader.calls = 0
        await barrier.settled(b"thread:t1")
        assert reader.calls == 1  # nothing new in the intake: one round trip
        reader.end, reader.calls = 5, 0
        await barrier.settled(b"thread:t1")
        assert reader.start == 5 and reader.calls == 1 + 2

    asyncio.run(body())
