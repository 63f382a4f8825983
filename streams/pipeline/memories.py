"""The memories one batch of the fold agent touches: each loaded once, folded in memory, and
written once, as the records `omstream.pipeline.storage` lays out.

A batch reads a memory from the batch before it that is still being stored (`unsaved`), else
from the memories the worker stored last (`StateCache`), else from the local store.  What the
batch changes comes out as `StateWrite`s in the order the changelog must hold them.  A stored
state that cannot be read does not stop its memory: it is reported (`UnreadableState`, which
the worker dead-letters) and the memory starts again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial
from typing import NamedTuple, Protocol

import orjson

from omstream.engine.state import MemoryState
from omstream.schemas.errors import OmError

from .storage import Encodings, Loaded, Read, Scan, changed_records, load_state, part_keys, plan_writes, referenced

__all__ = ["Memories", "StateCache", "StateWrite", "TooLarge", "UnreadableState"]


class Blobs(Protocol):
    """How the state's records are sealed and opened (`omstream.pipeline.sealed_fold.StateBlobs`):
    `open` gives None for a record whose key was shredded."""

    def open(self, record_key: bytes, raw: bytes | None) -> bytes | None: ...

    def seal(self, record_key: bytes, raw: bytes) -> bytes: ...

    def rolled(self, memory_key: bytes) -> bool:
        """Whether the memory's records are sealed under its successor key from this batch on."""
        ...


#: A sealed record may be this much larger than its plain bytes (base64 of the JSON string of
#: the bytes read as latin-1: 4/3 of up to twice as many), plus its envelope's header.
_SEALED_GROWTH, _ENVELOPE_BYTES = 8 / 3, 128


class StateWrite(NamedTuple):
    """A record of the state table to write: its partition, key and value (None deletes it)."""

    partition: int
    key: bytes
    value: bytes | None


class UnreadableState(NamedTuple):
    """A stored state the batch could not read: the worker dead-letters its bytes."""

    key: bytes
    partition: int
    reason: str
    raw: bytes


class TooLarge(OmError, ValueError):
    """A record of the state would be larger than the broker accepts."""


