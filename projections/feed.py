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

With a store (`om serve`: projections/store/store.py) the projection is persistent: `start` loads
the views, the history's last `seq`s and the position, and reads on from the stored offsets, so
a restart costs what was written since, not the whole topic.  Each consumed batch is one
transaction (`_apply_batch`): its history rows, the views it changed, the memories' last `seq`s
and the next offsets commit together, so after a crash the views and the position agree and
the batch is read again, its events applied once.  A store whose source does not match the
topic any more (partitions changed, or the topic was recreated and is shorter than the stored
offsets) is emptied and rebuilt.

In a namespace with a key (`omstream.crypto`), each batch's keys are loaded (`prepare`) before it
is applied, and each event is opened before it is decoded; one whose memory was deleted (its key
shredded) or that does not authenticate is passed over and counted (`opener.passed`).  The store
keeps the event's bytes as read, sealed: a copy of the data directory holds no readable history of
a memory once its key is shredded (`StoredHistory` opens them when they are served).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from omstream.crypto.opening import SHREDDED, Opener, skeleton
from omstream.crypto.sealing import PLAIN, Sealer, sealer_of
from omstream.engine.rules.resolution import resolve
from omstream.schemas.codec import decode_event
from omstream.schemas.keys import memory_key
from omstream.settings import Settings

from .follower import Batch, EventsFollower
from .store.store import ReadModelStore
from .store.stored_history import StoredHistory
from .views.context import ContextProjection
from .views.history import EventHistory
from .views.resource_views import ResourceRendering
from .views.working_memory import WorkingMemoryRendering

__all__ = ["ProjectionFeed"]

log = logging.getLogger("omstream.projection")


