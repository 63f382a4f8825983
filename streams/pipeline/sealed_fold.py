"""The fold agent's side of crypto-shredding (issue 31): inputs opened, outputs and states sealed,
deleted memories shredded.

The fold itself (`omstream.engine`) never sees a key or a ciphertext.  Before a batch is folded,
`batch_keys` loads every key its inputs name and resolves the data key of every owner its outputs
will be sealed under (`Sealer.prepare`, `Sealer.key_of`), so the per-record code stays
synchronous: `BatchKeys.open_input` before decoding, `BatchKeys.seal_output` after encoding, and
`StateBlobs` around the state table's records.

Owners (`omstream.crypto.sealing.content_owner`): a record is sealed under its memory key, except
a message of a resource memory (and its `om-message-accepted` event), which is its thread's.

Deletion is shredding.  A record whose fold emits `om-memory-deleted` names the owners to shred
(`deleted_owners`): the memory key in thread scope; in resource scope the resource key and every
thread owner of the resource, or, for one thread, that thread's owner and the resource key.  From
that record on, the batch seals those owners' outputs (the event itself, the state written after
it) under their successor keys (`KeyRing.successor_key`), and once the batch's outputs are sent
`FoldLoop` stores the batch's states and then shreds them, which makes each successor current:
what the memory keeps outlives the deletion, what it forgot does not.

Why store before shred, and how a crash between them is finished.  Shredding first would leave,
after a crash before the store, a stored state sealed under the shredded key: unreadable, so the
memory would start again empty and lose what the deletion keeps (a resource's other threads).
Stored first, the state is sealed under the successor and its core names in clear the shreds it
still owes (`"shred": [[owner, epoch, partition, offset], ...]`, `pending_shreds`); the deletion
record is not acked before its shred, so it is read again after a crash, and the fold agent owes
the shreds its stored core names before it resolves the batch's keys.

Each shred names the deletion record (its input-log position, `KeyBook.shredded_by`) and the epoch
it was folded from: a fold that finds its deletion shredded already (another live version folded
it first, or the crash above) keeps the current key for that owner instead of rolling it, and a
shred never reaches past the epoch its fold read, so no version shreds the successor another one
keeps its state under.

Without a namespace key the sealer is `PLAIN` and every method here returns its input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from omstream.crypto.envelope import DataKey
from omstream.crypto.errors import Shredded
from omstream.crypto.sealing import PLAIN, Sealer, content_owner, is_marked, raw_owner
from omstream.schemas.events import EventEnvelope, MemoryDeleted, MessageAccepted

if TYPE_CHECKING:
    from omstream.engine.state import MemoryState
    from omstream.schemas.jobs import ModelJob

__all__ = ["BatchKeys", "Shred", "StateBlobs", "batch_keys", "deleted_owners", "event_context", "event_owner",
           "input_owner", "job_context", "pending_shreds", "resource_threads", "unwrapped"]

log = logging.getLogger("omstream.worker")

_SEP = b"\x00"
#: A sealed core record: `{"seq":<n>,"sealed":"om1d:..."}`.
_CORE_SEALED = "sealed"
_CORE_HEAD = b'{"seq":'
_DELETIONS = ("thread-deleted", "resource-deleted")


@dataclass(frozen=True)
class Shred:
    """One owner's shred: its keys up to `epoch`, for the deletion record at `at` (input-log
    partition, offset)."""

    owner: str
    epoch: int
    at: tuple[int, int]

    def as_json(self) -> list[Any]:
        return [self.owner, self.epoch, *self.at]

    @classmethod
    def from_json(cls, item: Any) -> Shred | None:
        if (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                and all(isinstance(n, int) for n in item[1:])):
            return cls(item[0], item[1], (item[2], item[3]))
        return None


def _of_memory(owner: str, memory_key: str) -> bool:
    return owner == memory_key or owner.startswith(f"thread:{memory_key}/")


class BatchKeys:
    """The data keys one batch is sealed with, resolved before the fold (see the module doc).

    `roll(owners)` switches those owners to their successor keys for the rest of the batch and
    lists them in `shreds` (what to shred once the batch's outputs are sent).  A fold that never
    shreds (`shredding=False`: a bulk replay re-reading history) seals everything under the
    current keys."""

    def __init__(self, sealer: Sealer = PLAIN, current: dict[str, DataKey] | None = None,
                 successors: dict[str, DataKey] | None = None, *, shredding: bool = True,
                 deletions: dict[str, Shred] | None = None) -> None:
        self.sealer, self.shredding = sealer, shredding
        self.current, self.successors = current or {}, successors or {}
        # What each rolling owner's shred is (its epoch and the deletion record); an owner the
        # batch deletes but whose deletion is shredded already is in neither map: it keeps its key.
        self.deletions = deletions or {}
        self.rolled: set[str] = set()
        # Owners whose deletion another fold has shredded: the memory's records are all written
        # again, under the current key (what it kept from before may be sealed under a dead one).
        self.rewritten: set[str] = set()
        self.shreds: list[str] = []
        self.passed_over = 0  # inputs of shredded owners, passed over

    def owed(self, memory_key: str) -> list[Shred]:
        """The shreds of this batch that `memory_key`'s stored core must name until they are done."""
        return [self.deletions[o] for o in self.shreds if _of_memory(o, memory_key)]

    @property
    def enabled(self) -> bool:
        return self.sealer.enabled

    def key(self, owner: str, rolled: Iterable[str] = ()) -> DataKey | None:
        """The key `owner`'s outputs are sealed with now (None: plain).  `rolled`: owners the
        record being folded deletes, not yet rolled for the batch."""
        if not self.enabled:
            return None
        if owner in self.rolled or (owner in rolled and owner in self.successors):
            return self.successors[owner]
        return self.current[owner]

    def roll(self, owners: Iterable[str]) -> None:
        for owner in owners:
            if owner not in self.successors:
                self.rewritten.add(owner)
            elif owner not in self.rolled:
                self.rolled.add(owner)
                self.shreds.append(owner)

    # --- records --------------------------------------------------------------------------------
    def open_input(self, memory_key: str, value: bytes | None) -> bytes | None:
        """The input's bytes opened (unchanged when not sealed); `Shredded` or `Tampered`."""
        if not self.enabled or not is_marked(value):
            return value
        return self.sealer.open(value, input_owner(memory_key, value))

    def seal_output(self, value: bytes, owner: str, context: bytes, rolled: Iterable[str] = ()) -> bytes:
        """An output record sealed under `owner`'s key, deterministically (`context`)."""
        if not self.enabled:
            return value
        return self.sealer.seal_with(value, self.key(owner, rolled), context=context)


def input_owner(memory_key: str, value: bytes | None) -> str:
    """Whose key sealed an input of `memory_key`: a message of a resource memory is its thread's."""
    if not memory_key.startswith("resource:") or not value:
        return memory_key
    return raw_owner(memory_key, value) or memory_key  # not an object: the decoder refuses it


def event_owner(memory_key: str, event: EventEnvelope) -> str:
    """The owner an event is sealed under: an accepted message's is its thread's."""
    return content_owner(memory_key, event.thread_id, is_message=isinstance(event, MessageAccepted))


def event_context(event: EventEnvelope) -> bytes:
    return event.event_id.encode()


def job_context(job: ModelJob) -> bytes:
    """A job's identity: its cycle and kind, and its request's hash (a resource memory's
    observation makes one job per batch of threads under one cycle id)."""
    return f"{job.cycle_id}:{job.kind}:{job.request_hash}".encode()


def resource_threads(state: MemoryState | None) -> set[str]:
    """Every thread a resource memory knows of: its metadata, pending messages and held inputs."""
    if state is None:
        return set()
    threads = set(state.threads)
    threads |= {m.thread_id for m in state.pending if getattr(m, "thread_id", None)}  # type: ignore[misc]
    threads |= {raw["threadId"] for raw in state.held if isinstance(raw.get("threadId"), str)}
    return threads


def _holds_content(state: MemoryState | None) -> bool:
    if state is None:
        return False
    return bool(state.observations or state.pending or state.held or state.history or state.threads
                or any(True for _ in state.seen))


def deleted_owners(memory_key: str, before: MemoryState | None, events: Sequence[EventEnvelope]) -> tuple[str, ...]:
    """The owners a record's fold deletes (its `om-memory-deleted` events), in shred order.

    None when the memory held nothing of what the record deletes: a deletion folded again from a
    state that reads as none (sealed under a key another version's shred killed) or by a version
    replaying history (whose earlier records were passed over as shredded) must not shred the
    keys the first shred left current, which seal what came after."""
    owners: list[str] = []
    for event in events:
        if not isinstance(event, MemoryDeleted) or not _holds_content(before):
            continue
        if not memory_key.startswith("resource:"):
            owners.append(memory_key)
        elif event.thread_id and event.data.reason == "thread-deleted":
            if event.thread_id in resource_threads(before):
                owners += [content_owner(memory_key, event.thread_id, is_message=True), memory_key]
        else:
            threads = sorted(resource_threads(before))
            owners += [content_owner(memory_key, t, is_message=True) for t in threads]
            owners.append(memory_key)
    return tuple(dict.fromkeys(owners))


async def batch_keys(sealer: Sealer, batch: Sequence[Any],
                     threads_of: Callable[[str, int], set[str]] | None = None, *, shredding: bool = True) -> BatchKeys:
    """Load the keys a batch of consumed records needs: every key its sealed inputs name, the
    current key of each memory and message thread, and the successor keys of the owners a
    deletion in the batch may roll.  `threads_of(memory key, partition)`: the threads a resource
    memory's stored state knows (a held message of one of them may be accepted in this batch)."""
    if not sealer.enabled:
        return BatchKeys(sealer, shredding=shredding)
    await sealer.prepare(m.value for m in batch)
    owners: set[str] = set()
    deleting: dict[str, tuple[int, int]] = {}  # memory -> its first deletion record in the batch
    named: set[str] = set()  # the owners of the deleted threads
    for message in batch:
        memory = (message.key or b"").decode("utf-8", "replace")
        if not memory:
            continue
        if memory not in owners and threads_of is not None and memory.startswith("resource:"):
            owners |= {content_owner(memory, t, is_message=True) for t in threads_of(memory, message.partition)}
        owners.add(memory)
        owner = input_owner(memory, message.value)
        owners.add(owner)
        if shredding and _record_type(message.value) in _DELETIONS:
            deleting.setdefault(memory, (message.partition, message.offset))
            named.add(_deleted_thread_owner(memory, message.value))
    # A deleted memory's owners that the batch uses after the deletion are sealed under their
    # successors: resolve them for every owner the batch names of that memory.
    rolling = {o: m for o in owners | named - {""} for m in deleting if _of_memory(o, m)}
    current = {owner: await sealer.key_of(owner) for owner in sorted(owners | set(rolling))}
    deletions = {o: Shred(o, sealer.epoch(o), deleting[m]) for o, m in sorted(rolling.items())
                 if not sealer.shredded_by(o, deleting[m])}
    assert sealer.ring is not None
    successors = {owner: await sealer.ring.successor_key(owner) for owner in deletions}
    return BatchKeys(sealer, current, successors, shredding=shredding, deletions=deletions)


def pending_shreds(raw: bytes) -> list[Shred]:
    """The shreds a stored core record names as owed (none for any other record)."""
    if not raw.startswith(_CORE_HEAD) or b',"shred":' not in raw[:40]:  # right after the sequence number
        return []
    try:
        items = orjson.loads(raw).get("shred")
    except orjson.JSONDecodeError:
        return []
    found = [Shred.from_json(item) for item in items] if isinstance(items, list) else []
    return [s for s in found if s is not None]


def _record_type(value: bytes | None) -> str | None:
    if not value or (b"deleted" not in value):
        return None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def _deleted_thread_owner(memory_key: str, value: bytes | None) -> str:
    try:
        thread = orjson.loads(value or b"{}").get("threadId")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    owner = content_owner(memory_key, thread if isinstance(thread, str) else None, is_message=True)
    return owner if owner != memory_key else ""


def unwrapped(raw: bytes) -> bytes:
    """A state record's sealed blob (a core record wraps its own with its sequence number)."""
    if not raw.startswith(_CORE_HEAD):
        return raw
    try:
        blob = orjson.loads(raw).get(_CORE_SEALED)
    except orjson.JSONDecodeError:
        return raw  # damaged: reading it reports it (`state-unreadable`)
    return orjson.dumps(blob) if isinstance(blob, str) else raw


class StateBlobs:
    """The state table's records sealed whole under their memory's key (the record key is the
    context, so a refold writes the same bytes), opened when read.  A record whose key was
    shredded reads as absent: a shredded memory's state is no state, and it starts again.

    Opening needs only the sealer; `keys` (the batch's, set once resolved) seal."""

    def __init__(self, keys: BatchKeys) -> None:
        self.keys = keys

    @staticmethod
    def memory_of(record_key: bytes) -> str:
        return record_key.split(_SEP, 1)[0].decode("utf-8", "replace")

    def open(self, record_key: bytes, raw: bytes | None) -> bytes | None:
        if raw is None or not self.keys.enabled:
            return raw
        try:
            return self.keys.sealer.open_blob(unwrapped(raw), self.memory_of(record_key))
        except Shredded:
            return None

    def rolled(self, memory_key: bytes) -> bool:
        """Whether every record of the memory is written again (under a key that outlives the
        batch's deletion)."""
        memory = memory_key.decode("utf-8", "replace")
        return self.keys.enabled and (memory in self.keys.rolled or memory in self.keys.rewritten)

    def seal(self, record_key: bytes, raw: bytes) -> bytes:
        if not self.keys.enabled:
            return raw
        key = self.keys.key(self.memory_of(record_key))
        sealed = self.keys.sealer.seal_blob(raw, key, context=record_key)
        if _SEP in record_key or sealed is raw:
            return sealed
        # The core keeps its event sequence number in clear: a memory whose key was shredded
        # starts again from it, so that its new events never reuse an event id.
        seq = orjson.loads(raw).get("seq", 0)
        owed = self.keys.owed(self.memory_of(record_key))
        shreds = b'"shred":%s,' % orjson.dumps([s.as_json() for s in owed]) if owed else b""
        return b'{"seq":%d,%s"%s":%s}' % (seq if isinstance(seq, int) else 0, shreds, _CORE_SEALED.encode(), sealed)
