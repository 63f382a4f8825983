"""The intake relay on the real broker: a plain producer (JSON, no omstream client) writes
messages and then a thread deletion to `<ns>.intake` in a namespace with a key; the relay writes
them sealed, in order, to the same partitions of `<ns>.log`, and deletes them from the intake.

Measured and printed: the window from a record's acknowledged produce to the moment the intake
no longer serves it to any consumer.  The relay is crashed once between a batch's sends and its
commit (the batch is on the log, the intake still holds it), records are produced while it is
down, and a new relay takes over: every intake record must be on the log exactly once, in order,
and without its plaintext.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import replace
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from omstream import kafka
from omstream.client.intake import IntakeBarrier
from omstream.crypto.sealing import Sealer, sealer_of
from omstream.settings import Settings
from omstream.topics import Topics, ensure_topics, partitions_of, read_until_end
from omstream.worker.relay import TICK, IntakeRelay, intake_from, owner_of, relay_group
from tests.helpers import until
from tests.integration.options import om_options

pytestmark = pytest.mark.integration

NAMESPACE_KEY = "intake-relay-namespace-key-" + "c" * 32
THREADS = ("t-a", "t-b", "t-c")


def message(thread: str, n: int, secret: str) -> bytes:
    return orjson.dumps({"id": f"{thread}-m{n}", "threadId": thread, "role": "user",
                         "content": f"note {n}: the locker code is {secret}",
                         "createdAt": "2026-01-01T00:00:00Z"})


def deleted(thread: str) -> bytes:
    return orjson.dumps({"type": "thread-deleted", "threadId": thread, "at": "2026-01-01T00:01:00Z"})


def start_relay(settings: Settings) -> tuple[IntakeRelay, asyncio.Task[None]]:
    topics = Topics.of(settings)
    relay = IntakeRelay(settings.bootstrap, topics.intake, topics.log, relay_group(settings.namespace),
                        sealer_of(settings), tick_after_ms=settings.shred_window_ms)
    return relay, asyncio.create_task(relay.run())


class Intake:
    """A plain producer on the intake, and a watch of when each record stops being readable."""

    def __init__(self, settings: Settings) -> None:
        self.topic = Topics.of(settings).intake
        self.producer = kafka.producer(settings, acks="all")
        self.watch = kafka.reader(settings)
        self.sent: list[tuple[int, int, bytes, bytes, float]] = []  # partition, offset, key, value, acked at

    async def start(self) -> None:
        await self.producer.start()
        await self.watch.start()

    async def stop(self) -> None:
        await self.producer.stop()
        await self.watch.stop()

    async def send(self, records: list[tuple[bytes, bytes]]) -> None:
        futures = [await self.producer.send(self.topic, value, key=key) for key, value in records]
        for (key, value), future in zip(records, futures, strict=True):
            meta = await future
            self.sent.append((meta.partition, meta.offset, key, value, time.monotonic()))

    async def windows(self, timeout: float = 20.0) -> list[float]:
        """Seconds from each record's ack to the intake's start passing it (polled every 2 ms)."""
        gone: dict[tuple[int, int], float] = {}
        deadline = time.monotonic() + timeout
        while len(gone) < len(self.sent):
            assert time.monotonic() < deadline, f"{len(self.sent) - len(gone)} records still readable"
            starts = await self.watch.beginning_offsets([TopicPartition(self.topic, p) for p in (0, 1)])
            now = time.monotonic()
            for partition, offset, *_ in self.sent:
                if (partition, offset) not in gone and starts[TopicPartition(self.topic, partition)] > offset:
                    gone[partition, offset] = now
            await asyncio.sleep(0.002)
        return [gone[p, o] - acked for p, o, _, _, acked in self.sent]


async def log_records(settings: Settings) -> list[Any]:
    topic = Topics.of(settings).log
    parts = (await partitions_of(settings.bootstrap, [topic]))[topic]
    return [r async for r in read_until_end(settings.bootstrap, topic, parts)]


async def opened(sealer: Sealer, record: Any) -> dict[str, Any]:
    owner = owner_of(record.key, record.value)
    assert owner is not None
    await sealer.prepare([record.value])
    value = sealer.open(record.value, owner)
    assert value is not None
    data: dict[str, Any] = orjson.loads(value)
    return data


async def test_plain_records_are_sealed_into_the_log_in_order_once_and_leave_the_intake(broker):
    settings = replace(Settings(), namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
                       partitions=2, namespace_key=NAMESPACE_KEY, shred_window_ms=3000)
    created = await ensure_topics(settings)
    assert Topics.of(settings).intake in created
    secret = f"S{uuid.uuid4().hex}"
    intake = Intake(settings)
    await intake.start()
    reader = sealer_of(settings)
    await reader.start()
    relay, task = start_relay(settings)
    try:
        # Phase 1: a conversation on three threads, relayed as it is written: a burst before the
        # relay is up (its start, a key per memory), then one record at a time, each timed alone.
        await intake.send([(f"thread:{t}".encode(), message(t, n, secret)) for n in range(5) for t in THREADS])
        await asyncio.wait_for(relay.ready(), 30)
        first = await intake.windows()
        windows = []
        for n in range(5, 10):
            for t in THREADS:
                await intake.send([(f"thread:{t}".encode(), message(t, n, secret))])
                windows.append((await intake.windows())[-1])
        # Phase 2: the relay crashes after a batch is on the log, before it commits it.
        crashed = asyncio.Event()
        consumer: Any = relay._consumer

        async def crash(offsets: Any) -> None:
            crashed.set()
            raise RuntimeError("crash between the sends and the commit")

        consumer.commit = crash
        await intake.send([(f"thread:{t}".encode(), message(t, n, secret)) for n in range(10, 15) for t in THREADS])
        await asyncio.wait_for(crashed.wait(), 20)
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(task, 20)
        # Phase 3: written while no relay runs, then the deletion of one thread, then a restart.
        await intake.send([(f"thread:{t}".encode(), message(t, n, secret)) for n in range(15, 20) for t in THREADS])
        await intake.send([(b"thread:t-a", deleted("t-a")), (b"thread:t-b", message("t-b", 20, secret))])
        relay, task = start_relay(settings)
        await asyncio.wait_for(relay.ready(), 30)
        await intake.windows(timeout=30)

        # The intake serves nothing any more (but the relay's own ticks, which carry no text).
        left = [r async for r in read_until_end(settings.bootstrap, intake.topic, [0, 1])]
        assert all(dict(r.headers or ()).get(TICK) for r in left), f"{len(left)} records readable in the intake"

        # The log: every intake record once, in the intake's order, sealed; no plaintext.
        records = await log_records(settings)
        assert not [r for r in records if secret.encode() in (r.value or b"")], "plaintext on the log"
        origins = [intake_from(r.headers, intake.topic) for r in records]
        assert None not in origins
        assert sorted(origins) == sorted((p, o) for p, o, *_ in intake.sent), "lost or doubled"
        for partition in (0, 1):
            offsets = [o for p, o in origins if p == partition]  # type: ignore[misc]
            assert offsets == sorted(offsets), "out of order"
        assert all(r.partition == o[0] for r, o in zip(records, origins, strict=True))  # type: ignore[index]
        # What the fold sees, opened: the ids and the deletion as the producer sent them, per memory.
        sent_by_memory: dict[bytes, list[Any]] = {}
        for _, _, key, value, _ in sorted(intake.sent, key=lambda s: (s[0], s[1])):
            sent_by_memory.setdefault(key, []).append(orjson.loads(value))
        seen_by_memory: dict[bytes, list[Any]] = {}
        for r in records:
            seen_by_memory.setdefault(r.key, []).append(await opened(reader, r))
        assert seen_by_memory == sent_by_memory
        sealed = sum(b'"omSealed":1' in (r.value or b"") for r in records)
        print(f"\n{len(intake.sent)} plain records through the intake, {len(records)} on the log "
              f"({sealed} sealed, {len(records) - sealed} without content), relayed twice: 0, lost: 0; "
              f"the crashed batch skipped on restart: {relay.stats.skipped}")
        print(f"window, ack in the intake -> unreadable there: one record at a time ({len(windows)}): "
              f"p50 {statistics.median(windows) * 1000:.0f} ms, max {max(windows) * 1000:.0f} ms; "
              f"a burst written before the relay started ({len(first[:15])}): max {max(first[:15]) * 1000:.0f} ms")
        assert relay.stats.skipped > 0  # the crashed batch was on the log, and not written again

        # On the broker's disk: unreadable is not yet gone.  Once the intake has been idle for
        # `segment.ms`, the relay's tick closes the segment holding the relayed records; the
        # broker removes it at its next retention check (5 min by default, not waited for here).
        dirs = [broker.data_dir / "logs" / f"{intake.topic}-{p}" for p in (0, 1)]

        def on_disk() -> tuple[int, int]:
            files = [f for d in dirs for f in d.glob("*.log")]
            return len(files), sum(secret.encode() in f.read_bytes() for f in files)

        before = on_disk()
        await until(lambda: on_disk()[0] >= 2 * len(dirs), timeout=settings.shred_window_ms / 1000 + 10)
        parts = [TopicPartition(intake.topic, p) for p in (0, 1)]
        for _ in range(200):  # the ticks are deleted too, so the start is each partition's end
            starts, ends = await intake.watch.beginning_offsets(parts), await intake.watch.end_offsets(parts)
            if starts == ends:
                break
            await asyncio.sleep(0.05)
        assert starts == ends
        after = on_disk()
        print(f"intake segment files holding the plaintext: {before[1]} of {before[0]} right after the relay; "
              f"after the ticks closed them: {after[1]} of {after[0]}, each wholly below the intake's start, "
              f"so removed at the broker's next retention check")

        # A command sent straight to the log (as OmClient sends) after a plain producer's message
        # waits for the barrier, so it lands after that message, not before it.
        barrier = IntakeBarrier(settings)
        await barrier.start()
        log_writer = kafka.idempotent_producer(settings)
        await log_writer.start()
        try:
            waits = []
            for n in range(5):
                await intake.send([(b"thread:t-c", message("t-c", 100 + n, secret))])
                started = time.monotonic()
                await barrier.settled(b"thread:t-c")
                waits.append(time.monotonic() - started)
                await log_writer.send_and_wait(Topics.of(settings).log, orjson.dumps(
                    {"type": "observe-requested", "threadId": "t-c", "requestId": f"r{n}",
                     "at": "2026-01-01T00:02:00Z"}), key=b"thread:t-c")
        finally:
            await barrier.stop()
            await log_writer.stop()
        tail = [r for r in await log_records(settings) if r.key == b"thread:t-c"][-10:]
        kinds = [orjson.loads(r.value).get("type", "message") for r in tail]
        assert kinds == ["message", "observe-requested"] * 5, kinds
        print(f"a command after a plain message, through the barrier: after it 5 of 5 times; "
              f"barrier wait p50 {statistics.median(waits) * 1000:.0f} ms, max {max(waits) * 1000:.0f} ms")

        # A crash between a commit and its DeleteRecords: the next relay deletes what was committed.
        async def crash_before_delete(tp: Any, before: int) -> None:
            raise RuntimeError("crash between the commit and the deletion")

        relay._delete = crash_before_delete  # type: ignore[method-assign]
        await intake.send([(b"thread:t-b", message("t-b", 200 + n, secret)) for n in range(3)])
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(task, 20)
        last_partition, last_offset = intake.sent[-1][:2]
        tp = TopicPartition(intake.topic, last_partition)
        assert (await intake.watch.beginning_offsets([tp]))[tp] <= last_offset  # committed, still readable
        relay, task = start_relay(settings)
        await intake.windows(timeout=30)
        origins = [intake_from(r.headers, intake.topic) for r in await log_records(settings)]
        relayed = [o for o in origins if o is not None]
        assert sorted(relayed) == sorted((p, o) for p, o, *_ in intake.sent) and len(set(relayed)) == len(relayed)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await intake.stop()
        await reader.stop()


def test_the_worker_relays_the_intake_and_warns_about_plain_records_on_the_log(new_env):
    env = new_env(options=om_options(settings={"namespace_key": NAMESPACE_KEY, "shred_window_ms": 3000}))
    asyncio.run(worker_relays(env.settings, env.start_worker("all")))


async def worker_relays(settings: Settings, worker: Any) -> None:
    secret = f"S{uuid.uuid4().hex}"
    intake = Intake(settings)
    await intake.start()
    writer = kafka.producer(settings, acks="all")
    await writer.start()
    try:
        await intake.send([(b"thread:w1", message("w1", n, secret)) for n in range(3)])
        for n in range(2):  # straight to the log, unsealed: folds, but is warned about once
            await writer.send_and_wait(Topics.of(settings).log, message("w2", n, secret), key=b"thread:w2")
        await intake.windows(timeout=60)
        records = [r for r in await log_records(settings) if r.key == b"thread:w1"]
        assert [intake_from(r.headers, intake.topic) is not None for r in records] == [True] * 3
        assert not [r for r in records if secret.encode() in (r.value or b"")]

        async def accepted() -> list[Any]:
            topic = Topics.of(settings).events
            parts = (await partitions_of(settings.bootstrap, [topic]))[topic]
            return [r async for r in read_until_end(settings.bootstrap, topic, parts) if r.key == b"thread:w1"
                    and orjson.loads(r.value).get("type") == "om-message-accepted"]
        deadline = time.monotonic() + 60
        while len(events := await accepted()) < 3:  # the fold took the relayed records, sealed
            assert time.monotonic() < deadline and "Traceback" not in worker.tail(100_000), worker.tail(5000)
            await asyncio.sleep(0.2)
        assert not [r for r in events if secret.encode() in r.value]
        await until(lambda: "thread:w2 with content was written to the log unsealed" in worker.tail(100_000),
                    timeout=30)
        assert worker.tail(100_000).count("written to the log unsealed") == 1
        assert secret not in worker.tail(100_000)
    finally:
        await intake.stop()
        await writer.stop()
