"""The embedded vector store: sqlite-vec's `vec0` table in one SQLite file, in process.

`om serve` keeps it beside the read model, `<data_dir>/readmodel/<ns>/<version>/search-<embedder>/
slot-N.sqlite` (projections/store/store.py has the slots): one file per embedder, so choosing another
embedder starts an empty index that the feed fills by replaying `<ns>.events` from the start.

Why sqlite-vec (asg017/sqlite-vec, Mozilla Builders, a wheel of one loadable extension): the
vectors, the feed's position and its bookkeeping commit in one SQL transaction, as the read model
does; `memory_key` is a *partition key* of the `vec0` table, so a search scans only its own
memory's vectors (isolation by construction, and a memory's size, not the namespace's, bounds a
query's cost) and a deletion is `DELETE ... WHERE memory_key = ?`; `thread_id` is a metadata
column the nearest-neighbour query filters on.  Exact (brute force) search over one memory's few
thousand chunks takes a few milliseconds.  The stdlib's `sqlite3` may be built without extension
loading (it is on the CI machines), so the file is opened with apsw, whose SQLite loads them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from omstream.projections.search.embedding import Vectors
from omstream.schemas.errors import OmError

from ..store.sqlite import atomic, erase_after, locked_slot
from .vectors import Entry, Hit, MemoryMeta, ThreadMeta, index_name

__all__ = ["SearchIndexBusy", "SqliteVecIndex", "open_index"]

log = logging.getLogger("omstream.search")

LAYOUT = "1"
SLOTS = 8
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS positions (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memories (memory_key TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, resource_id TEXT);
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY, memory_key TEXT NOT NULL, title TEXT, updated_at TEXT);
CREATE INDEX IF NOT EXISTS threads_by_memory ON threads (memory_key);
"""


