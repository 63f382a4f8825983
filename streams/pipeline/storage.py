"""How a memory's state is stored: a small record plus pieces that are written only when they change.

A memory's state (`MemoryState`) holds things of three kinds, stored differently so that what
is rewritten per batch is proportional to what changed, not to the thread's history:

=================  ==========================================  ===================================
kind               fields                                      stored as
=================  ==========================================  ===================================
scalars            counters, cursor, title, offsets, ...       the **core** record, key ``K``
large values       observations, chunks, buffered reflection,  one record each, ``K\\0<name>``,
                   the three cycles in flight                  rewritten only when replaced
sequences          pending messages, held inputs, history      one record per item, ``K\\0<name>\\0<index>``
message ids        `seen` (id -> content hash)                 one record per id, ``K\\0s\\0<id>``
=================  ==========================================  ===================================

``K`` is the memory key, so every record of a memory sorts together and a prefix names them all.
A sequence item keeps the index it was first stored under; the core lists the live index ranges,
so appending a pending message writes that message alone and observing a hundred deletes a
hundred small records.  Identity tells what changed: the fold replaces what it changes and keeps
the rest (`model_copy`), so an unchanged piece is the very object that was loaded.

**Crash safety: the core record is the root, written last.**  A batch's records reach the
changelog in three phases, in this order on the memory's partition (sent together; the producer
keeps a partition's order, see `omstream.worker.table.StateStore.write`): (1) every new piece, under a key
the stored core does not reference (new item indices, large values under the write's number
``K\0<name>\0<n>``); (2) the core, which now references them and carries the message ids this
write adds (``seenAdded``); (3) those ids as records of their own, stamped with ``n``, and the
deletion of what the old core referenced and the new one does not.  An id is written only
after the core that accepted its message: a crashed attempt folded in other batch boundaries
must not leave ids behind that a later core would take for its own (messages would be dropped
as duplicates).  A crash inside
phase 1 leaves pieces nobody references (the refold writes them again); inside phase 3,
garbage the core lists under ``gc`` and ids under ``seenAdded``, which the memory's next write
deletes or writes first.  The changelog
never holds a core whose pieces are missing or newer, so what a restart restores is one batch's
state or the next's, never a mixture.  Seen ids stamped with a number above the core's, or
below the write that last reset the memory (``seenFrom``), are not seen.  (One exception: a
broker that refuses one of a write's records but takes a later one, which the producer does
only for a batch it could not deliver for `producer_request_timeout`, 20 minutes without a
leader, or for a record the broker will never take.  The write is then sent again whole; a
crash before that leaves a core with a missing piece, read as `state-unreadable`.)

The core record carries a schema version (`"v"`).  A record without one is a whole state from
before this layout (version 1, `seen` inline); it is read as such and written back in this
layout by the next batch that touches the memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import TypeAdapter

from omstream.engine.state import (
    BufferedChunk,
    BufferedReflection,
    Cycle,
    Generation,
    MemoryState,
    PendingMessage,
    Seen,
)
from omstream.schemas.errors import OmError

__all__ = ["SCHEMA_VERSION", "Encodings", "Loaded", "Plan", "Read", "Scan", "StateUnreadable", "StoredSeen",
           "changed_records", "load_state", "part_keys", "plan_writes", "referenced", "states_of"]

SCHEMA_VERSION = 2
SEP = b"\x00"

#: The observation log: segments ``K\0o\0<index>`` whose concatenation is the text.  An
#: activation appends (one more segment); a reflection or a deletion replaces them all.
LOG = b"o"
#: Large values: field -> short name in the key.  Rewritten only when the fold replaces them.
PARTS = {"chunks": b"c", "buffered_reflection": b"r", "in_flight": b"f",
         "buffering": b"b", "reflection_buffering": b"x"}
#: Sequences: field -> short name; one record per item.
SEQUENCES = {"pending": b"p", "held": b"h", "history": b"g"}
SEEN = b"s"
_NOT_CORE = {*PARTS, *SEQUENCES, "seen", "observations"}
#: The core's only fields whose size the fold does not bound (the rest are counters, times,
#: ids and lists capped at 64): the core is measured when one of them changes.
_UNBOUNDED_CORE = ("title", "current_task", "suggested_response", "resource_id", "thread_id")

_PART_TYPES: dict[str, TypeAdapter[Any]] = {
    "chunks": TypeAdapter(tuple[BufferedChunk, ...]),
    "buffered_reflection": TypeAdapter(BufferedReflection | None),
    "in_flight": TypeAdapter(Cycle | None),
    "buffering": TypeAdapter(Cycle | None),
    "reflection_buffering": TypeAdapter(Cycle | None),
}
_PENDING, _GENERATION = TypeAdapter(PendingMessage), TypeAdapter(Generation)
#: How a sequence item is read from its record.  Held inputs are plain JSON objects: orjson
#: reads them several times faster than a validator would.
_READ_ITEM: dict[str, Callable[[bytes], Any]] = {
    "pending": _PENDING.validate_json, "held": orjson.loads, "history": _GENERATION.validate_json,
    "observations": orjson.loads}  # a segment of the observation log: a JSON string
_EMPTY: dict[str, Any] = {"chunks": (), "buffered_reflection": None,
                          "in_flight": None, "buffering": None, "reflection_buffering": None}

Read = Callable[[bytes], bytes | None]
Scan = Callable[[bytes], Iterable[bytes]]


def part_key(key: bytes, name: bytes, version: int) -> bytes:
    return item_key(key, name, version)


def item_key(key: bytes, name: bytes, index: int) -> bytes:
    # Big-endian, so a memory's items sort in index order.
    return key + SEP + name + SEP + index.to_bytes(8, "big")


def seen_prefix(key: bytes) -> bytes:
    """The prefix of memory `key`'s seen-id records."""
    return key + SEP + SEEN + SEP


