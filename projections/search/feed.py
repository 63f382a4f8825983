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

from omstream.crypto.opening import Opener
from omstream.crypto.sealing import PLAIN, Sealer
from omstream.projections.search.embedding import Embedder, make_embedder
from omstream.projections.store.store import store_dir
from omstream.schemas.codec import decode_event
from omstream.settings import Settings

from ..follower import Batch, EventsFollower
from .index import IndexProjection
from .search import ObservationSearch
from .sqlite_vec import SqliteVecIndex, open_index

__all__ = ["IndexFeed", "SearchService", "start_search"]

log = logging.getLogger("omstream.search")


class IndexFeed:
    """`<ns>.events` into an `IndexProjection`; `listeners` are called with each batch once it
    is committed (the lag bench's probe)."""

    def __init__(self, settings: Settings, projection: IndexProjection, index: SqliteVecIndex,
                 sealer: Sealer = PLAIN) -> None:
        self.settings, self.projection, self.index = settings, projection, index
        self.opener = Opener(sealer)
        self.ready = False
        self.listeners: list[Callable[[Batch], None]] = []
        self._follower = EventsFollower(settings, self._stored)

    async def start(self) -> None:
        await self._follower.start()
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
        await self._follower.stop()

    async def run(self) -> None:
        await self._follower.run(self._take)

    async def read_to_end(self) -> None:
        await self._follower.read_to_end(self._take)

    async def read(self) -> int:
        """One batch; the number of events it held."""
        batch = await self._follower.read()
        await self._take(batch)
        return sum(map(len, batch.values()))

    async def _take(self, batch: Batch) -> None:
        if batch:
            await self.apply(batch)
        if not self.ready:
            await self._check_ready()

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
        self.ready = await self._follower.caught_up()


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