class ProjectionFeed:
    """The projection and its history, fed from `<ns>.events`; in memory, or persistent with a
    `store` (which the feed then owns: `stop` closes it)."""

    def __init__(self, settings: Settings, projection: ContextProjection | None = None,
                 store: ReadModelStore | None = None, sealer: Sealer | None = None) -> None:
        self.settings = settings
        # None: the settings' own (`sealer_of`), started and stopped with the feed, so a one-off
        # projection of a namespace with a key opens its events too; `om serve` shares one.
        self._own_sealer = sealer is None
        self.opener = Opener(sealer or PLAIN)
        self.projection = projection or ContextProjection(
            time_zone=settings.om.time_zone, retrieval=resolve(settings.om).retrieval,
            resource=ResourceRendering.of(settings.om), working_memory=WorkingMemoryRendering.of(settings.om))
        self.store = store
        # Every memory's events, for the live feed (projections/http/sse.py).
        self._stored = None if store is None else StoredHistory(store, {}, self.opener)
        self.history: EventHistory = self._stored or EventHistory()
        self.changed = asyncio.Condition()
        self.ready = False  # True once every partition is read up to its end offset at start
        self.applied: dict[int, int] = {}  # partition -> highest inputOffset applied
        self._follower = EventsFollower(settings, self._load)

    async def start(self) -> None:
        if self._own_sealer:
            self.opener.sealer = sealer_of(self.settings, repair=False)
            await self.opener.sealer.start()
        await self._follower.start()
        await self._check_ready()

    def _load(self, source: str, ends: dict[int, int]) -> dict[int, int]:
        """The stored state into memory; the next offset to read per partition (none: from
        the beginning)."""
        store = self.store
        if store is None:
            return {}
        positions, built_from = store.positions(), store.source()
        # Another layout, or a topic recreated since (it ends before what was read).
        if built_from is not None and (built_from != source or
                                       any(offset > ends.get(p, 0) for p, (offset, _) in positions.items())):
            store.reset(f"the store was built from {built_from}, the topic is now {source}")
            positions, built_from = {}, None
        if built_from is None:
            with store.transaction():
                store.set_source(source)
        self.projection.adopt(store.load_views(self.projection.time_zone))
        last_seqs = store.last_seqs()
        self.projection.last_seq.update(last_seqs)
        assert self._stored is not None
        self._stored.restore(last_seqs)
        self.applied = {p: applied for p, (_, applied) in positions.items() if applied >= 0}
        log.info("read model loaded", extra={
            "path": str(store.path), "threads": len(self.projection.threads), "memories": len(last_seqs),
            "positions": {str(p): offset for p, (offset, _) in positions.items()}})
        return {p: offset for p, (offset, _) in positions.items()}

    async def stop(self) -> None:
        await self._follower.stop()
        if self.store is not None:
            self.store.close()
        if self._own_sealer:
            await self.opener.sealer.stop()

    async def run(self) -> None:
        await self._follower.run(self._take)

    async def read_to_end(self) -> None:
        """Read up to the end offsets taken at `start` (a one-off projection)."""
        await self._follower.read_to_end(self._take)

    async def _take(self, batch: Batch) -> None:
        """One fetched batch (maybe empty): applied, then `ready` checked, then readers woken."""
        await self.opener.prepare(value for records in batch.values() for _, value, _ in records)
        self._apply_batch(batch)
        if not self.ready:
            await self._check_ready()
        if batch:
            async with self.changed:
                self.changed.notify_all()

    async def _check_ready(self) -> None:
        if not await self._follower.caught_up():
            return
        self.ready = True
        if self.opener.passed:  # how much of the topic belongs to deleted memories (or fails)
            log.info("events passed over while catching up", extra={"passed": dict(self.opener.passed)})

    def _apply_batch(self, batch: Batch) -> None:
        """Apply one consumed batch; with a store, as one transaction (its steps below)."""
        store = self.store
        if store is None:
            for partition, records in batch.items():
                for _, value, timestamp in records:
                    self._apply(partition, value, timestamp)
            return
        if not batch:
            return
        with store.transaction():
            # Step 1: the events, into the views (in memory) and the history's rows.
            memories = {key for partition, records in batch.items() for _, value, timestamp in records
                        if (key := self._apply(partition, value, timestamp)) is not None}
            # Step 2: the views they changed (dropped ones deleted).
            store.write_views(self.projection)
            # Step 3: the memories' last seqs, which make a re-read event a duplicate.
            store.set_last_seqs({key: self.projection.last_seq[key] for key in memories})
            # Step 4: the position the views are at: read on after this batch.
            for partition, records in batch.items():
                store.set_position(partition, records[-1][0] + 1, self.applied.get(partition, -1))

    def _apply(self, partition: int, value: bytes, timestamp: int | None = None) -> str | None:
        """Apply one event; its memory key, None for an unreadable one or one passed over (of a
        deleted memory: only its clear part reaches the views, `_apply_skeleton`)."""
        opened = self.opener.open(value)
        if opened is None:
            # Passed over, but its input is still done: a reader waiting for it must not wait.
            clear = orjson.loads(value)
            self._advance(partition, clear.get("inputOffset"), bool(clear.get("inputLast")))
            return self._apply_skeleton(clear) if self.opener.last == SHREDDED else None
        try:
            event = decode_event(opened)
        except ValueError as exc:
            log.warning("unreadable event skipped", extra={"error": str(exc)[:300]})
            return None
        self.projection.apply_event(event)
        self.history.append(event, timestamp, value)  # as read: sealed at rest
        self._advance(partition, event.input_offset, bool(event.input_last))
        return str(event.memory_key)

    def _apply_skeleton(self, clear: dict[str, Any]) -> str | None:
        """A deleted memory's event, without its content, into the views only (never into the
        history, which serves events as they were): its memory's deletion event follows it, and
        until then it keeps what the views know of ids and positions as the live read model
        had it (in resource scope, the other threads' observed messages)."""
        try:
            event = decode_event(orjson.dumps(skeleton(clear)))
        except ValueError:
            return None
        self.projection.apply_event(event)
        return str(event.memory_key)

    def _advance(self, partition: int, input_offset: int | None, input_last: bool) -> None:
        if input_offset is not None:
            # An input's output is complete with its last event; before that, only the inputs
            # before it are (one record's events may arrive in separate fetches).
            done = input_offset if input_last else input_offset - 1
            self.applied[partition] = max(done, self.applied.get(partition, -1))

    def memory_of(self, thread_id: str) -> str | None:
        """The memory key of a thread's events: in thread scope its own; in resource scope its
        resource's, known from the thread's first message (None before it)."""
        view = self.projection.threads.get(thread_id)
        if view is not None and view.memory_key:
            return view.memory_key
        if self.settings.om.scope == "resource":
            return None
        return memory_key(self.settings.om, thread_id, None)

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