def seen_key(key: bytes, message_id: str) -> bytes:
    return seen_prefix(key) + message_id.encode()


def part_keys(key: bytes) -> bytes:
    """The prefix of every record of memory `key` except its core record."""
    return key + SEP


class StoredSeen(Mapping[str, str]):
    """`seen` as the stored records of one memory: looked up one id at a time, never loaded."""

    def __init__(self, read: Read, scan: Scan, key: bytes, written: int, since: int,
                 recent: dict[str, str]) -> None:
        self._read, self._scan, self._key = read, scan, key
        self._written, self._since = written, since  # the core's write number, its seenFrom
        self.recent = recent  # the core's seenAdded: ids whose records may not be written yet

    def get(self, message_id: str, default: Any = None) -> Any:
        found = self.recent.get(message_id)
        if found is None:
            found = _seen_entry(self._read(seen_key(self._key, message_id)), self._written, self._since)
        return found if found is not None else default

    def __getitem__(self, message_id: str) -> str:
        found: str | None = self.get(message_id)
        if found is None:
            raise KeyError(message_id)
        return found

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __iter__(self) -> Iterator[str]:
        prefix = seen_prefix(self._key)
        stored = (k[len(prefix):].decode() for k in self._scan(prefix)
                  if _seen_entry(self._read(k), self._written, self._since) is not None)
        return iter({**dict.fromkeys(stored), **dict.fromkeys(self.recent)})

    def __contains__(self, message_id: object) -> bool:
        return isinstance(message_id, str) and self.get(message_id) is not None


def _seen_entry(raw: bytes | None, written: int, since: int) -> str | None:
    """The digest of a stored seen id, or None if absent or not written by the stored state."""
    if raw is None:
        return None
    stamp, _, digest = raw.decode().partition(":")
    return digest if since <= int(stamp) <= written else None


def _seen_value(written: int, digest: str) -> bytes:
    return f"{written}:{digest}".encode()


