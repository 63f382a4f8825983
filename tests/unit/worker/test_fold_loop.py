"""The fold agent's loop without a broker (`omstream.worker.fold_loop.FoldLoop`): fold, send,
store, ack, in that order, and what a crash between two steps leaves behind.

The broker is faked (the sender, the changelog, the acks); the local store is a real RocksDB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from types import SimpleNamespace

import orjson
import pytest
import rocksdict

from omstream.limits import Limits
from omstream.pipeline.folding import FoldContext
from omstream.pipeline.memories import StateCache, StateWrite
from omstream.pipeline.sending import Headers, OutputRecord
from omstream.pipeline.storage import load_state
from omstream.schemas.codec import encode
from omstream.settings import Settings
from omstream.topics import Topics
from omstream.versions import WorkerStats
from omstream.worker.fold_loop import FoldLoop
from omstream.worker.table import StateStore
from tests.helpers import T0, engine, message, until

KEY = b"thread:t1"
TOPICS = Topics("om")
LOG_MS = round((T0 + timedelta(hours=1)).timestamp() * 1000)


def context() -> FoldContext:
    return FoldContext(Settings(), TOPICS, engine(10_000), Limits(), b"secret")


def record(offset: int, thread: str = "t1"):
    return SimpleNamespace(topic=TOPICS.log, partition=0, offset=offset, key=f"thread:{thread}".encode(),
                           value=encode(message(offset, thread)), headers=[], timestamp=LOG_MS / 1000)


class Sender:
    """The producer: journals each batch of outputs once the broker "has" it."""

    def __init__(self, journal: list) -> None:
        self.journal = journal
        self.failures = 0  # sends that fail before one succeeds
        self.gate: asyncio.Event | None = None  # the broker answers once set
        self.sent: list[OutputRecord] = []

    async def send_all(self, records: Sequence[OutputRecord], headers: Headers | None = None) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker restarting")
        if self.gate is not None:
            await self.gate.wait()
        self.sent += records
        self.journal.append(("sent", len(records)))


class Changelog:
    """The state table's changelog topic: offsets per partition, journaled once acknowledged."""

    def __init__(self, journal: list) -> None:
        self.journal = journal
        self.records: list[StateWrite] = []
        self.failures = 0
        self.gate: asyncio.Event | None = None

    async def append(self, writes: Sequence[StateWrite]) -> dict[int, int]:
        if self.failures:
            self.failures -= 1
            self.journal.append(("changelog-failed", len(writes)))
            raise ConnectionError("not enough replicas")
        if self.gate is not None:
            await self.gate.wait()
        reached: dict[int, int] = {}
        for write in writes:
            self.records.append(write)
            reached[write.partition] = len(self.records) - 1
        self.journal.append(("changelog", len(writes)))
        return reached


class Journaled:
    """A partition's RocksDB that journals its writes."""

    def __init__(self, db: rocksdict.Rdict, journal: list) -> None:
        self._db, self.journal = db, journal

    def get(self, key: bytes):
        return self._db.get(key)

    def keys(self, from_key: bytes):
        return self._db.keys(from_key=from_key)

    def write(self, batch: rocksdict.WriteBatch) -> None:
        size = batch.len()  # a batch written is consumed
        self._db.write(batch)
        self.journal.append(("local", size))


class Files:
    """The local RocksDB of the table, one database per partition, and the offsets reached."""

    def __init__(self, root, journal: list) -> None:
        self.root, self.journal = root, journal
        self.dbs: dict[int, Journaled] = {}
        self.offsets: dict[int, int] = {}

    def db(self, partition: int):
        if partition not in self.dbs:
            raw = rocksdict.Rdict(str(self.root / f"p{partition}"), options=rocksdict.Options(raw_mode=True))
            self.dbs[partition] = Journaled(raw, self.journal)
        return self.dbs[partition]

    def reached(self, partition: int, offset: int) -> None:
        self.offsets[partition] = offset

    def close(self) -> None:
        for db in self.dbs.values():
            db._db.close()


@pytest.fixture()
def world(tmp_path):
    journal: list = []
    files = Files(tmp_path, journal)
    store = StateStore(Changelog(journal), files)
    acked: list[int] = []

    def ack(message) -> None:
        acked.append(message.offset)
        journal.append(("ack", message.offset))

    loop = FoldLoop(context(), Sender(journal), store, StateCache(100), ack, stats=WorkerStats(), busy=set())
    yield SimpleNamespace(loop=loop, journal=journal, store=store, files=files, acked=acked,
                          sender=loop.sender, changelog=store.changelog)
    files.close()


def stored_state(world):
    return load_state(lambda k: world.store.read(0, k), lambda p: world.store.scan(0, p), KEY).state


