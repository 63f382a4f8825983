"""Reading `<ns>.events` into the search index, apart from the context projection.

The index has a consumer of its own (no group, every partition, from its stored offsets, as
`ProjectionFeed` does), so a slow embedder (a hosted one, or a long rebuild after a change of
embedder) never delays the context windows, and the index knows its own position: a restart
reads on from where it committed, a new embedder's empty index reads from the beginning (the
rebuild), and a topic recreated or repartitioned since empties it first.

Each event is opened (`omstream.crypto.opening.Opener`) before it is decoded: one of a deleted
memory is passed over, as in the context projection.

`start_search(settings)` is what `om serve` starts: the embedder of `[omstream] embedder`, its
index beside the read model, the feed, and the `ObservationSearch` the recall operation asks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omstream.crypto.opening import Opener
from omstream.crypto.sealing import PLAIN, Sealer
from omstream.embedding import Embedder, make_embedder
from omstream.projections.store import store_dir
from omstream.schemas.codec import decode_event
from omstream.settings import Settings

from ..feed import open_events
from .index import IndexProjection
from .search import ObservationSearch
from .sqlite_vec import SqliteVecIndex, open_index

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

__all__ = ["Batch", "IndexFeed", "SearchService", "start_search"]

log = logging.getLogger("omstream.search")

#: One consumed batch: partition -> its records as (offset, value, Kafka timestamp in ms).
Batch = dict[int, list[tuple[int, bytes, int | None]]]


class IndexFeed:
    """`<ns>.events` into an `IndexProjection`; `listeners` are called with each batch once it
    is committed (the lag bench's probe)."""

    def __init__(self, settings: Settings, projection: IndexProjection, index: SqliteVecIndex,
                 sealer: Sealer = PLAIN) -> None:
        self.settings, self.projection, self.index = settings, projection, index
        self.opener = Opener(sealer)
        self.ready = False
        self.listeners: list[Callable[[Batch], None]] = []
        self._ends: dict[Any, int] = {}
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer, self._ends = await open_events(self.settings, self._stored)
        stored = self.index.positions()
        log.info("search index feed started", extra={
            "index": self.index.name, "embedder": self.projection.embedder.name, "path": str(self.index.path),
            "entries": self.index.count(), "positions": {str(p): o for p, o in stored.items()}})
        await self._check_ready()

    def _stored(self, source: str, ends: dict[int, int]) -> dict[int, int]:
        """The next offset to read per partition; the index emptied if its source changed."""
        positions, built_from = self.index.positions(), self.index.source()
        if built_from is not None and (built_from != source or
                                       any(offset > ends.get(p, 0) for p, offset in positions.items())):
            self.index.reset(f"the index was built from {built_from}, the topic is now {source}")
            self.projection.forget()
            positions, built_from = {}, None
        if built_from is None:
            with self.index.transaction():
                self.index.set_source(source)
        return positions

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def run(self) -> None:
        while True:
            await self.read()

    async def read_to_end(self) -> None:
        while not self.ready:
            await self.read()

    async def read(self) -> int:
        """One batch; the number of events it held."""
        assert self._consumer is not None
        records = await self._consumer.getmany(timeout_ms=500, max_records=2000)
        batch: Batch = {tp.partition: [(r.offset, r.value, r.timestamp) for r in rs]
                        for tp, rs in records.items() if rs}
        if batch:
            await self.apply(batch)
        if not self.ready:
            await self._check_ready()
        return sum(map(len, batch.values()))

    async def apply(self, batch: Batch) -> None:
        events = []
        await self.opener.prepare(value for records in batch.values() for _, value, _ in records)
        for records in batch.values():
            for _, value, _ in records:
                opened = self.opener.open(value)
                if opened is None:
                    continue  # of a deleted memory (counted by the opener)
                try:
                    events.append(decode_event(opened))
                except ValueError as exc:
                    log.warning("unreadable event skipped", extra={"error": str(exc)[:300]})
        # Partitions hold different memories: their events' relative order does not matter.
        await self.projection.apply(events, {p: records[-1][0] + 1 for p, records in batch.items()})
        for listener in self.listeners:
            listener(batch)

    async def _check_ready(self) -> None:
        assert self._consumer is not None
        for tp, end in self._ends.items():
            if await self._consumer.position(tp) < end:
                return
        self.ready = True


@dataclass
class SearchService:
    """What `om serve` holds: run `feed` as a task beside the context feed, hand `search` to
    the recall operation, `close` at shutdown."""

    embedder: Embedder
    index: SqliteVecIndex
    feed: IndexFeed
    search: ObservationSearch

    async def close(self) -> None:
        await self.feed.stop()
        self.index.close()


async def start_search(settings: Settings, embedder: Embedder | None = None,
                       sealer: Sealer = PLAIN) -> SearchService:
    """The search of `settings` (`[omstream] embedder`), its index opened and its feed started;
    `sealer` (started) opens the events of a namespace with a key."""
    embedder = embedder or make_embedder(settings.embedder)
    # A first call loads a local model (a second or so) or tells a remote one's dimension: done
    # here, so neither the first batch nor the first search waits for it.
    probe = getattr(embedder, "probe", None)
    await (probe() if probe is not None else embedder.embed(["warm up"]))
    index = await asyncio.to_thread(open_index, store_dir(settings), embedder.name, embedder.dim)
    projection = IndexProjection(index, embedder)
    feed = IndexFeed(settings, projection, index, sealer)
    try:
        await feed.start()
    except BaseException:
        await feed.stop()
        index.close()
        raise
    return SearchService(embedder, index, feed, ObservationSearch(index, embedder))
