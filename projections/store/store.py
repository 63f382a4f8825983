"""The persistent read model: the projection's views, event history and position in SQLite.

`om serve` keeps, in `<data_dir>/readmodel/<namespace>/<version>/slot-N.sqlite`:

- `views`/`messages`: every thread's view (`projections/store/view_rows.py`: a head, and one row per
  message, written once);
- `events`: every memory's events (the raw bytes of `<ns>.events`), what the live feed
  replays from a `seq` (`projections/store/stored_history.py`);
- `memories`: the last `seq` applied per memory key (kept after a deletion, as in memory);
- `positions`: per partition of `<ns>.events`, the next offset to read and the highest
  `inputOffset` applied (`ProjectionFeed.applied`).

Why SQLite (stdlib, WAL) rather than RocksDB: a consumed batch touches five kinds of rows and
must land all at once or not at all, which is one SQL transaction; the feed's replay is a
range scan on `(memory_key, seq)` and a deletion a `DELETE ... WHERE memory_key = ?`, both
plain SQL with an index; and the file can be inspected with the `sqlite3` shell.  The writes are
a few milliseconds per batch, so they run on the event loop, which keeps the views in memory
and the rows in one order: nothing can read a view between its change and its row.

Deleted text leaves the file: `secure_delete` zeroes what a delete or an update removes (in the
page, and pages freed whole), and a batch that deleted a memory or a thread is followed by a
checkpoint that truncates the WAL, so neither the main file nor `-wal` keeps its old pages
(`erase_after`).  The `events` rows keep the topic's bytes, sealed when the namespace has a key
(projections/feed.py says why).

Several processes: each `om serve` takes the first free *slot* of its (data dir, namespace,
version), an exclusive `flock` on `slot-N.lock` held for its lifetime, and owns that slot's
file.  A second server on the same data directory gets slot 1 (and its own store, rebuilt the
first time); a restarted one gets its old slot back, since the system drops a dead process's
lock.  All slots taken: `ReadModelBusy`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator
from datetime import tzinfo
from itertools import islice
from pathlib import Path

from omstream.schemas.errors import OmError
from omstream.settings import Settings

from ..views.context import ContextProjection, ThreadView
from .sqlite import atomic, erase_after, locked_slot
from .view_rows import HEAD_VERSION, decode_view, encode_head, encode_message

__all__ = ["SLOTS", "ReadModelBusy", "ReadModelStore", "open_store", "store_dir"]

log = logging.getLogger("omstream.projection")

#: How many `om serve` processes may keep a store of one version in one data directory.
SLOTS = 8
# The layout of the tables (and of a view's head); a store of another layout is emptied and
# rebuilt from the topic, as a new one is.
LAYOUT = f"2.{HEAD_VERSION}"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS positions (
    partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL, applied INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memories (memory_key TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    memory_key TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, appended_ms INTEGER,
    value BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_seq ON events (memory_key, seq);
CREATE TABLE IF NOT EXISTS views (thread_id TEXT PRIMARY KEY, head BLOB NOT NULL, observations TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (thread_id TEXT NOT NULL, key TEXT NOT NULL, body BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS messages_by_thread ON messages (thread_id, key);
"""
_TABLES = ("meta", "positions", "memories", "events", "views", "messages")


class ReadModelBusy(OmError, RuntimeError):
    """Every slot of this version's read model in this data directory is held by a running
    `om serve`: stop one, or give this one another `data_dir`."""


def store_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / "readmodel" / settings.namespace / settings.version


def open_store(settings: Settings, slots: int = SLOTS) -> ReadModelStore:
    """The store of the first slot no other process holds, locked for this process's lifetime."""
    folder = store_dir(settings)
    found = locked_slot(folder, slots)
    if found is None:
        raise ReadModelBusy(f"all {slots} read model slots of {folder} are held by running `om serve` processes")
    path, fd = found
    log.info("read model store opened", extra={"path": str(path)})
    return ReadModelStore(path, lock_fd=fd)