@dataclass
class Loaded:
    """A memory as read at the start of a batch, with the stored index of every sequence item."""

    state: MemoryState
    indices: dict[str, dict[int, int]] = field(default_factory=dict)  # field -> id(item) -> index
    next_index: dict[str, int] = field(default_factory=dict)
    segments: list[int] = field(default_factory=list)  # the observation log's segment indices
    written: int = 0  # how many times the memory was written: the core's "n"
    part_versions: dict[str, int] = field(default_factory=dict)
    seen_from: int = 0
    gc: dict[str, Any] = field(default_factory=dict)  # garbage the last write left to delete
    legacy: bool = False  # a version-1 record: write everything back in this layout
    #: Made by this process's own write (`Plan.stored`), whose last phase lands before the next
    #: write's first: its garbage and ids need not be written again.
    settled: bool = False


class StateUnreadable(OmError, ValueError):
    """A stored core record this version cannot read (a newer schema, or damaged bytes)."""


def load_state(read: Read, scan: Scan, key: bytes) -> Loaded | None:
    """The stored memory `key`, or None when there is none."""
    raw = read(key)
    if raw is None:
        return None
    try:
        core = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StateUnreadable(f"the stored state of {key!r} is not JSON: {exc}") from exc
    if not isinstance(core, dict):
        raise StateUnreadable(f"the stored state of {key!r} is not a JSON object")
    version = core.pop("v", 1)
    if version == 1:
        return Loaded(MemoryState.model_validate(core), legacy=True)
    if version != SCHEMA_VERSION:
        raise StateUnreadable(f"the stored state of {key!r} has schema version {version}; this worker "
                              f"reads versions 1 and {SCHEMA_VERSION}")
    ranges = core.pop("ranges")
    next_index = core.pop("next")
    written, seen_from, recent = core.pop("n"), core.pop("seenFrom"), core.pop("seenAdded")
    part_versions, gc = core.pop("parts"), core.pop("gc")
    fields: dict[str, Any] = dict(core)
    segments = _indices(ranges.get("observations", ()))
    fields["observations"] = "".join(_item(read, key, "observations", LOG, index) for index in segments)
    for name, short in PARTS.items():
        if name not in part_versions:
            fields[name] = _EMPTY[name]
            continue
        value = read(part_key(key, short, part_versions[name]))
        if value is None:
            raise StateUnreadable(f"the stored state of {key!r} lacks its {name} record")
        fields[name] = _PART_TYPES[name].validate_json(value)
    stored_at: dict[str, list[int]] = {}  # sequence -> the index of each item, in order
    for name, short in SEQUENCES.items():
        stored_at[name] = _indices(ranges.get(name, ()))
        fields[name] = tuple(_item(read, key, name, short, i) for i in stored_at[name])
    fields["seen"] = Seen(StoredSeen(read, scan, key, written, seen_from, recent))
    state = MemoryState.model_validate(fields)
    # Validation may copy containers: index the items the state actually holds.
    indices = {name: {id(item): index for item, index in zip(getattr(state, name), stored_at[name])}
               for name in SEQUENCES}
    return Loaded(state, indices, {name: next_index.get(name, 0) for name in (*SEQUENCES, "observations")},
                  segments, written, part_versions, seen_from, gc)


def _item(read: Read, key: bytes, name: str, short: bytes, index: int) -> Any:
    value = read(item_key(key, short, index))
    if value is None:
        raise StateUnreadable(f"the stored state of {key!r} lacks {name} item {index}")
    return _READ_ITEM[name](value)


@dataclass
class Encodings:
    """Encodings made while a batch is folded, reused when it is written (keyed by object
    identity; the object is kept so its id cannot be reused by another)."""

    by_id: dict[int, tuple[Any, bytes]] = field(default_factory=dict)

    def get(self, obj: Any, encode: Callable[[Any], bytes]) -> bytes:
        hit = self.by_id.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        data = encode(obj)
        self.by_id[id(obj)] = (obj, data)
        return data


