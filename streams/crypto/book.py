"""The key book: what the records of `<ns>.keys`, applied in the topic's order, say.

The topic has one partition, so every process reads the same total order.  Three kinds of record:

    dk:<key id>        {"memoryKey", "epoch", "wrappedBy", "wrapped", "first"?}  a data key
                       (None: its tombstone)
    shred:<memory key> {"epoch": e, "at": [p, o]?}   every data key of that memory up to epoch e
                       is shredded, by the deletion at offset o of partition p of the input log
    tick               {}             a write that rolls the active segment (see KeyRing.tick)

The rules, and why they survive races and compaction:

- **Each proposal is its own compaction key** (`dk:<random key id>`).  Two producers that create
  a memory's first key at once both write a proposal; compaction keeps both (different keys)
  and never reorders survivors, so every reader, before and after compaction, sees the same
  FIRST proposal of the memory's epoch, and that one is the key everyone encrypts with.  The
  loser is never used for encryption; its creator tombstones it once it sees it lost.  Every
  live proposal still decrypts, so a reader never depends on who won.
- **A shred is sticky.**  The marker `shred:<memory key>` stays in the topic (the latest of its
  compaction key, never tombstoned) and kills every proposal of that memory up to its epoch,
  including one that lands after it (a producer that had not seen the shred yet, a rewrap racing
  it).  Such a proposal is listed in `repairs`: a repairing ring writes its tombstone, so its
  wrapped bytes are compacted away like the others.
- **A rewrap keeps the order.**  A proposal re-written under a new namespace key carries
  `first`, the offset of the original, so it keeps its place among its memory's proposals.
- A memory deleted and used again gets epoch e+1: a new key, never one of the shredded ones.
- **A deletion shreds once, whoever folds it.**  The marker names the deletion record (`at`), and
  every live version of the namespace folds the same input log: a fold that finds its deletion
  already shredded (`shredded_by`) keeps the current key instead of shredding again, so a
  version that folds the deletion after another one cannot shred the key that version's kept
  state is sealed with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from .envelope import DataKey
from .errors import KeyNotLoaded, Shredded
from .wrapping import NamespaceKeys

__all__ = ["DK", "SHRED", "TICK", "KeyBook", "Proposal", "proposal_value", "shred_value"]

DK = "dk:"
SHRED = "shred:"
TICK = b"tick"


@dataclass
class Proposal:
    key_id: str
    memory_key: str
    epoch: int
    order: int  # the offset of the first record of this key id (kept by a rewrap)
    wrapped_by: str
    wrapped: str = field(repr=False)


def shred_value(epoch: int, at: tuple[int, int] | None = None) -> bytes:
    """The record of a shred marker: up to `epoch`, for the deletion record at `at` (if named)."""
    return orjson.dumps({"v": 1, "epoch": epoch, **({"at": list(at)} if at is not None else {})})


def proposal_value(p: Proposal) -> bytes:
    """The record of a proposal; `first` only on a rewrite (a new proposal's order is its offset)."""
    value: dict[str, Any] = {"v": 1, "memoryKey": p.memory_key, "epoch": p.epoch, "wrappedBy": p.wrapped_by,
                             "wrapped": p.wrapped}
    if p.order >= 0:
        value["first"] = p.order
    return orjson.dumps(value)


class KeyBook:
    """The state of the keys topic, as far as it has been read.  No I/O: `KeyRing` feeds it."""

    def __init__(self, keys: NamespaceKeys) -> None:
        self.namespace_keys = keys
        self.live: dict[str, Proposal] = {}
        # `live` by memory key: a lookup per memory and batch must not scan every memory's keys.
        self._by_memory: dict[str, dict[str, Proposal]] = {}
        self.shredded_ids: set[str] = set()
        self.shredded_epoch: dict[str, int] = {}
        self.shred_at: dict[str, tuple[int, int]] = {}  # the last deletion shredded, by memory key
        self.repairs: set[str] = set()  # live-looking proposals a repairing ring must tombstone
        self.malformed = 0  # records passed over
        self._keys: dict[str, DataKey] = {}

    # --- reading ------------------------------------------------------------------------------
    def current(self, memory_key: str, ahead: int = 0) -> Proposal | None:
        """The key the memory's content is encrypted with: the first live proposal of its epoch
        (`ahead=1`: of the next epoch, the key a shred of this one leaves current)."""
        epoch = self.epoch(memory_key) + ahead
        mine = [p for p in self._by_memory.get(memory_key, {}).values() if p.epoch == epoch]
        return min(mine, key=lambda p: p.order, default=None)

    def epoch(self, memory_key: str) -> int:
        """The memory's current epoch: one past its last shred."""
        return self.shredded_epoch.get(memory_key, -1) + 1

    def key(self, key_id: str) -> DataKey:
        """The data key of `key_id`; `Shredded` if it was shredded, `KeyNotLoaded` if not read yet."""
        found = self._keys.get(key_id)
        if found is not None:
            return found
        p = self.live.get(key_id)
        if p is not None:
            material = self.namespace_keys.unwrap(p.wrapped_by, p.wrapped, p.key_id, p.memory_key, p.epoch)
            found = self._keys[key_id] = DataKey(key_id, p.memory_key, material)
            return found
        if key_id in self.shredded_ids:
            raise Shredded(key_id)
        raise KeyNotLoaded(f"data key {key_id} is not in the key ring (yet)")

    def shredded_by(self, memory_key: str, at: tuple[int, int]) -> bool:
        """Whether the deletion at `at` (input-log partition, offset), or a later one of the same
        partition, has shredded the memory's keys."""
        done = self.shred_at.get(memory_key)
        return done is not None and done[0] == at[0] and done[1] >= at[1]

    def shred_plan(self, memory_key: str, through: int | None = None) -> tuple[int, list[str]] | None:
        """What a shred of the memory up to epoch `through` (default: its current epoch) writes:
        the marker's epoch and the key ids to tombstone (a successor key survives); None when
        those keys are shredded already (a deletion shredded again, or by another version)."""
        if through is not None and self.shredded_epoch.get(memory_key, -1) >= through:
            return None
        epoch = self.epoch(memory_key) if through is None else through
        return epoch, [p.key_id for p in self.of_memory(memory_key) if p.epoch <= epoch]

    def of_memory(self, memory_key: str) -> list[Proposal]:
        return list(self._by_memory.get(memory_key, {}).values())

    def stale_wrapping(self) -> list[Proposal]:
        """Live proposals wrapped by another namespace key than the current one."""
        return [p for p in self.live.values() if p.wrapped_by != self.namespace_keys.current]

    # --- applying records -----------------------------------------------------------------------
    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        """Apply one record of the topic (records in offset order).  Unknown records are skipped:
        a newer build's record kind must not stop an older reader."""
        name = (key or b"").decode(errors="replace")
        try:
            if name.startswith(DK):
                self._apply_proposal(name[len(DK):], value, offset)
            elif name.startswith(SHRED) and value is not None:
                data = orjson.loads(value)
                at = data.get("at")
                self._apply_shred(name[len(SHRED):], int(data["epoch"]),
                                  (int(at[0]), int(at[1])) if isinstance(at, list) and len(at) == 2 else None)
        except (ValueError, KeyError, TypeError):
            # Not a record a ring wrote: it cannot stop the ring (a wrapped key that does not
            # authenticate is refused later, by `key`).
            self.malformed += 1

    def _apply_proposal(self, key_id: str, value: bytes | None, offset: int) -> None:
        if value is None:  # a tombstone
            self._forget(key_id)
            self.repairs.discard(key_id)
            return
        data: dict[str, Any] = orjson.loads(value)
        known = self.live.get(key_id)
        p = Proposal(key_id, data["memoryKey"], int(data["epoch"]),
                     known.order if known else int(data.get("first", offset)),
                     data["wrappedBy"], data["wrapped"])
        if key_id in self.shredded_ids or p.epoch <= self.shredded_epoch.get(p.memory_key, -1):
            # Written after its shred (a race): dead, and its bytes must go too.
            self._forget(key_id)
            self.repairs.add(key_id)
            return
        if known is not None and known.memory_key != p.memory_key:
            self._unindex(known)
        self.live[key_id] = p
        self._by_memory.setdefault(p.memory_key, {})[key_id] = p
        if known is not None and known.wrapped_by != p.wrapped_by:
            self._keys.pop(key_id, None)  # unwrap again under the new wrapping (same material)

    def _apply_shred(self, memory_key: str, epoch: int, at: tuple[int, int] | None = None) -> None:
        self.shredded_epoch[memory_key] = max(epoch, self.shredded_epoch.get(memory_key, -1))
        known = self.shred_at.get(memory_key)
        if at is not None and (known is None or known[0] != at[0] or known[1] < at[1]):
            self.shred_at[memory_key] = at
        for p in self.of_memory(memory_key):
            if p.epoch <= epoch:
                self._forget(p.key_id)
                self.repairs.add(p.key_id)

    def _forget(self, key_id: str) -> None:
        gone = self.live.pop(key_id, None)
        if gone is not None:
            self._unindex(gone)
        self._keys.pop(key_id, None)
        self.shredded_ids.add(key_id)

    def _unindex(self, p: Proposal) -> None:
        mine = self._by_memory.get(p.memory_key, {})
        mine.pop(p.key_id, None)
        if not mine:
            self._by_memory.pop(p.memory_key, None)