class ReadModelStore:
    """One SQLite file; every write between `transaction()`'s begin and commit lands at once."""

    def __init__(self, path: Path, lock_fd: int | None = None) -> None:
        self.path = path
        self._lock_fd = lock_fd
        # Autocommit mode: transactions are begun and ended here, explicitly, once per batch.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # With WAL, NORMAL syncs at checkpoints: a power cut may lose the last batches, never
        # split one (the feed reads them again from the topic).
        self._db.execute("PRAGMA synchronous=NORMAL")
        # A deleted memory's text must not stay in free space (see the module's docstring).
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(_SCHEMA)
        self._erased = False  # a delete in the current batch: truncate the WAL after it
        layout = self._meta("layout")
        if layout is None:  # a new file
            self._db.execute("INSERT INTO meta VALUES ('layout', ?)", (LAYOUT,))
        elif layout != LAYOUT:
            self.reset(f"layout {layout} is not {LAYOUT}")
        # Messages already written per thread: the view's later ones are the new ones.
        self._written: dict[str, int] = {}
        # The observation text last written per thread (the same object while unchanged: a
        # change makes a new string).
        self._observations: dict[str, str] = {}

    def close(self) -> None:
        self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the slot
            self._lock_fd = None

    # --- transactions ---------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One batch's writes: all committed, or (on any exception) none."""
        with atomic(self._db):
            yield
        if self._erased:
            self._erased = False
            erase_after(self._db, self.path)

    def reset(self, why: str) -> None:
        """Empty every table: the projection is rebuilt from the topic's beginning."""
        log.warning("read model store emptied, rebuilding from the topic", extra={"path": str(self.path), "why": why})
        self._erased = True
        with self.transaction():
            for table in _TABLES:
                self._db.execute(f"DELETE FROM {table}")  # noqa: S608 - the names are the constants above
            self._db.execute("INSERT INTO meta VALUES ('layout', ?)", (LAYOUT,))
        self._written, self._observations = {}, {}

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def source(self) -> str | None:
        """What the store was built from (`topic/partitions`), None when it is new."""
        return self._meta("source")

    def set_source(self, source: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('source', ?)", (source,))

    # --- position ---------------------------------------------------------------------------
    def positions(self) -> dict[int, tuple[int, int]]:
        """partition -> (next offset to read, highest `inputOffset` applied)."""
        rows = self._db.execute("SELECT partition, next_offset, applied FROM positions")
        return {p: (offset, applied) for p, offset, applied in rows}

    def set_position(self, partition: int, next_offset: int, applied: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO positions VALUES (?, ?, ?)", (partition, next_offset, applied))

    def last_seqs(self) -> dict[str, int]:
        return dict(self._db.execute("SELECT memory_key, last_seq FROM memories"))

    def set_last_seqs(self, seqs: dict[str, int]) -> None:
        self._db.executemany("INSERT OR REPLACE INTO memories VALUES (?, ?)", seqs.items())

    # --- event history ------------------------------------------------------------------------
    def add_event(self, memory_key: str, seq: int, kind: str, appended_ms: int | None, value: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?)",
                         (memory_key, seq, kind, appended_ms, value))

    def forget_events(self, memory_key: str, seqs: list[int] | None = None) -> None:
        """The memory's events, or only those at `seqs`."""
        self._erased = True
        if seqs is None:
            self._db.execute("DELETE FROM events WHERE memory_key = ?", (memory_key,))
        else:
            self._db.executemany("DELETE FROM events WHERE memory_key = ? AND seq = ?",
                                 [(memory_key, seq) for seq in seqs])

    def replace_event(self, memory_key: str, seq: int, value: bytes) -> None:
        """The event at `seq` rewritten (a deleted thread's text cut out of it)."""
        self._erased = True
        self._db.execute("UPDATE events SET value = ? WHERE memory_key = ? AND seq = ?", (value, memory_key, seq))

    def events_since(self, memory_key: str, seq: int) -> list[tuple[int, int | None, bytes]]:
        """(seq, appended ms, event bytes) of the memory's events after `seq`, in order."""
        return self._db.execute(
            "SELECT seq, appended_ms, value FROM events WHERE memory_key = ? AND seq > ? ORDER BY seq",
            (memory_key, seq)).fetchall()

    def memories(self) -> list[str]:
        """Every memory with kept events, the first seen first."""
        rows = self._db.execute("SELECT memory_key FROM events GROUP BY memory_key ORDER BY MIN(rowid)")
        return [key for (key,) in rows]

    # --- views -------------------------------------------------------------------------------------
    def load_views(self, time_zone: str | tzinfo) -> dict[str, ThreadView]:
        """Every stored view, with its messages in the order the view received them."""
        messages: dict[str, list[tuple[str, bytes]]] = {}
        for thread_id, key, body in self._db.execute("SELECT thread_id, key, body FROM messages ORDER BY rowid"):
            messages.setdefault(thread_id, []).append((key, body))
        rows = self._db.execute("SELECT thread_id, head, observations FROM views")
        views = {thread_id: decode_view(thread_id, head, observations, messages.get(thread_id, ()), time_zone)
                 for thread_id, head, observations in rows}
        self._written = {thread_id: len(view.messages) for thread_id, view in views.items()}
        self._observations = {thread_id: view.observations for thread_id, view in views.items()}
        return views

    def write_views(self, projection: ContextProjection) -> None:
        """The views the projection changed since the last call: dropped ones deleted first (a
        thread deleted and made again in one batch starts over), then each changed one's head
        and new messages."""
        touched, dropped = projection.take_changes()
        self._erased = self._erased or bool(dropped)
        for thread_id in dropped:
            self._db.execute("DELETE FROM views WHERE thread_id = ?", (thread_id,))
            self._db.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
            self._written.pop(thread_id, None)
            self._observations.pop(thread_id, None)
        for thread_id in touched:
            view = projection.threads.get(thread_id)
            if view is None:
                continue
            if self._observations.get(thread_id) is view.observations:
                self._db.execute("UPDATE views SET head = ? WHERE thread_id = ?", (encode_head(view), thread_id))
            else:
                self._db.execute("INSERT OR REPLACE INTO views VALUES (?, ?, ?)",
                                 (thread_id, encode_head(view), view.observations))
                self._observations[thread_id] = view.observations
            done = self._written.get(thread_id, 0)
            # Messages are only ever added to a view (until it is dropped): the ones past the
            # count already written are the new ones, in the order they came.  Keys first: the
            # older messages stay undecoded (`StoredMessages`).
            new = [(thread_id, key, encode_message(view.messages[key])) for key in islice(view.messages, done, None)]
            self._db.executemany("INSERT INTO messages VALUES (?, ?, ?)", new)
            self._written[thread_id] = done + len(new)