def _encode_part(name: str) -> Callable[[Any], bytes]:
    return lambda value: _PART_TYPES[name].dump_json(value)


def _encode_item(name: str) -> Callable[[Any], bytes]:
    if name == "held":
        return orjson.dumps
    # As the core: a pending message's empty title, parts, attachments and tool calls are not written.
    return lambda item: item.model_dump_json(exclude_defaults=True).encode()


def encode_core(state: MemoryState, ranges: dict[str, list[list[int]]], next_index: dict[str, int],
                written: int = 0, parts: dict[str, int] | None = None, seen_from: int = 0,
                gc: dict[str, Any] | None = None, seen_added: dict[str, str] | None = None) -> bytes:
    # Fields at their defaults are left out (a memory's core is rewritten every batch, and most
    # of its fifty fields are null, zero or empty most of the time): reading fills them in again,
    # so a core written either way reads the same, by this version and the ones before it.
    core = state.model_dump(mode="json", exclude=_NOT_CORE, exclude_defaults=True)
    return orjson.dumps({"v": SCHEMA_VERSION, **core, "ranges": ranges, "next": next_index, "n": written,
                         "parts": parts or {}, "seenFrom": seen_from, "gc": gc or {},
                         "seenAdded": seen_added or {}})


def _indices(ranges: Iterable[list[int]]) -> list[int]:
    """The indices of `[start, end)` ranges, in order (the inverse of `_ranges`)."""
    return [i for start, end in ranges for i in range(start, end)]


