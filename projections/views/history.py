"""Each memory's events, for the feed: replay from a `seq`, then follow live.

The projection consumes every event of `<ns>.events`; this keeps them per memory key, in `seq`
order, applied once per `(memoryKey, seq)` like the views, so a client that reconnects with the
last `seq` it saw gets exactly what came after it.  Subscribers get each new event through a
bounded queue that the producer side never waits on: a subscriber that falls `queue_size` events
behind is marked `overflowed` and gets nothing more (its feed closes it), so a slow client cannot
slow the projection or the other clients.

`om-memory-deleted` deletes the memory's history (after it has been handed to the subscribers,
so a live UI learns of the deletion); the last `seq` is kept, so an event re-sent after a worker
crash cannot bring the deleted history back.  One thread deleted from a resource memory takes
its own events (`resource_views.of_thread`) and its sections out of the memory-wide events' text
(`resource_views.without_thread_text`: a reflection's log names every thread): the other threads'
feeds and time travel stay, without a word of the deleted thread at any point of them.

`EventHistory` keeps the events in memory (tests, one-off projections); `StoredHistory`
(`projections/store/stored_history.py`) keeps them in the read model's store, for `om serve`.  Both
share `append` and the subscribers; they differ in `_keep`, `_forget`, `since` and `memories`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from omstream.schemas.codec import decode_event, encode
from omstream.schemas.parts import DataPart

from .parts import data_part, frame_json
from .resource_views import of_thread, one_thread_of_resource, without_thread_text

__all__ = ["EventHistory", "HistoryEntry", "Subscription", "entry_of", "without_thread_entry"]


@dataclass(frozen=True)
class HistoryEntry:
    """One applied event with its frame, encoded once for every client."""

    memory_key: str
    seq: int
    type: str          # the event's type on `<ns>.events`
    part: DataPart     # the AI SDK data part
    frame: str         # the part as JSON, what the SSE `data:` line carries
    appended_ms: int | None = None  # the event's Kafka timestamp (append time), when known
    event: Any = None  # the typed event (omstream.schemas.events)


@dataclass(eq=False)  # compared and hashed by identity: kept in sets
class Subscription:
    """A live subscriber's queue of entries: one memory, or all of them (`memory_key` None)."""

    memory_key: str | None
    queue_size: int
    queue: asyncio.Queue[HistoryEntry] = field(init=False)
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(self.queue_size)

    def offer(self, entry: HistoryEntry) -> None:
        if self.overflowed.is_set():
            return
        try:
            self.queue.put_nowait(entry)
        except asyncio.QueueFull:
            self.overflowed.set()


def entry_of(event: Any, appended_ms: int | None = None) -> HistoryEntry:
    """The history entry of a typed event: its data part, framed once."""
    part = data_part(event)
    return HistoryEntry(event.memory_key, event.seq, event.type, part, frame_json(part), appended_ms, event)


def without_thread_entry(entry: HistoryEntry, thread_id: str) -> HistoryEntry:
    """`entry` with the deleted thread's sections cut from its text (`without_thread_text`)."""
    document = orjson.loads(encode(entry.event))
    cut = without_thread_text(document, thread_id)
    if cut is document:
        return entry
    return entry_of(decode_event(orjson.dumps(cut)), entry.appended_ms)


class EventHistory:
    def __init__(self) -> None:
        self._events: dict[str, list[HistoryEntry]] = {}
        self._last_seq: dict[str, int] = {}
        self._subscribers: dict[str | None, set[Subscription]] = {}

    def append(self, event: Any, appended_ms: int | None = None, raw: bytes | None = None) -> HistoryEntry | None:
        """Keep one event of `<ns>.events` and hand it to the subscribers; None (and nothing
        kept) for one already applied.  `raw` is the event as read from the topic, when known
        (a store keeps those bytes instead of encoding the event again)."""
        key, seq = event.memory_key, event.seq
        if seq <= self._last_seq.get(key, 0):
            return None
        self._last_seq[key] = seq
        entry = entry_of(event, appended_ms)
        if event.type == "om-memory-deleted" and one_thread_of_resource(event):
            # One thread of a resource memory: its own events go, the other threads' stay.
            self._forget_thread(key, event.thread_id)
        elif event.type == "om-memory-deleted":
            self._forget(key)
        else:
            self._keep(entry, raw)
        for subscription in (*self._subscribers.get(key, ()), *self._subscribers.get(None, ())):
            subscription.offer(entry)
        return entry

    def extend(self, events: Iterable[Any]) -> None:
        for event in events:
            self.append(event)

    def _keep(self, entry: HistoryEntry, raw: bytes | None) -> None:
        self._events.setdefault(entry.memory_key, []).append(entry)

    def _forget(self, memory_key: str) -> None:
        self._events.pop(memory_key, None)

    def _forget_thread(self, memory_key: str, thread_id: str) -> None:
        self._events[memory_key] = [without_thread_entry(e, thread_id) for e in self._events.get(memory_key, [])
                                    if not of_thread(e.event, thread_id)]

    def since(self, memory_key: str, seq: int = 0) -> list[HistoryEntry]:
        """The memory's kept events after `seq`, in order."""
        entries = self._events.get(memory_key, [])
        # seqs are increasing (dense while nothing was deleted): bisect on them.
        lo, hi = 0, len(entries)
        while lo < hi:
            mid = (lo + hi) // 2
            if entries[mid].seq <= seq:
                lo = mid + 1
            else:
                hi = mid
        return entries[lo:]

    def last_seq(self, memory_key: str) -> int:
        return self._last_seq.get(memory_key, 0)

    def memories(self) -> list[str]:
        return list(self._events)

    def subscribe(self, memory_key: str | None, queue_size: int = 1000) -> Subscription:
        """A live queue of the memory's new events (every memory's with None); `unsubscribe`
        it when done."""
        subscription = Subscription(memory_key, queue_size)
        self._subscribers.setdefault(memory_key, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.memory_key)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[subscription.memory_key]

    def subscribers(self) -> int:
        return sum(len(s) for s in self._subscribers.values())
