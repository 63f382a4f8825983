"""Records delivered to the fold agent but not folded yet, queued per memory.

A partition of the input log carries many memories, and Kafka delivers it in order.  A burst of
2,000 messages on one thread filled every batch with the burst (batches of 500 records took up
to a second to fold, send and store), and every other memory waited for each of them.  The
memories are independent, so the fold agent reads ahead into a `Backlog`, and a batch takes at
most `per_memory` records of one memory, round robin: a busy memory is folded at its share of
each batch, and the others' records go into the next short batch.

Order within a memory is kept, which is all the fold needs (a memory skips what it has already
folded, by offset).  Commits stay correct because a record is acked only once folded and
stored, and the consumer never commits past an unacked record (`worker._Consumer`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

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
        """Whether the reader should stop adding (and leave the rest to the consumer's flow
        control, which stops fetching when the stream buffer fills)."""
        return self._items >= self.max_items or self._bytes >= self.max_bytes

    def add(self, key: Hashable, size: int, item: T) -> None:
        self._queues.setdefault(key, deque()).append((size, item))
        self._items += 1
        self._bytes += size

    def take(self, total: int, per_memory: int) -> list[T]:
        """Up to `total` items, at most `per_memory` of one key, each key's in the order added.
        A key left with items goes behind the others, so the keys a full batch skipped come
        first next time."""
        taken: list[T] = []
        for key in list(self._queues):
            if len(taken) >= total:
                break
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
