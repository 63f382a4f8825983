"""How far a version has folded: its committed positions against the ends of its inputs.

Read from the broker alone (the version's consumer group against the end offsets of the input
log and of its jobs), so `om replay` and `om versions` need nothing from the worker itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import kafka
from ..settings import Settings
from ..topics import Topics, partitions_of

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["Positions", "Watch"]


@dataclass(frozen=True)
class Positions:
    folded: int  # input-log records the version has committed
    total: int  # records in the input log
    jobs_done: int
    jobs_total: int

    @property
    def caught_up(self) -> bool:
        return self.folded >= self.total and self.jobs_done >= self.jobs_total


class Watch:
    """The version's committed positions against the ends of the input log and its jobs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[Any] = []  # aiokafka's TopicPartition

    async def start(self) -> None:
        from aiokafka import TopicPartition

        layout = await partitions_of(self.settings.bootstrap, [self.topics.log, self.topics.jobs])
        self._tps = [TopicPartition(t, p) for t in (self.topics.log, self.topics.jobs) for p in layout.get(t, [])]
        self._admin = kafka.admin(self.settings)
        await self._admin.start()
        self._consumer = kafka.reader(self.settings)
        await self._consumer.start()

    async def positions(self) -> Positions:
        assert self._consumer is not None and self._admin is not None, "start the watch first"
        ends = await self._consumer.end_offsets(self._tps)
        committed = await self._admin.list_consumer_group_offsets(self.settings.app_id)
        done = {tp: (committed[tp].offset if tp in committed and committed[tp].offset >= 0 else 0)
                for tp in self._tps}
        log, jobs = self.topics.log, self.topics.jobs
        return Positions(
            folded=sum(min(done[tp], ends[tp]) for tp in self._tps if tp.topic == log),
            total=sum(ends[tp] for tp in self._tps if tp.topic == log),
            jobs_done=sum(min(done[tp], ends[tp]) for tp in self._tps if tp.topic == jobs),
            jobs_total=sum(ends[tp] for tp in self._tps if tp.topic == jobs))

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()
