"""The key ring: the per-memory data keys of a namespace, kept in the compacted topic `<ns>.keys`.

Every process that encrypts or decrypts content runs one: it reads the topic from the start into
a `KeyBook` and then follows it, so a key created or shredded by any process reaches every other
within a fetch (a shred makes the content unreadable everywhere as soon as the marker is read).
Writes go through an idempotent producer, so one ring's records keep their order.

- `data_key(memory_key)`: the key to encrypt a memory's content with, created on first use.
  Two rings creating it at once both write a proposal; each reads the topic up to its own, takes
  the first (`omstream.crypto.book` says why that survives compaction) and tombstones its own if
  it lost.
- `key(key_id)` (from the cache) / `resolve(key_id)` (catching up first): the key an envelope
  names; `Shredded` when it was shredded (after catching up, an unknown id is a shredded one:
  compaction has removed it).
- `shred(memory_key)`: tombstones the memory's keys and writes the sticky shred marker;
  `successor_key(memory_key)` is the next epoch's key, which a shred leaves current.
- `rewrap()`: rewrites every data key wrapped by an older namespace key under the current one.
- `tick()`: one small record.  A compacted topic is cleaned only up to its active segment, and a
  segment rolls only when a record is appended after `segment.ms`; a ring that shredded writes a
  tick once that time has passed, so an idle namespace forgets on time too.

A ring with `repair=True` (the worker's) also tombstones any proposal it reads that a shred
covers (one that raced the shred), so no wrapped key of a deleted memory outlives the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING

from .. import kafka
from .book import DK, SHRED, TICK, KeyBook, Proposal, proposal_value, shred_value
from .envelope import KEY_BYTES, DataKey
from .errors import KeyNotLoaded, KeyRingError, Shredded
from .wrapping import NamespaceKeys

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

__all__ = ["KeyRing"]

log = logging.getLogger(__name__)

#: How long a fetch of the ring waits at the broker for new records (an idle ring asks 20 times
#: a second, a small load).  A ring waiting for its own record (a key just proposed) sees it
#: after about this long: aiokafka's 500 ms default put half a second on the first message of
#: every memory (measured: 0.51 s a new key, 0.06 s with 50 ms).
FETCH_WAIT_MS = 50
#: Attempts of `data_key` when its proposals keep landing after a shred of the same memory.
_CREATE_TRIES = 5


class KeyRing:
    """The data keys of one namespace's `<ns>.keys` topic (one partition), followed live."""

    def __init__(self, bootstrap: str, topic: str, keys: NamespaceKeys, *, repair: bool = True,
                 roll_after_ms: int | None = None) -> None:
        self.bootstrap, self.topic, self.repair = bootstrap, topic, repair
        self.book = KeyBook(keys)
        self.roll_after_ms = roll_after_ms  # the topic's segment.ms: when a tick rolls a segment
        self._position = 0
        self._moved = asyncio.Condition()
        self._locks: dict[str, asyncio.Lock] = {}
        self._repaired: set[str] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tp: TopicPartition | None = None
        self._follow: asyncio.Task[None] | None = None
        self._timers: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the topic to its end, then follow it."""
        from aiokafka import TopicPartition

        self._tp = TopicPartition(self.topic, 0)
        self._producer = kafka.idempotent_producer(self.bootstrap)
        await self._producer.start()
        self._consumer = kafka.reader(self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_WAIT_MS)
        await self._consumer.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)
        self._follow = asyncio.create_task(self._follow_topic(), name=f"keyring {self.topic}")
        await self.catch_up()

    async def stop(self) -> None:
        for task in [*self._timers, *([self._follow] if self._follow else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await self._producer.stop()

    async def _follow_topic(self) -> None:
        try:
            await self._read_forever()
        except Exception as exc:
            # A ring that stopped following must not let a waiter hang, nor serve stale keys.
            log.exception("the key ring stopped following %s", self.topic)
            async with self._moved:
                self._failure = exc
                self._moved.notify_all()

    async def _read_forever(self) -> None:
        assert self._consumer is not None and self._tp is not None
        while True:
            batch = await self._consumer.getmany(self._tp, timeout_ms=200)
            for record in batch.get(self._tp, []):
                self.book.apply(record.key, record.value, record.offset)
            position = await self._consumer.position(self._tp)
            if self.repair:
                await self._repair()
            if position != self._position or batch:
                async with self._moved:
                    self._position = position
                    self._moved.notify_all()

    async def _repair(self) -> None:
        for key_id in sorted(self.book.repairs - self._repaired):
            self._repaired.add(key_id)
            log.info("tombstoning data key %s, written after its memory was shredded", key_id)
            await self._send(DK + key_id, None)

    async def _wait_past(self, offset: int) -> None:
        """Until the ring has applied every record before `offset`."""
        async with self._moved:
            await self._moved.wait_for(lambda: self._position >= offset or self._failure is not None)
            if self._failure is not None:
                raise KeyRingError(f"the key ring of {self.topic} stopped following it") from self._failure

    async def catch_up(self) -> None:
        """Until the ring has read everything written to the topic before this call."""
        assert self._consumer is not None and self._tp is not None
        end = (await self._consumer.end_offsets([self._tp]))[self._tp]
        await self._wait_past(end)

    async def _send(self, key: str, value: bytes | None) -> int:
        assert self._producer is not None
        meta = await self._producer.send_and_wait(self.topic, value, key=key.encode(), partition=0)
        return int(meta.offset)

    # --- keys -----------------------------------------------------------------------------------
    def key(self, key_id: str) -> DataKey:
        """The key of `key_id` as far as read: `Shredded`, or `KeyNotLoaded` (then `resolve`)."""
        return self.book.key(key_id)

    async def resolve(self, key_id: str) -> DataKey:
        """The key of `key_id`, catching up with the topic first if needed; `Shredded` if gone."""
        try:
            return self.book.key(key_id)
        except KeyNotLoaded:
            await self.catch_up()
        try:
            return self.book.key(key_id)
        except KeyNotLoaded:
            raise Shredded(key_id) from None  # compacted away: only a shred removes a key

    async def prime(self, key_id: str) -> None:
        """Load `key_id` if it still exists (a shredded one is not an error here)."""
        with contextlib.suppress(Shredded):
            await self.resolve(key_id)

    async def data_key(self, memory_key: str) -> DataKey:
        """The key that encrypts `memory_key`'s content, created if the memory has none.

        A known key is served from the cache: if another process shredded it a moment ago, what
        is sealed now is shredded with the memory it was written to, as it should be."""
        return await self._get_or_create(memory_key, 0)

    async def successor_key(self, memory_key: str) -> DataKey:
        """The key of the memory's next epoch, created if needed: what must outlive the shred of
        the current epoch is sealed with it (in resource scope, the observations the resource
        keeps when one of its threads is deleted); `shred` then makes it the current key."""
        return await self._get_or_create(memory_key, 1)

    async def _get_or_create(self, memory_key: str, ahead: int) -> DataKey:
        found = self.book.current(memory_key, ahead)
        if found is not None:  # the common case: no lock to make or take
            return self.book.key(found.key_id)
        lock = self._locks.setdefault(memory_key, asyncio.Lock())
        async with lock:
            found = self.book.current(memory_key, ahead)
            if found is not None:
                return self.book.key(found.key_id)
            await self.catch_up()
            for _ in range(_CREATE_TRIES):
                found = self.book.current(memory_key, ahead)
                if found is not None:
                    return self.book.key(found.key_id)
                mine = await self._propose(memory_key, self.book.epoch(memory_key) + ahead)
                found = self.book.current(memory_key, ahead)
                if found is not None and found.key_id != mine:
                    await self._send(DK + mine, None)  # lost the race: never used, so forget it
            raise KeyRingError(f"could not create a data key for {memory_key}: it is shredded as fast")

    async def _propose(self, memory_key: str, epoch: int) -> str:
        key_id = os.urandom(8).hex()
        fingerprint, wrapped = self.book.namespace_keys.wrap(os.urandom(KEY_BYTES), key_id, memory_key, epoch)
        offset = await self._send(DK + key_id, proposal_value(
            Proposal(key_id, memory_key, epoch, -1, fingerprint, wrapped)))
        await self._wait_past(offset + 1)
        return key_id

    async def shred(self, memory_key: str, through: int | None = None, at: tuple[int, int] | None = None) -> None:
        """Make every key of the memory up to epoch `through` (default: its current epoch)
        unreadable, everywhere; `at` names the deletion record (input-log partition, offset) the
        marker is written for.  Nothing is written when those keys are shredded already (a
        deletion shredded again after a crash, or by another version)."""
        await self.catch_up()  # the epoch of the marker must cover every key written so far
        plan = self.book.shred_plan(memory_key, through)
        if plan is None:
            return
        epoch, key_ids = plan
        for key_id in key_ids:
            await self._send(DK + key_id, None)
        offset = await self._send(SHRED + memory_key, shred_value(epoch, at))
        await self._wait_past(offset + 1)
        log.info("shredded the data keys of %s (epoch %d)", memory_key, epoch)
        if self.roll_after_ms is not None:
            timer = asyncio.create_task(self._tick_later(self.roll_after_ms / 1000 + 1))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)

    async def _tick_later(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        await self.tick()

    async def tick(self) -> int:
        """Append a tick; returns its offset.  Rolls the active segment once it is `segment.ms` old."""
        return await self._send(TICK.decode(), b"{}")

    async def rewrap(self) -> int:
        """Rewrite every live data key wrapped by an older namespace key; returns how many."""
        await self.catch_up()
        stale = self.book.stale_wrapping()
        keys = self.book.namespace_keys
        last = -1
        for p in stale:
            material = self.book.key(p.key_id).material
            fingerprint, wrapped = keys.wrap(material, p.key_id, p.memory_key, p.epoch)
            last = await self._send(DK + p.key_id, proposal_value(
                Proposal(p.key_id, p.memory_key, p.epoch, p.order, fingerprint, wrapped)))
        if last >= 0:
            await self._wait_past(last + 1)
        return len(stale)
