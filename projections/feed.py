"""Reading `<ns>.events` from the beginning into a `ContextProjection`.

The projection is a cache of the fold's output: it consumes every partition of `<ns>.events`
(and nothing else: no raw input) without a consumer group, from offset 0, so a restart rebuilds
it exactly, deletions included.

Two positions are tracked for the HTTP side:

- `ready`: the feed has read every partition up to the end offsets it found at start, so the
  views it serves are at least as new as the log was when the server started;
- `applied`: per partition, the highest log offset whose events are all applied (the worker
  marks the last event of each input record with `inputLast`).  `<ns>.events` and `<ns>.log`
  have the same partition count and are both keyed by the memory key with the producers'
  default partitioner, so an event on partition p was caused by the input at (p, inputOffset)
  of the log.  A writer that knows the log position of its record can wait until the
  projection has applied every event caused by it or by a later input (`caught_up`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omstream import kafka
from omstream.schemas.codec import decode_event
from omstream.settings import Settings
from omstream.topics import Topics, partitions_of

from .context import ContextProjection
from .history import EventHistory

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

__all__ = ["ProjectionFeed"]

log = logging.getLogger("omstream.projection")


class ProjectionFeed:
    def __init__(self, settings: Settings, projection: ContextProjection | None = None) -> None:
        self.settings = settings
        self.projection = projection or ContextProjection(time_zone=settings.om.time_zone)
        self.history = EventHistory()  # every memory's events, for the live feed (projections/sse.py)
        self.changed = asyncio.Condition()
        self.ready = False  # True once every partition is read up to its end offset at start
        self.applied: dict[int, int] = {}  # partition -> highest inputOffset applied
        self._ends: dict[Any, int] = {}  # aiokafka's TopicPartition -> end offset at start
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        topic = Topics.of(self.settings).events
        self._consumer = consumer = kafka.reader(self.settings, isolation_level="read_committed")
        await consumer.start()
        layout = await partitions_of(self.settings.bootstrap, [topic])
        parts = [TopicPartition(topic, p) for p in layout.get(topic, [])]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        self._ends = await consumer.end_offsets(parts) if parts else {}
        await self._check_ready()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def run(self) -> None:
        while True:
            await self._read()

    async def read_to_end(self) -> None:
        """Read up to the end offsets taken at `start` (a one-off projection)."""
        while not self.ready:
            await self._read()

    async def _read(self) -> None:
        assert self._consumer is not None
        batch = await self._consumer.getmany(timeout_ms=500, max_records=2000)
        for tp, records in batch.items():
            for record in records:
                self._apply(tp.partition, record.value, record.timestamp)
        if not self.ready:
            await self._check_ready()
        if batch:
            async with self.changed:
                self.changed.notify_all()

    async def _check_ready(self) -> None:
        assert self._consumer is not None
        for tp, end in self._ends.items():
            if await self._consumer.position(tp) < end:
                return
        self.ready = True

    def _apply(self, partition: int, value: bytes, timestamp: int | None = None) -> None:
        try:
            event = decode_event(value)
        except ValueError as exc:
            log.warning("unreadable event skipped", extra={"error": str(exc)[:300]})
            return
        self.projection.apply_event(event)
        self.history.append(event, timestamp)
        if event.input_offset is not None:
            # An input's output is complete with its last event; before that, only the inputs
            # before it are (one record's events may arrive in separate fetches).
            done = event.input_offset if event.input_last else event.input_offset - 1
            self.applied[partition] = max(done, self.applied.get(partition, -1))

    def caught_up(self, partition: int, offset: int) -> bool:
        """Whether every event caused by the log input at (partition, offset), or by a later
        input of that partition, has been applied."""
        return self.applied.get(partition, -1) >= offset

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds or the timeout passes; returns the final value."""
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), timeout)
            except TimeoutError:
                pass
        return bool(predicate())