def steps(journal: list) -> list[str]:
    return [step for step, _ in journal]


async def test_outputs_then_changelog_then_local_store_then_acks(world):
    await world.loop.take([record(0), record(1)], generation=1)
    await world.loop.wait_stored()
    assert steps(world.journal) == ["sent", "changelog", "local", "ack", "ack"]
    # The outputs are the batch's events (a dead letter or a job would go in the same send).
    assert {r.topic for r in world.sender.sent} == {TOPICS.events}
    assert world.acked == [0, 1]
    assert stored_state(world).pending_ids == ("t1-m0", "t1-m1")
    # The local store notes the changelog offset it holds, for Faust's recovery.
    assert world.files.offsets == {0: len(world.changelog.records) - 1}


async def test_a_crash_before_the_outputs_are_sent_stores_and_acks_nothing(world):
    world.sender.failures = 1  # the first send fails, and is retried ...
    world.sender.gate = asyncio.Event()  # ... until the broker that never answers
    task = asyncio.create_task(world.loop.run(_batches([record(0)]), lambda: 1))
    await asyncio.sleep(0.3)
    task.cancel()  # the worker dies
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.journal == [] and world.changelog.records == [] and world.acked == []
    assert world.store.read(0, KEY) is None


async def test_a_crash_between_the_changelog_and_the_local_store_acks_nothing(world):
    world.changelog.gate = asyncio.Event()  # the changelog never answers
    await world.loop.take([record(0)], generation=1)  # folded and sent; the store runs on
    assert steps(world.journal) == ["sent"]
    world.loop.abandon()  # the loop ends (a crash, a revocation): the store in flight is cancelled
    await asyncio.sleep(0.05)
    assert steps(world.journal) == ["sent"] and world.acked == [] and world.store.read(0, KEY) is None


async def test_a_failed_changelog_write_is_retried_before_the_local_store_and_the_acks(world):
    world.changelog.failures = 1
    await world.loop.take([record(0)], generation=1)
    await world.loop.wait_stored()
    assert steps(world.journal) == ["sent", "changelog-failed", "changelog", "local", "ack"]


async def test_stores_stay_in_batch_order_while_the_next_batch_folds_from_the_unsaved_states(world):
    world.changelog.gate = gate = asyncio.Event()  # the first batch's store waits on the broker
    await world.loop.take([record(0), record(1)], generation=1)
    second = asyncio.create_task(world.loop.take([record(2), record(3)], generation=1))
    # The second batch is folded and sent while the first is being stored ...
    await until(lambda: steps(world.journal) == ["sent", "sent"])
    assert world.store.read(0, KEY) is None and world.acked == []
    assert not second.done()  # ... and its store waits for the first's
    gate.set()
    await second
    await world.loop.wait_stored()
    assert steps(world.journal) == ["sent", "sent", "changelog", "local", "ack", "ack",
                                    "changelog", "local", "ack", "ack"]
    # Folded from the first batch's unsaved state, not from the (then empty) store: one memory,
    # its events numbered on.
    assert stored_state(world).pending_ids == ("t1-m0", "t1-m1", "t1-m2", "t1-m3")
    seqs = [orjson.loads(r.value)["seq"] for r in world.sender.sent]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def test_a_rebalance_waits_for_the_store_and_reads_memories_from_it_again(world):
    world.changelog.gate = gate = asyncio.Event()
    await world.loop.take([record(0)], generation=1)
    rebalanced = asyncio.create_task(world.loop.take([record(1)], generation=2))
    await asyncio.sleep(0.05)
    assert steps(world.journal) == ["sent"]  # the new generation folds nothing before the store
    gate.set()
    await rebalanced
    await world.loop.wait_stored()
    assert steps(world.journal) == ["sent", "changelog", "local", "ack", "sent", "changelog", "local", "ack"]
    assert stored_state(world).pending_ids == ("t1-m0", "t1-m1")


async def test_a_redelivered_record_is_skipped_by_the_state_that_covers_it(world):
    await world.loop.take([record(0), record(1)], generation=1)
    await world.loop.wait_stored()
    sent = len(world.sender.sent)
    await world.loop.take([record(1)], generation=2)  # read again after a restart
    await world.loop.wait_stored()
    assert len(world.sender.sent) == sent and world.acked == [0, 1, 1]


async def test_the_stats_note_every_memory_a_batch_stores(world):
    world.loop.busy.add(b"thread:t2")  # marked busy before; no longer holding inputs
    await world.loop.take([record(0), record(0, thread="t2")], generation=1)
    assert set(world.loop.stats.memories) == {"thread:t1", "thread:t2"}
    assert world.loop.busy == set()


async def _batches(batches_of_records):
    yield batches_of_records
    await asyncio.Event().wait()  # the log has nothing more
