"""The search index as a projection of `<ns>.events` (spec §12, vector indexing).

Fed only by the fold's events, in their order, it keeps one entry per chunk of every
observation group the memory's observations carry:

- `data-om-observation-end` and `data-om-activation` (observation or reflection) carry the new
  observation text; its groups are embedded and upserted under their deterministic ids
  (`groups.entry_id`), so an event applied twice, or replayed, leaves the same entries.  A
  buffered chunk (`data-om-buffering-end`) is indexed when it is activated, the moment it joins
  the memory; a reflection's new log is indexed as its groups (`kind="reflection"`), and the
  older groups it condensed stay searchable, as older memory;
- `om-message-accepted` tells each thread's resource and last activity, `data-om-thread-update`
  its title (what a result shows about its thread);
- `om-memory-deleted` removes every entry and thread of the memory (of one thread only when it
  deletes one thread of a resource memory: it then carries the observations the resource keeps).
  Each memory's last `seq` is kept after the deletion, so an event re-sent from before it is a
  duplicate and its groups never come back; a rebuild replays the deletion in order as well.

A batch is applied in three steps: its events are read in order into a list of operations, the
new chunks are embedded in one call (outside any transaction: a remote embedder is awaited),
then the operations, the memories' `seq`s and the position commit in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from omstream.engine.prompting.sections import shown_thread_id, split_sections
from omstream.projections.search.embedding import Embedder
from omstream.schemas.base import iso

from .groups import ObservationGroup, chunks, entry_id, parse_groups
from .vectors import Entry, MemoryMeta, SearchStore, ThreadMeta

__all__ = ["IndexProjection", "Pending"]

log = logging.getLogger("omstream.search")

_CARRIERS = ("data-om-observation-end", "data-om-activation")


@dataclass
class Pending:
    """A chunk to embed and upsert (the vector comes in step 2)."""

    id: str
    memory_key: str
    thread_id: str
    text: str  # the chunk's, what is embedded
    metadata: dict[str, Any]


# An operation of a batch, in event order: ("upsert", [Pending...]) or ("delete", memory_key).
Operation = tuple[str, Any]


def resource_of(memory_key: str) -> str | None:
    return memory_key.removeprefix("resource:") if memory_key.startswith("resource:") else None


class IndexProjection:
    """The index and its bookkeeping (`SqliteVecIndex`, or any `SearchStore`), kept from events
    by `apply`."""

    def __init__(self, index: SearchStore, embedder: Embedder) -> None:
        if index.dim != embedder.dim:
            raise ValueError(f"a {index.dim}-dimensional index for the {embedder.dim}-dimensional {embedder.name}")
        self.index, self.embedder = index, embedder
        self._memories: dict[str, MemoryMeta] = {}
        self._threads: dict[str, ThreadMeta] = {}

    def forget(self) -> None:
        """Drop what is cached (the store was emptied)."""
        self._memories.clear()
        self._threads.clear()

    def _memory(self, memory_key: str) -> MemoryMeta:
        if memory_key not in self._memories:
            self._memories[memory_key] = self.index.memory(memory_key)
        return self._memories[memory_key]

    @staticmethod
    def _owned_groups(event: Any) -> list[tuple[str | None, ObservationGroup]]:
        """The event's groups, each with the shown id of the resource memory's thread section that
        holds it (None in thread scope, or outside every section)."""
        text = event.data.observations
        if resource_of(event.memory_key) is None:
            return [(None, g) for g in parse_groups(text)]
        return [(shown, g) for shown, piece in split_sections(text) for g in parse_groups(piece)]

    def _owner(self, memory_key: str, shown: str, fallback: str) -> str:
        """The thread of a resource memory's section `<thread id="shown">` (its id, or its
        xxhash32 when ids are obscured): a reflection rewrites every thread's section in one event
        of one thread, and deleting a thread must take that thread's reflected groups."""
        known = {t for t, meta in self._threads.items() if meta.memory_key == memory_key}
        for thread_id in sorted(known | set(self.index.threads_of(memory_key))):
            if shown in (thread_id, shown_thread_id(thread_id, True)):
                return thread_id
        return fallback

    def _thread(self, thread_id: str, memory_key: str) -> ThreadMeta:
        meta = self._threads.get(thread_id) or self.index.thread(thread_id)
        if meta is None or meta.memory_key != memory_key:
            meta = ThreadMeta(memory_key)
        self._threads[thread_id] = meta
        return meta

    async def apply(self, events: Iterable[Any], positions: dict[int, int] | None = None) -> int:
        """Apply decoded events in order, then record `positions` (partition -> next offset);
        the number of chunks embedded."""
        memories: set[str] = set()
        threads: set[str] = set()
        operations: list[Operation] = []
        try:
            for event in events:  # step 1
                operation = self._read(event, threads)
                memories.add(event.memory_key)
                if operation is not None:
                    operations.append(operation)
            pending = [p for kind, items in operations if kind == "upsert" for p in items]
            vectors = await self.embedder.embed([p.text for p in pending]) if pending else None  # step 2
            rows = iter(range(len(pending)))
            with self.index.transaction():  # step 3
                for kind, value in operations:
                    if kind == "delete":
                        self.index.delete_memory(value)
                        self.index.forget_threads(value)
                    elif kind == "delete-thread":
                        self.index.delete_thread(*value)
                        self.index.forget_thread(value[1])
                    else:
                        assert vectors is not None
                        self.index.upsert([Entry(p.id, p.memory_key, p.thread_id, vectors[next(rows)], p.metadata)
                                           for p in value])
                for memory_key in memories:
                    self.index.set_memory(memory_key, self._memories[memory_key])
                for thread_id in threads:
                    if (meta := self._threads.get(thread_id)) is not None:
                        self.index.set_thread(thread_id, meta)
                for partition, offset in (positions or {}).items():
                    self.index.set_position(partition, offset)
        except BaseException:
            self.forget()  # the cache ran ahead of what was committed: read it again
            raise
        return len(pending)

    def _read(self, event: Any, threads: set[str]) -> Operation | None:
        """One event into the batch's bookkeeping; its operation on the vectors, if any."""
        memory = self._memory(event.memory_key)
        if event.seq <= memory.last_seq:
            return None  # re-sent after a crash, or from before a deletion
        memory.last_seq = event.seq
        if event.type == "om-memory-deleted":
            # One thread of a resource memory (the event carries what the resource keeps), or all.
            one = event.thread_id if event.data.observations is not None else None
            for thread_id in [t for t, meta in self._threads.items()
                              if meta.memory_key == event.memory_key and one in (None, t)]:
                del self._threads[thread_id]
                threads.discard(thread_id)
            if one is not None:
                return ("delete-thread", (event.memory_key, one))
            memory.resource_id = None
            return ("delete", event.memory_key)
        if event.type == "om-message-accepted":
            message = event.data.message
            memory.resource_id = message.resource_id or memory.resource_id
            meta = self._thread(message.thread_id, event.memory_key)
            at = iso(message.created_at)
            if meta.updated_at is None or at > meta.updated_at:
                meta.updated_at = at
            threads.add(message.thread_id)
        elif event.type == "data-om-thread-update":
            self._thread(event.data.thread_id, event.memory_key).title = event.data.new_title
            threads.add(event.data.thread_id)
        elif event.type in _CARRIERS and event.data.observations:
            return ("upsert", self._entries(event, memory))
        return None

    def _entries(self, event: Any, memory: MemoryMeta) -> list[Pending]:
        event_thread = event.data.thread_id or event.thread_id
        resource_id = memory.resource_id or resource_of(event.memory_key)
        observed_at = iso(event.event_time)
        pending = []
        for shown, group in self._owned_groups(event):
            thread_id = event_thread if shown is None else self._owner(event.memory_key, shown, event_thread)
            # Each entry's text is its own chunk's: a reflection's group has hundreds of lines, and
            # its text in every chunk's metadata would make the index quadratic in its size.
            for index, text in enumerate(chunks(group.text)):
                metadata = {"group_id": group.id, "range": group.range, "thread_id": thread_id,
                            "resource_id": resource_id, "observed_at": observed_at, "text": text,
                            "chunk": index}
                if group.kind != "observation":
                    metadata["kind"] = group.kind
                pending.append(Pending(entry_id(resource_id, thread_id, group.id, index),
                                       event.memory_key, thread_id, text, metadata))
        return pending
