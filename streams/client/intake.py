"""What a writer of `<ns>.log` must respect of `<ns>.intake` (plain producers' records, relayed
into the log by the worker, `omstream.worker.relay`).

A plain producer's records keep their order through the relay, so its own command never
overtakes its own message.  A command sent through `OmClient` goes straight to the log, so it
could overtake a plain producer's message that was acknowledged in the intake but not yet relayed
("a command can never overtake the message sent before it").  `IntakeBarrier.settled(key)`
closes that: it returns once every record the memory's intake partition held when it was called
has been relayed, which the relay shows by deleting it (it deletes only what the log has, acked).
The wait is the relay's window (tens of ms); an intake without records costs one offsets request.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from omstream.schemas.errors import OmError

from .. import kafka
from ..topics import Topics, memory_partition, partitions_of, sealed

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

    from ..settings import Settings

__all__ = ["IntakeBacklog", "IntakeBarrier"]

#: How often `settled` looks again at the intake's start while records wait to be relayed.
POLL_S = 0.005


class IntakeBacklog(OmError, RuntimeError):
    """Records of plain producers wait in the intake and no relay took them in time."""


class IntakeBarrier:
    """Waits, per memory, until what plain producers wrote before is on the log.  Inactive (every
    call returns at once) without a namespace key or without an intake topic."""

    def __init__(self, settings: Settings, *, timeout_s: float = 10.0) -> None:
        self.settings, self.timeout_s = settings, timeout_s
        self.topic = Topics.of(settings).intake
        self._partitions: list[int] = []
        self._reader: AIOKafkaConsumer | None = None
        self._relayed: dict[int, int] = {}  # partition -> a start offset seen (all before it relayed)

    @property
    def active(self) -> bool:
        return self._reader is not None

    async def start(self) -> None:
        if not sealed(self.settings):
            return
        self._partitions = (await partitions_of(self.settings.bootstrap, [self.topic])).get(self.topic, [])
        if self._partitions:
            self._reader = kafka.reader(self.settings)
            await self._reader.start()

    async def stop(self) -> None:
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None

    async def settled(self, key: bytes) -> None:
        """Returns once the intake partition of `key` holds nothing written before this call;
        `IntakeBacklog` after `timeout_s` (no worker relays the intake)."""
        if self._reader is None:
            return
        from aiokafka import TopicPartition

        tp = TopicPartition(self.topic, memory_partition(key, self._partitions))
        end = (await self._reader.end_offsets([tp]))[tp]
        if self._relayed.get(tp.partition, -1) >= end:
            return  # nothing written since the last wait: no second round trip
        deadline = time.monotonic() + self.timeout_s
        while (start := (await self._reader.beginning_offsets([tp]))[tp]) < end:
            if time.monotonic() > deadline:
                raise IntakeBacklog(
                    f"plain producers' records wait in {self.topic} (partition {tp.partition}) and no worker "
                    f"relayed them in {self.timeout_s:.0f} s: start a worker, then send again")
            await asyncio.sleep(POLL_S)
        # The partition's start only grows (the relay deletes what it relayed).
        self._relayed[tp.partition] = max(start, self._relayed.get(tp.partition, -1))