class StateCache:
    """The memories the worker wrote last, as a load would read them back, so that a busy
    memory is not read and validated again for every batch (its held inputs alone can be
    thousands of records).  Least recently used first out.

    It must mirror the local store: the worker fills it only right after a batch's records are
    in the store, and empties it whenever the store may have changed under it (a rebalance).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._memories: OrderedDict[bytes, Loaded] = OrderedDict()

    def __len__(self) -> int:
        return len(self._memories)

    def get(self, key: bytes) -> Loaded | None:
        loaded = self._memories.get(key)
        if loaded is not None:
            self._memories.move_to_end(key)
        return loaded

    def keep(self, memories: dict[bytes, Loaded]) -> None:
        for key, loaded in memories.items():
            self._memories[key] = loaded
            self._memories.move_to_end(key)
        while len(self._memories) > self.size:
            self._memories.popitem(last=False)

    def clear(self) -> None:
        self._memories.clear()


class Memories:
    """The memories one batch touches: each loaded once, folded in memory, written once.

    `read(partition, key)` and `scan(partition, prefix)` read the local store of a partition;
    `cache` has memories as the store has them, and `unsaved` the memories of a batch whose
    writes are still on their way to the store (they come first, then the cache, then the store).
    `blobs` (None: plain) opens each record read and seals each written; the size limit is
    then the plain bytes' that seal within `limit`.
    """

    def __init__(self, read: Callable[[int, bytes], bytes | None],
                 scan: Callable[[int, bytes], Iterable[bytes]], limit: int,
                 cache: StateCache | None = None, unsaved: dict[bytes, Loaded] | None = None,
                 blobs: Blobs | None = None) -> None:
        self._read, self._scan, self.limit = read, scan, limit
        self._blobs = blobs
        if blobs is not None:
            self.limit = int((limit - _ENVELOPE_BYTES) / _SEALED_GROWTH)
        self._cache, self._unsaved = cache, unsaved or {}
        self._stored: dict[bytes, Loaded] = {}
        self._loaded: dict[bytes, Loaded | None] = {}
        self._current: dict[bytes, MemoryState] = {}
        self._partition: dict[bytes, int] = {}
        self._encoded = Encodings()
        self._salvaged: dict[bytes, int] = {}
        #: Stored states that could not be read.
        self.unreadable: list[UnreadableState] = []

    def _reader(self, partition: int) -> tuple[Read, Scan]:
        # Not closures over `self`: a cached memory's `seen` keeps its reader, and must not keep
        # the whole batch (its encodings) alive with it.
        if self._blobs is not None:
            return partial(_opened, self._read, self._blobs, partition), partial(self._scan, partition)
        return partial(self._read, partition), partial(self._scan, partition)

    def get(self, key: bytes, partition: int) -> MemoryState | None:
        """The memory's state as the batch has folded it so far (loaded on first use).

        A stored state this worker cannot read must not stop the memory: it is reported in
        `unreadable` (the worker dead-letters its bytes), the memory starts again from an empty
        state that keeps its event sequence number, and the batch's write replaces every
        record the memory had."""
        if key not in self._loaded:
            self._partition[key] = partition
            read, scan = self._reader(partition)
            try:
                loaded = self._unsaved.get(key)
                if loaded is None and self._cache is not None:
                    loaded = self._cache.get(key)
                if loaded is None:
                    loaded = load_state(read, scan, key)
                    if loaded is None and self._blobs is not None:
                        self._forgotten(key, partition)
            except Exception as exc:  # noqa: BLE001 - a damaged or foreign record
                raw = self._read(partition, key) or b""  # as stored (sealed): the dead letter's bytes
                self.unreadable.append(UnreadableState(key, partition, f"{type(exc).__name__}: {exc}"[:2000], raw))
                self._salvaged[key] = _salvage_seq(raw) or _salvage_seq(self._plain(key, raw))
                loaded = None
            self._loaded[key] = loaded
            if loaded is not None:
                self._current[key] = loaded.state
        return self._current.get(key)

    def _forgotten(self, key: bytes, partition: int) -> None:
        """A stored state whose key was shredded reads as none: the memory starts again, as an
        unreadable one does but without a dead letter, from the sequence number its sealed core
        keeps in clear, and its records are replaced."""
        raw = self._read(partition, key)
        if raw is not None:
            self._salvaged[key] = _salvage_seq(raw)

    def salvaged_seq(self, key: bytes) -> int:
        """The event sequence number of an unreadable stored state (0 when there is none), so
        that a memory started again never reuses an event id."""
        return self._salvaged.get(key, 0)

    def check(self, key: bytes, before: MemoryState | None, after: MemoryState) -> None:
        """Raise `TooLarge` if a record `after` adds or replaces would pass the limit."""
        for what, data in changed_records(before, after, self._encoded):
            if len(data) > self.limit:
                raise TooLarge(f"folding the record makes the memory's {what} record {len(data)} bytes; "
                               f"the limit is {self.limit} (below the broker's max.message.bytes)")

    def put(self, key: bytes, state: MemoryState) -> None:
        self._current[key] = state

    def writes(self) -> list[StateWrite]:
        """Every record the batch changes (a value of None deletes), in the order the changelog
        must hold them: the three phases of `omstream.pipeline.storage`."""
        phases: list[list[StateWrite]] = [[], [], []]
        for key, state in self._current.items():
            loaded = self._loaded.get(key)
            if loaded is not None and state is loaded.state and not loaded.legacy:
                self._stored[key] = loaded
                continue
            partition = self._partition[key]
            read, scan = self._reader(partition)
            if key in self._salvaged:
                # An unreadable memory starts again: nothing of the old one is kept.
                phases[0] += [StateWrite(partition, k, None) for k in scan(part_keys(key))]
            elif self._blobs is not None and self._blobs.rolled(key):
                # Its key is about to be shredded: every record it keeps is written again under
                # the successor key (as a version-1 record is: whole, its seen ids included).
                # The old ones go, those the last batch may still be storing too (`unsaved`):
                # not yet in the store, they would outlive the scan, unreadable garbage.
                old = set(scan(part_keys(key)))
                if loaded is not None and loaded.settled:
                    old |= referenced(key, loaded)
                phases[0] += [StateWrite(partition, k, None) for k in sorted(old)]
                keeps = loaded is not None and state.seen.base is loaded.state.seen.base
                loaded = Loaded(loaded.state, legacy=True) if keeps and loaded is not None else None
            plan = plan_writes(key, loaded, state, self._encoded, read, scan)
            phases[0] += [StateWrite(partition, k, v) for k, v in plan.pieces]
            phases[1].append(StateWrite(partition, *plan.core))
            phases[2] += [StateWrite(partition, k, v) for k, v in plan.obsolete]
            self._stored[key] = plan.stored
        writes = [write for phase in phases for write in phase]
        if self._blobs is None:
            return writes
        seal = self._blobs.seal
        return [w if w.value is None else StateWrite(w.partition, w.key, seal(w.key, w.value)) for w in writes]

    def _plain(self, key: bytes, raw: bytes) -> bytes:
        if self._blobs is None:
            return raw
        try:
            return self._blobs.open(key, raw) or b""
        except Exception:  # noqa: BLE001 - damaged: nothing to salvage
            return b""

    def stored(self) -> dict[bytes, Loaded]:
        """The batch's memories as the store has them once `writes()` are written (the next
        batch's `unsaved` until then, and the worker's `StateCache`)."""
        return self._stored


def _opened(read: Callable[[int, bytes], bytes | None], blobs: Blobs, partition: int, key: bytes) -> bytes | None:
    return blobs.open(key, read(partition, key))


def _salvage_seq(raw: bytes) -> int:
    try:
        seq = orjson.loads(raw).get("seq")
    except Exception:  # noqa: BLE001 - not even JSON
        return 0
    return seq if isinstance(seq, int) and seq > 0 else 0