class SearchIndexBusy(OmError, RuntimeError):
    """Every slot of this search index in this data directory is held by a running process."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "embedder"


def open_index(folder: Path, embedder: str, dim: int, slots: int = SLOTS) -> SqliteVecIndex:
    """The index of `embedder` under `folder` (a read model's folder), in the first slot no other
    process holds, locked for this process's lifetime."""
    where = folder / f"search-{_slug(embedder)}"
    found = locked_slot(where, slots)
    if found is None:
        raise SearchIndexBusy(f"all {slots} search index slots of {where} are held by running processes")
    path, fd = found
    return SqliteVecIndex(path, embedder, dim, lock_fd=fd)


class SqliteVecIndex:
    """A `VectorStore` and its `IndexState` in one file (`path`, or ":memory:")."""

    def __init__(self, path: Path | str, embedder: str, dim: int, lock_fd: int | None = None) -> None:
        self.path, self.embedder, self.dim = path, embedder, dim
        self._lock_fd = lock_fd
        self._db = apsw.Connection(str(path))
        self._db.enable_load_extension(True)
        self._db.load_extension(sqlite_vec.loadable_path())
        self._db.enable_load_extension(False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # A deleted memory's chunks (their text is in each entry's metadata) must not stay in
        # free pages, nor in the WAL: zeroed on delete, and the WAL truncated after the batch.
        self._db.execute("PRAGMA secure_delete=ON")
        self._erased = False
        self._db.execute(_SCHEMA)
        self._table = index_name(dim)
        self._create_vectors()
        identity = f"{LAYOUT}/{embedder}/{dim}"
        built = self.meta("identity")
        if built is None:
            self._set_meta("identity", identity)
        elif built != identity:  # another embedder's vectors cannot be searched with this one
            self.reset(f"built as {built}, opened as {identity}")
            self._set_meta("identity", identity)
        self._in_transaction = False

    def _create_vectors(self) -> None:
        self._db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self._table} USING vec0("  # noqa: S608 - a fixed name
            f"id TEXT PRIMARY KEY, memory_key TEXT PARTITION KEY, thread_id TEXT, "
            f"embedding float[{self.dim}] distance_metric=cosine, +metadata TEXT)")

    @property
    def name(self) -> str:
        return self._table

    def close(self) -> None:
        self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- transactions and bookkeeping (IndexState) -------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One batch's writes: all committed, or (on any exception) none."""
        with atomic(self._db):
            yield
        if self._erased and str(self.path) != ":memory:":
            self._erased = False
            erase_after(self._db, self.path)

    def reset(self, why: str) -> None:
        """Empty the index: it is rebuilt from the topic's beginning."""
        log.warning("search index emptied, rebuilding from the topic", extra={"path": str(self.path), "why": why})
        self._erased = True
        with self.transaction():
            for table in ("meta", "positions", "memories", "threads"):
                self._db.execute(f"DELETE FROM {table}")  # noqa: S608 - the names above
            self._db.execute(f"DROP TABLE IF EXISTS {self._table}")
            self._create_vectors()

    def meta(self, key: str) -> str | None:
        for (value,) in self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)):
            return str(value)
        return None

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def source(self) -> str | None:
        return self.meta("source")

    def set_source(self, source: str) -> None:
        self._set_meta("source", source)

    def positions(self) -> dict[int, int]:
        return {p: offset for p, offset in self._db.execute("SELECT partition, next_offset FROM positions")}

    def set_position(self, partition: int, next_offset: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO positions VALUES (?, ?)", (partition, next_offset))

    def memory(self, memory_key: str) -> MemoryMeta:
        for last_seq, resource_id in self._db.execute(
                "SELECT last_seq, resource_id FROM memories WHERE memory_key = ?", (memory_key,)):
            return MemoryMeta(last_seq, resource_id)
        return MemoryMeta()

    def set_memory(self, memory_key: str, meta: MemoryMeta) -> None:
        self._db.execute("INSERT OR REPLACE INTO memories VALUES (?, ?, ?)",
                         (memory_key, meta.last_seq, meta.resource_id))

    def thread(self, thread_id: str) -> ThreadMeta | None:
        for memory_key, title, updated_at in self._db.execute(
                "SELECT memory_key, title, updated_at FROM threads WHERE thread_id = ?", (thread_id,)):
            return ThreadMeta(memory_key, title, updated_at)
        return None

    def set_thread(self, thread_id: str, meta: ThreadMeta) -> None:
        self._db.execute("INSERT OR REPLACE INTO threads VALUES (?, ?, ?, ?)",
                         (thread_id, meta.memory_key, meta.title, meta.updated_at))

    def forget_threads(self, memory_key: str) -> None:
        self._db.execute("DELETE FROM threads WHERE memory_key = ?", (memory_key,))

    def forget_thread(self, thread_id: str) -> None:
        self._db.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,))

    def threads_of(self, memory_key: str) -> list[str]:
        return [row[0] for row in self._db.execute("SELECT thread_id FROM threads WHERE memory_key = ?",
                                                    (memory_key,))]

    # --- vectors (VectorStore) ----------------------------------------------------------------
    def _blob(self, vector: Vectors) -> bytes:
        row = np.asarray(vector, dtype=np.float32).reshape(-1)
        if row.shape[0] != self.dim:
            raise ValueError(f"a {row.shape[0]}-dimensional vector for the {self.dim}-dimensional {self._table}")
        return bytes(row.tobytes())

    def upsert(self, entries: Sequence[Entry]) -> None:
        # vec0 has no INSERT OR REPLACE: the old row of an id goes first.
        self._db.executemany(f"DELETE FROM {self._table} WHERE id = ?", [(e.id,) for e in entries])  # noqa: S608
        self._db.executemany(
            f"INSERT INTO {self._table} (id, memory_key, thread_id, embedding, metadata) VALUES (?, ?, ?, ?, ?)",  # noqa: S608
            [(e.id, e.memory_key, e.thread_id, self._blob(e.vector), json.dumps(e.metadata, ensure_ascii=False))
             for e in entries])

    def delete_memory(self, memory_key: str) -> None:
        self._erased = True
        self._db.execute(f"DELETE FROM {self._table} WHERE memory_key = ?", (memory_key,))  # noqa: S608

    def delete_thread(self, memory_key: str, thread_id: str) -> None:
        self._erased = True
        self._db.execute(f"DELETE FROM {self._table} WHERE memory_key = ? AND thread_id = ?",  # noqa: S608
                         (memory_key, thread_id))

    def query(self, vector: Vectors, *, memory_key: str, top_k: int,
              thread_id: str | None = None) -> list[Hit]:
        if top_k <= 0:
            return []
        sql = (f"SELECT id, distance, metadata FROM {self._table} "  # noqa: S608
               "WHERE embedding MATCH ? AND k = ? AND memory_key = ?")
        args: list[Any] = [self._blob(vector), top_k, memory_key]
        if thread_id is not None:
            sql += " AND thread_id = ?"
            args.append(thread_id)
        return [Hit(entry_id, 1.0 - float(distance), json.loads(metadata))
                for entry_id, distance, metadata in self._db.execute(sql + " ORDER BY distance", args)]

    def count(self, memory_key: str | None = None) -> int:
        if memory_key is None:
            rows = self._db.execute(f"SELECT count(*) FROM {self._table}")  # noqa: S608
        else:
            rows = self._db.execute(f"SELECT count(*) FROM {self._table} WHERE memory_key = ?", (memory_key,))  # noqa: S608
        return int(next(iter(rows))[0])
