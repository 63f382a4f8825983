"""Reading the messages of `<ns>.log` and `<ns>.events` from the beginning into a `ContextProjection`.

The projection is a cache of the log: it consumes every partition without a consumer group,
from offset 0, so a restart rebuilds it exactly.
"""

from __future__ import annotations

import asyncio
import logging

from omstream.schemas.codec import DecodeFailure, decode_event, decode_input
from omstream.schemas.messages import Message
from omstream.settings import Settings
from omstream.topics import Topics, partitions_of

from .context import ContextProjection

__all__ = ["ProjectionFeed"]

log = logging.getLogger("omstream.projection")


class ProjectionFeed:
    def __init__(self, settings: Settings, projection: ContextProjection | None = None) -> None:
        self.settings = settings
        self.projection = projection or ContextProjection(time_zone=settings.om.time_zone)
        self.changed = asyncio.Condition()
        self.ready = False  # True once every partition is assigned and read from the start
        self._consumer = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        topics = Topics(self.settings.namespace)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap, enable_auto_commit=False, group_id=None)
        await self._consumer.start()
        names = [topics.log, topics.events]
        layout = await partitions_of(self.settings.bootstrap, names)
        parts = [TopicPartition(name, p) for name in names for p in layout.get(name, [])]
        self._consumer.assign(parts)
        await self._consumer.seek_to_beginning(*parts)
        self._events_topic = topics.events
        self.ready = True

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=500, max_records=2000)
            if not batch:
                continue
            for tp, records in batch.items():
                for record in records:
                    self._apply(tp.topic, record.value)
            async with self.changed:
                self.changed.notify_all()

    def _apply(self, topic: str, value: bytes) -> None:
        if topic == self._events_topic:
            try:
                self.projection.apply_event(decode_event(value))
            except ValueError as exc:
                log.warning("unreadable event skipped", extra={"error": str(exc)[:300]})
            return
        record = decode_input(value)
        if isinstance(record, Message):
            self.projection.apply_message(record)
        elif isinstance(record, DecodeFailure):
            pass  # the worker dead-letters it; the projection only shows valid messages

    async def wait_until(self, predicate, timeout: float) -> bool:
        """Wait until `predicate()` holds or the timeout passes; returns the final value."""
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), timeout)
            except asyncio.TimeoutError:
                pass
        return bool(predicate())
