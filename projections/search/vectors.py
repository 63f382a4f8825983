"""The vector store seam: what the search index needs from a store, and nothing more.

`VectorStore` is the vectors themselves (upsert by id, delete a memory's, nearest neighbours of
one memory); `IndexState` is the projection's bookkeeping (the position in `<ns>.events`, each
memory's last `seq` and resource, each thread's title and last activity).  The embedded store
(`sqlite_vec.py`) is both, in one SQLite file, so a consumed batch's vectors and its position
commit together.  A deployment that keeps its vectors in a server (Qdrant, pgvector, ...)
implements `VectorStore` over its client, the index name `memory_observations_<dim>` as its
collection or table, `memory_key` and `thread_id` as filterable payload, and keeps an
`IndexState` beside it (the embedded one does, on its own): every write is an idempotent upsert
or delete by deterministic id, so after a crash the batch is applied again to the same result.

Isolation is the store's duty: `query` returns only entries of the `memory_key` it is given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from omstream.projections.search.embedding import Vectors

__all__ = ["Entry", "Hit", "IndexState", "MemoryMeta", "SearchStore", "ThreadMeta", "VectorStore", "index_name"]


def index_name(dim: int, separator: str = "_") -> str:
    """The index of `dim`-dimensional vectors (spec §12: `memory_observations_<dim>`)."""
    return f"memory_observations{separator}{dim}"


@dataclass(frozen=True)
class Entry:
    """One chunk of one observation group.  `metadata` is §12's: group_id, range, thread_id,
    resource_id, observed_at (ISO-8601), text (the whole group's)."""

    id: str
    memory_key: str
    thread_id: str
    vector: Vectors  # one row, unit length
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float  # cosine similarity, 1 = the same direction
    metadata: dict[str, Any]


@dataclass
class MemoryMeta:
    last_seq: int = 0
    resource_id: str | None = None


@dataclass
class ThreadMeta:
    memory_key: str
    title: str | None = None
    updated_at: str | None = None  # ISO-8601 of the newest message


class VectorStore(Protocol):
    @property
    def name(self) -> str:
        """The index (`memory_observations_<dim>`)."""

    @property
    def dim(self) -> int: ...

    def upsert(self, entries: Sequence[Entry]) -> None:
        """Insert, or replace the entry of the same id."""

    def delete_memory(self, memory_key: str) -> None:
        """Every entry of the memory."""

    def delete_thread(self, memory_key: str, thread_id: str) -> None:
        """Every entry of one thread of the memory."""

    def query(self, vector: Vectors, *, memory_key: str, top_k: int,
              thread_id: str | None = None) -> list[Hit]:
        """The `top_k` entries of `memory_key` (and of `thread_id`, when given) nearest to
        `vector`, the nearest first."""

    def count(self, memory_key: str | None = None) -> int:
        """Entries kept (of one memory, or all)."""


class IndexState(Protocol):
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def positions(self) -> dict[int, int]:
        """partition of `<ns>.events` -> the next offset to read."""

    def set_position(self, partition: int, next_offset: int) -> None: ...

    def memory(self, memory_key: str) -> MemoryMeta: ...

    def set_memory(self, memory_key: str, meta: MemoryMeta) -> None: ...

    def thread(self, thread_id: str) -> ThreadMeta | None: ...

    def set_thread(self, thread_id: str, meta: ThreadMeta) -> None: ...

    def forget_threads(self, memory_key: str) -> None:
        """The threads of a deleted memory."""

    def forget_thread(self, thread_id: str) -> None:
        """One deleted thread (of a resource memory)."""

    def threads_of(self, memory_key: str) -> list[str]:
        """The threads kept of a memory (a resource memory's, to name the thread of a section)."""


class SearchStore(VectorStore, IndexState, Protocol):
    """Both in one (the embedded store), what the index projection writes to."""
