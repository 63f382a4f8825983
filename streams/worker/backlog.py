"""Records delivered to the fold agent but not folded yet, queued per memory.

A partition of the input log carries many memories, and Kafka delivers it in order.  A burst of
2,000 messages on one thread filled every batch with the burst (batches of 500 records took up
to a second to fold, send and store), and every other memory waited for each of them.  The
memories are independent, so the fold agent reads ahead into a `Backlog`, and a batch takes at
most `per_memory` records of one memory, round robin: a busy memory is folded at its share of
each batch, and the others' records go into the next short batch.  A memory that holds a long
queue of inputs behind its cycles (the fold agent marks it busy) is folded in batches of its own,
after the others', and those take at most a quarter of the time while others' records wait
(`lanes`).

Order within a memory is kept, which is all the fold needs (a memory skips what it has already
folded, by offset).  Commits stay correct because a record is acked only once folded and
stored, and the consumer never commits past an unacked record
(`omstream.worker.faust_repairs.WorkerConsumer`).

Reading ahead only helps if the reading is fast: the consumer hands each fetch of the input log
to an `Intake` whole (`omstream.worker.faust_repairs.WorkerApp.taps`), so the records behind a
burst reach the backlog in milliseconds instead of waiting for Faust to deliver the burst one
record at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Container, Hashable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Backlog(Generic[T]):
    """Items queued per key and taken round robin; bounded by a count and a byte size."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._queues: dict[Hashable, deque[tuple[int, T]]] = {}
        self._items = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._items

    @property
    def full(self) -> bool:
        """Whether adding should wait (`Intake.put`, which holds the consumer's fetching)."""
        return self._items >= self.max_items or self._bytes >= self.max_bytes

    def add(self, key: Hashable, size: int, item: T) -> None:
        self._queues.setdefault(key, deque()).append((size, item))
        self._items += 1
        self._bytes += size

    def take(self, total: int, per_memory: int, skip: Container[Hashable] = ()) -> list[T]:
        """Up to `total` items, at most `per_memory` of one key, each key's in the order added,
        none of the keys in `skip`.  A key left with items goes behind the others, so the keys
        a full batch skipped come first next time."""
        taken: list[T] = []
        for key in list(self._queues):
            if len(taken) >= total:
                break
            if key in skip:
                continue
            queue = self._queues.pop(key)
            for _ in range(min(per_memory, total - len(taken), len(queue))):
                size, item = queue.popleft()
                self._bytes -= size
                taken.append(item)
            if queue:
                self._queues[key] = queue
        self._items -= len(taken)
        return taken

    def drop(self, stale: Callable[[T], bool]) -> int:
        """Forget the items `stale` says will be delivered again (after a rebalance); how many."""
        dropped = 0
        for key, queue in list(self._queues.items()):
            kept: deque[tuple[int, T]] = deque()
            for size, item in queue:
                if stale(item):
                    self._bytes -= size
                    dropped += 1
                else:
                    kept.append((size, item))
            if kept:
                self._queues[key] = kept
            else:
                del self._queues[key]
        self._items -= dropped
        return dropped


class Intake:
    """The hand-over of the input log from the consumer to the fold agent: `put` adds what a
    fetch brought (and waits while the backlog is full, which holds the consumer's fetching),
    `batches` takes fair batches.  Items are consumer messages (`key`, `value`, `partition`,
    `offset`, `generation_id`)."""

    def __init__(self, backlog: Backlog[Any]) -> None:
        self.backlog = backlog
        #: Keys of the busy memories (`lanes`); the fold agent keeps it.
        self.busy: set[Any] = set()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()

    async def put(self, messages: Sequence[Any]) -> None:
        for message in messages:
            self.backlog.add(message.key, len(message.value or b""), message)
        self._arrived.set()
        while self.backlog.full:
            self._room.clear()
            await self._room.wait()

    async def batches(self, max_records: int, per_memory: int, wait_s: float,
                      generation: Callable[[], int]) -> AsyncIterator[list[Any]]:
        """Batches of up to `max_records`, at most `per_memory` of one memory, in log order.  A
        batch that finds one record waiting waits `wait_s` once for more, so an idle input closes
        batches quickly.  Records read before a rebalance (`generation` changed) are dropped: the
        consumer reads them again from the committed offsets.

        The busy memories' records (`busy`) come in batches of their own, after the others', and
        while others' records wait those batches take at most `BUSY_SHARE` of the time."""
        read_in = generation()  # the generation every record in the backlog belongs to
        busy_after = 0.0  # before this (monotonic), a busy memory waits while others have records
        while True:
            if not self.backlog:
                self._arrived.clear()
                await self._arrived.wait()
                if wait_s and len(self.backlog) == 1:
                    await asyncio.sleep(wait_s)
            current = generation()
            if current != read_in:
                def stale(message: Any, current: int = current) -> bool:
                    return bool(message.generation_id != current)

                self.backlog.drop(stale)
                read_in = current
            batch = []
            if time.monotonic() < busy_after:
                batch = self.backlog.take(max_records, per_memory, skip=self.busy)
            batch = batch or self.backlog.take(max_records, per_memory)
            self._room.set()
            for part in lanes(batch, self.busy):
                part.sort(key=lambda message: (message.partition, message.offset))
                started = time.monotonic()
                yield part
                if part[0].key in self.busy:
                    now = time.monotonic()
                    busy_after = now + (now - started) * (1 - BUSY_SHARE) / BUSY_SHARE


#: The most of the fold agent's time the busy memories' batches take while others' records wait.
#: Measured in the burst test (others' p99 during the burst): 0.5 gave 100-156 ms (10 runs),
#: 0.25 84-127 ms (17 runs), 0.1 84-96 ms (3 runs); the burst took 12-17 s at each, because a
#: busy memory's next batch waits only while others' records are there.
BUSY_SHARE = 0.25


def lanes(batch: list[Any], busy: Container[Any]) -> list[list[Any]]:
    """The batch as two, each non-empty: the other memories' records first, then the busy
    ones'.  A memory is busy when it holds a long queue of inputs behind its cycles: each of
    its model results then releases a threshold's worth of them and starts the next cycle
    with the whole observation log, a fold of about 20 ms in a burst (80-100 ms for a
    reflection's answer), which every other record of its batch waited for."""
    rest = [m for m in batch if m.key not in busy]
    mine = [m for m in batch if m.key in busy]
    return [part for part in (rest, mine) if part]
