"""Where recall reads: the read side's own record of every accepted message and thread.

The projection's views already keep each thread's accepted messages, exactly as the fold
announced them (`om-message-accepted`, with their parts, `createdAt` and thread), in the read
model's store (projections/store/store.py: a restart loads them, a deleted memory's views and rows go
with its `om-memory-deleted`, and a rebuild replays the events).  This module reads them for
recall: a thread's messages in time order, its title and dates, a resource's threads, and a
message found by id among the threads a caller may see.  It never reads another place, so
recall can return nothing a deleted or foreign memory held.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from omstream.engine.rules.temporal import is_temporal_marker
from omstream.engine.rules.tokens import Counter
from omstream.schemas.messages import Message

if TYPE_CHECKING:  # the context projection imports this package (its recall guidance)
    from ..views.context import ContextProjection, ThreadView

__all__ = ["RecallSource", "ThreadInfo"]


@dataclass(frozen=True)
class ThreadInfo:
    id: str
    resource_id: str | None
    title: str | None
    created_at: datetime
    updated_at: datetime
    memory_key: str | None


class RecallSource:
    """Recall's reads of a projection (the one `om serve` keeps, or any built from events)."""

    def __init__(self, projection: ContextProjection, counter: Counter) -> None:
        self.projection = projection
        self.counter = counter
        # Per thread: (message count when sorted, the sorted messages); messages are only ever
        # added to a view, so an unchanged count is an unchanged thread.
        self._sorted: dict[str, tuple[int, ThreadView, list[Message]]] = {}

    def messages(self, thread_id: str) -> list[Message]:
        """The thread's messages, oldest first (ties in the order they were accepted); the
        temporal-gap reminders the read side adds are not messages of the thread."""
        view = self.projection.threads.get(thread_id)
        if view is None:
            return []
        cached = self._sorted.get(thread_id)
        if cached is not None and cached[0] == len(view.messages) and cached[1] is view:
            return cached[2]
        ordered = sorted((m for key, m in view.messages.items() if not is_temporal_marker(key)),
                         key=lambda m: m.created_at)
        self._sorted[thread_id] = (len(view.messages), view, ordered)
        return ordered

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The thread's title and dates (created: its first message; updated: its newest), None
        for a thread the read side does not hold."""
        view = self.projection.threads.get(thread_id)
        messages = self.messages(thread_id)
        if view is None or not messages:
            return None
        return ThreadInfo(thread_id, view.resource_id, view.title, messages[0].created_at,
                          max(m.created_at for m in messages), view.memory_key)

    def threads(self, resource_id: str) -> list[ThreadInfo]:
        """The resource's threads, the most recently updated first."""
        found = [info for tid, view in self.projection.threads.items()
                 if view.resource_id == resource_id and (info := self.thread(tid)) is not None]
        return sorted(found, key=lambda t: (t.updated_at, t.id), reverse=True)

    def find(self, message_id: str, thread_ids: list[str]) -> Message | None:
        """The message with this id in one of `thread_ids` (the threads the caller may see)."""
        for thread_id in thread_ids:
            view = self.projection.threads.get(thread_id)
            if view is not None and not is_temporal_marker(message_id):
                found = view.messages.get(message_id)
                if found is not None:
                    return found
        return None