def _ranges(indices: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for index in indices:
        if out and out[-1][1] == index:
            out[-1][1] = index + 1
        else:
            out.append([index, index + 1])
    return out


@dataclass
class Plan:
    """A memory's writes in their three phases (see the module docstring); None deletes."""

    pieces: list[tuple[bytes, bytes | None]]
    core: tuple[bytes, bytes]
    obsolete: list[tuple[bytes, bytes | None]]
    stored: Loaded  # what `load_state` reads once these records are written


def plan_writes(key: bytes, loaded: Loaded | None, state: MemoryState, encoded: Encodings,
                read: Read, scan: Scan) -> Plan:
    """The records that turn what was stored (`loaded`) into `state`."""
    old = loaded if loaded is not None and not loaded.legacy else None
    written = (old.written if old is not None else 0) + 1
    # What the last write left to do, first: its garbage (nothing references it) and its ids.
    pieces = []
    left: list[tuple[bytes, bytes | None]] = []
    if old is not None and not old.settled:
        pieces += _garbage(key, old.gc, read, scan)
        left = [(seen_key(key, i), _seen_value(old.written, d)) for i, d in _recent(old).items()]
    at = len(pieces)
    gc: dict[str, Any] = {"items": {}, "parts": {}, "log": []}
    parts: dict[str, int] = {}
    for name, short in PARTS.items():
        value = getattr(state, name)
        version = old.part_versions.get(name) if old is not None else None
        if old is not None and value is getattr(old.state, name):
            if version is not None:
                parts[name] = version
            continue
        if version is not None:
            gc["parts"][name] = version
        if value != _EMPTY[name]:
            pieces.append((part_key(key, short, written), encoded.get(value, _encode_part(name))))
            parts[name] = written
    ranges: dict[str, list[list[int]]] = {}
    next_index: dict[str, int] = {}
    indices: dict[str, dict[int, int]] = {}
    for name, short in SEQUENCES.items():
        where = old.indices.get(name, {}) if old is not None else {}
        counter = old.next_index.get(name, 0) if old is not None else 0
        kept: set[int] = set()
        order: list[int] = []
        for item in getattr(state, name):
            index = where.get(id(item))
            if index is None or (order and index <= order[-1]):
                index = counter  # new, or out of order: stored again at the end
                counter += 1
                pieces.append((item_key(key, short, index), encoded.get(item, _encode_item(name))))
            else:
                kept.add(index)
            order.append(index)
        gc["items"][name] = _ranges(sorted(i for i in where.values() if i not in kept))
        ranges[name] = _ranges(order)
        next_index[name] = counter
        indices[name] = {id(item): index for item, index in zip(getattr(state, name), order)}
    pieces += _log_writes(key, old, state, ranges, next_index, gc)
    seen_from, seen_added = _seen_pieces(key, loaded, state, written, pieces, gc)
    if "seenBefore" not in gc:
        # The last write's ids, unless this write starts the memory again: then they would be
        # stamped below its seenFrom, and those not in the store yet would escape the scan
        # that deletes the old ids (`_garbage`), left behind for good.
        pieces[at:at] = left
    core = (key, encode_core(state, ranges, next_index, written, parts, seen_from, gc, seen_added))
    ids = [(seen_key(key, i), _seen_value(written, d)) for i, d in seen_added.items()]
    # The same objects, so the next write finds what is unchanged by identity; only `seen` is
    # rebased onto the stored ids, as a load would.
    seen = Seen(StoredSeen(read, scan, key, written, seen_from, seen_added))
    segments = _indices(ranges["observations"])
    stored = Loaded(state.model_copy(update={"seen": seen}), indices, next_index, segments, written,
                    parts, seen_from, gc, settled=True)
    # An id this write accepts again after a reset (a deletion) has an old record in the store
    # that its new one, sent just before, overwrites: deleting the old one would delete the
    # new one too, leaving the id only in the core's seenAdded (see `_garbage`).
    obsolete = _garbage(key, gc, read, scan, rewritten=seen_added)
    if old is not None and old.settled and "seenBefore" in gc:
        # The last write's ids may not be in the store yet, where `_garbage` looks for them.
        obsolete += [(seen_key(key, i), None) for i in _recent(old) if i not in seen_added]
    return Plan(pieces, core, ids + obsolete, stored)


def referenced(key: bytes, loaded: Loaded) -> set[bytes]:
    """The records of memory `key` that its core (as `loaded`) references, and the ids it added:
    what a write planned before the last write reached the store cannot find by a scan."""
    if loaded.legacy:
        return set()
    refs = {item_key(key, short, index) for name, short in SEQUENCES.items()
            for index in loaded.indices.get(name, {}).values()}
    refs |= {part_key(key, PARTS[name], version) for name, version in loaded.part_versions.items()}
    refs |= {item_key(key, LOG, index) for index in loaded.segments}
    return refs | {seen_key(key, i) for i in _recent(loaded)}


def _recent(loaded: Loaded) -> dict[str, str]:
    """The ids a stored memory's core added (its `seenAdded`): written by the next write."""
    base = loaded.state.seen.base
    if not isinstance(base, StoredSeen):  # every memory loaded from, or planned for, the store
        raise TypeError(f"the seen ids of a stored memory are a StoredSeen, not {type(base).__name__}")
    return base.recent


def _garbage(key: bytes, gc: dict[str, Any], read: Read, scan: Scan,
             rewritten: Mapping[str, str] | None = None) -> list[tuple[bytes, bytes | None]]:
    """Deletions of the records `gc` lists (a core's "gc": what its write made obsolete), but
    for the seen ids the write stores anew (`rewritten`)."""
    out: list[tuple[bytes, bytes | None]] = []
    for name, ranges in gc.get("items", {}).items():
        out += [(item_key(key, SEQUENCES[name], i), None) for i in _indices(ranges)]
    out += [(part_key(key, PARTS[name], version), None) for name, version in gc.get("parts", {}).items()]
    out += [(item_key(key, LOG, i), None) for i in _indices(gc.get("log", ()))]
    if gc.get("seenBefore"):
        prefix, kept = seen_prefix(key), {seen_key(key, i) for i in rewritten or ()}
        out += [(k, None) for k in scan(prefix) if k not in kept
                and (raw := read(k)) is not None and int(raw.split(b":", 1)[0]) < gc["seenBefore"]]
    return out


def _appended(before: str, after: str) -> str | None:
    """What `after` adds to `before`, or None when it is not an append (a reflection)."""
    if before and after.startswith(before):
        return after[len(before):]
    return None


def _log_writes(key: bytes, old: Loaded | None, state: MemoryState, ranges: dict[str, list[list[int]]],
                next_index: dict[str, int], gc: dict[str, Any]) -> list[tuple[bytes, bytes | None]]:
    """The observation log as segments: an append writes only what it added."""
    segments = list(old.segments) if old is not None else []
    counter = old.next_index.get("observations", 0) if old is not None else 0
    writes: list[tuple[bytes, bytes | None]] = []
    text = state.observations
    if old is None or text is not old.state.observations:
        added = _appended(old.state.observations, text) if old is not None else None
        if added is None:
            gc["log"] = _ranges(segments)
            segments, added = [], text
        if added:
            writes.append((item_key(key, LOG, counter), orjson.dumps(added)))
            segments.append(counter)
            counter += 1
    ranges["observations"] = _ranges(segments)
    next_index["observations"] = counter
    return writes


def _seen_pieces(key: bytes, loaded: Loaded | None, state: MemoryState, written: int,
                 pieces: list[tuple[bytes, bytes | None]], gc: dict[str, Any]) -> tuple[int, dict[str, str]]:
    """The core's `seenFrom` and `seenAdded` (the ids this write adds); a version-1 record's own
    ids, known before any batch, go straight to `pieces`."""
    seen = state.seen
    if loaded is not None and not loaded.legacy and seen.base is loaded.state.seen.base:
        return loaded.seen_from, seen.added
    # A new memory, a deleted one started again, or a version-1 record: the stored ids are
    # replaced by the state's own, and older stamps stop counting.
    gc["seenBefore"] = written
    known = loaded.state.seen.base if loaded is not None and loaded.legacy else {}
    pieces += [(seen_key(key, i), _seen_value(written, d)) for i, d in known.items()]
    return written, {i: d for i, d in seen.items() if i not in known}


def changed_records(before: MemoryState | None, after: MemoryState,
                    encoded: Encodings) -> Iterator[tuple[str, bytes]]:
    """The records a fold that turned `before` into `after` adds or replaces, as (which, bytes),
    so that their size can be checked before anything is sent: what the observation log
    appends, each large value replaced, each sequence item appended, and the core when a field
    whose size the fold does not bound changed."""
    if before is None or after.observations is not before.observations:
        added = _appended(before.observations, after.observations) if before is not None else None
        yield "observations", orjson.dumps(after.observations if added is None else added)
    for name in PARTS:
        value = getattr(after, name)
        if before is not None and value is getattr(before, name):
            continue
        yield name, encoded.get(value, _encode_part(name))
    for name in SEQUENCES:
        # What the record appended: the items after the last one the state had before.
        last = getattr(before, name)[-1] if before is not None and getattr(before, name) else None
        for item in reversed(getattr(after, name)):
            if item is last:
                break
            yield name, encoded.get(item, _encode_item(name))
    if before is None or any(getattr(after, f) is not getattr(before, f) for f in _UNBOUNDED_CORE):
        yield "core", encode_core(after, {}, {})


def states_of(records: dict[bytes, bytes]) -> dict[str, MemoryState]:
    """Every memory in a table's latest records (e.g. its compacted changelog read to the end),
    `seen` loaded in full: for tools and tests, not the fold's path."""
    def read(k: bytes) -> bytes | None:
        return records.get(k)

    def scan(prefix: bytes) -> list[bytes]:
        return sorted(k for k in records if k.startswith(prefix))

    out = {}
    for key in records:
        if SEP not in key:
            loaded = load_state(read, scan, key)
            if loaded is not None:
                state = loaded.state
                out[key.decode()] = state.model_copy(update={"seen": Seen(dict(state.seen))})
    return out
