"""The one reader of `<ns>.events`: every partition, no consumer group, batch after batch.

Three readers follow the event topic: the context projection (`projections/feed.py`), the search
index (`projections/search/feed.py`) and `om tail` (`omstream.cli.tail`).  Each has an
`EventsFollower`, which owns the Kafka consumer and its positions; what is done with a batch is
the user's:

- `start` assigns every partition the topic has, takes their end offsets (`ends`: the log as it
  was at start), and places each partition at the offset `positions(source, ends)` gives (a
  store's next offsets; `source` names the topic and its partition count, so a store built from
  another layout can tell and start again), the others at the beginning (or, `latest`, at the end:
  `om tail` without `--from-beginning`);
- `read` is one fetch (`getmany`), as `Batch`; `caught_up` tells whether every partition has been
  read up to its end offset at start (once true, it stays true, across a restart too);
- `run(apply)` applies batch after batch until cancelled, `read_to_end(apply)` until caught up;
- `stop` closes the consumer; `start` may open it again (the search index restarts its feed).

Transactions: the worker writes its events in Kafka transactions, so the projections read
committed records only (`committed`); `om tail` reads them as they are written (its readers drop
a re-sent event by its `seq`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from omstream import kafka
from omstream.settings import Settings
from omstream.topics import Topics, partitions_of

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

__all__ = ["Batch", "EventsFollower", "Positions"]

#: One consumed batch: partition -> its records as (offset, value, Kafka timestamp in ms).
Batch = dict[int, list[tuple[int, bytes, int | None]]]
#: `positions(source, ends)`: the next offset to read per partition (none: from the beginning),
#: given the topic's `name/partitions` and its end offsets at start.
Positions = Callable[[str, dict[int, int]], dict[int, int]]
#: One fetch: how long it waits for records, and how many it takes at most.
FETCH_TIMEOUT_MS, FETCH_RECORDS = 500, 2000


class EventsFollower:
    """A reader of every partition of the events topic of `settings`; see the module."""

    def __init__(self, settings: Settings, positions: Positions | None = None, *, latest: bool = False,
                 committed: bool = True) -> None:
        self.settings = settings
        self.topic = Topics.of(settings).events
        self._positions = positions
        self._latest = latest
        self._committed = committed
        self.ends: dict[Any, int] = {}  # aiokafka's TopicPartition -> end offset at start
        self.ready = False  # every partition read up to `ends` (see `caught_up`)
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        isolation = "read_committed" if self._committed else "read_uncommitted"
        # earliest: a stored offset the topic's retention has passed reads on from what is left.
        consumer = kafka.reader(self.settings, isolation_level=isolation,
                                auto_offset_reset="latest" if self._latest else "earliest")
        self._consumer = consumer
        await consumer.start()
        layout = await partitions_of(self.settings.bootstrap, [self.topic])
        parts = [TopicPartition(self.topic, p) for p in layout.get(self.topic, [])]
        consumer.assign(parts)
        self.ends = await consumer.end_offsets(parts) if parts else {}
        ends = {tp.partition: end for tp, end in self.ends.items()}
        positions = {} if self._positions is None else self._positions(f"{self.topic}/{len(parts)}", ends)
        for tp in parts:
            if tp.partition in positions:
                consumer.seek(tp, positions[tp.partition])
            elif self._latest:
                await consumer.seek_to_end(tp)
            else:
                await consumer.seek_to_beginning(tp)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def read(self) -> Batch:
        """One fetch: each partition's records that came, in order (aiokafka's
        `ConsumerStoppedError` once the consumer is stopped)."""
        assert self._consumer is not None
        fetched = await self._consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=FETCH_RECORDS)
        return {tp.partition: [(r.offset, r.value, r.timestamp) for r in records]
                for tp, records in fetched.items() if records}

    async def caught_up(self) -> bool:
        """Whether every partition has been read up to its end offset at start."""
        if not self.ready:
            assert self._consumer is not None
            for tp, end in self.ends.items():
                if await self._consumer.position(tp) < end:
                    return False
            self.ready = True
        return True

    async def run(self, apply: Callable[[Batch], Awaitable[None]]) -> None:
        """Read and `apply` batch after batch (an empty one too) until cancelled."""
        while True:
            await apply(await self.read())

    async def read_to_end(self, apply: Callable[[Batch], Awaitable[None]]) -> None:
        """Read and `apply` batch after batch until `caught_up`."""
        while not await self.caught_up():
            await apply(await self.read())
