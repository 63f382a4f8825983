"""`EventHistory` kept in the read model's store instead of in memory (`om serve`).

Same contract as `EventHistory` (projections/views/history.py): `append` applies each `(memoryKey,
seq)` once and hands it to the subscribers, `since` replays a memory after a `seq`, and
`om-memory-deleted` deletes the memory's rows but keeps its last `seq`.  Only the last `seq` per
memory and the subscribers stay in memory; `since` reads the rows and decodes the events again
(`omstream.schemas.codec`), so a replay costs what it reads, not what the history holds.  Rows
are written inside the feed's batch transaction (projections/feed.py), with the views and the
position they belong to.

The rows keep the events' bytes as read from the topic, sealed in a namespace with a key: `since`
opens them with the feed's `Opener` and passes over those of a memory (or, in resource scope, a
thread) whose key was shredded since.  Deleting one thread's rows reads the thread from the clear
fields, so it needs no key; its sections are cut from the other rows' text where it is clear
(sealed rows are made unreadable by the shred of the resource's key, which the deletion rolls).
"""

from __future__ import annotations

import orjson

from omstream.crypto.opening import Opener
from omstream.schemas.codec import decode_event, encode

from ..views.history import EventHistory, HistoryEntry, entry_of
from ..views.resource_views import without_thread_text
from .store import ReadModelStore

__all__ = ["StoredHistory", "thread_of"]


def thread_of(raw: bytes) -> str | None:
    """The thread whose own event `raw` is (`resource_views.of_thread`), from its clear fields."""
    data = orjson.loads(raw)
    if data.get("type") == "om-message-accepted":
        return str(data["data"]["message"]["threadId"])
    thread = data.get("threadId")
    return None if thread is None else str(thread)


class StoredHistory(EventHistory):
    def __init__(self, store: ReadModelStore, last_seqs: dict[str, int] | None = None,
                 opener: Opener | None = None) -> None:
        super().__init__()
        self.store = store
        self.opener = opener or Opener()
        self._last_seq = dict(last_seqs) if last_seqs is not None else store.last_seqs()

    def restore(self, last_seqs: dict[str, int]) -> None:
        """The last seqs read back from the store when the feed starts (the subscribers stay)."""
        self._last_seq = dict(last_seqs)

    def _keep(self, entry: HistoryEntry, raw: bytes | None) -> None:
        self.store.add_event(entry.memory_key, entry.seq, entry.type, entry.appended_ms,
                             raw if raw is not None else encode(entry.event))

    def _forget(self, memory_key: str) -> None:
        self.store.forget_events(memory_key)

    def _forget_thread(self, memory_key: str, thread_id: str) -> None:
        rows = self.store.events_since(memory_key, 0)
        self.store.forget_events(memory_key, [seq for seq, _, value in rows if thread_of(value) == thread_id])
        for seq, _, value in rows:
            if thread_of(value) != thread_id:
                document = orjson.loads(value)
                cut = without_thread_text(document, thread_id)
                if cut is not document:
                    self.store.replace_event(memory_key, seq, orjson.dumps(cut, option=orjson.OPT_SORT_KEYS))

    def since(self, memory_key: str, seq: int = 0) -> list[HistoryEntry]:
        entries = []
        for _, appended_ms, value in self.store.events_since(memory_key, seq):
            opened = self.opener.open(value, memory_key)
            if opened is not None:
                entries.append(entry_of(decode_event(opened), appended_ms))
        return entries

    def memories(self) -> list[str]:
        return self.store.memories()
