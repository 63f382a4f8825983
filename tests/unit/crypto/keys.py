"""Key books filled without a broker: the records a KeyRing would write, applied in order."""

from __future__ import annotations

import os

from omstream.crypto.book import DK, SHRED, KeyBook, Proposal, proposal_value, shred_value
from omstream.crypto.wrapping import NamespaceKeys

OLD = "old-namespace-key-" + "a" * 32
NEW = "new-namespace-key-" + "b" * 32


class Topic:
    """A keys topic in memory: append records, read them into books."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, key: str, value: bytes | None) -> int:
        self.records.append((key.encode(), value))
        return len(self.records) - 1

    def propose(self, keys: NamespaceKeys, memory_key: str, epoch: int = 0, key_id: str | None = None) -> str:
        key_id = key_id or os.urandom(8).hex()
        fingerprint, wrapped = keys.wrap(os.urandom(32), key_id, memory_key, epoch)
        self.append(DK + key_id, proposal_value(Proposal(key_id, memory_key, epoch, -1, fingerprint, wrapped)))
        return key_id

    def shred(self, memory_key: str, epoch: int = 0, at: tuple[int, int] | None = None) -> None:
        self.append(SHRED + memory_key, shred_value(epoch, at))

    def compacted(self) -> list[tuple[int, bytes, bytes | None]]:
        """What compaction leaves (tombstones kept): the latest record of each key, in order."""
        latest = {key: i for i, (key, _) in enumerate(self.records)}
        return [(i, k, v) for i, (k, v) in enumerate(self.records) if latest[k] == i]

    def book(self, keys: NamespaceKeys, *, compact: bool = False) -> KeyBook:
        book = KeyBook(keys)
        rows = self.compacted() if compact else [(i, k, v) for i, (k, v) in enumerate(self.records)]
        for offset, key, value in rows:
            book.apply(key, value, offset)
        return book


class MemoryRing:
    """A `KeyRing` without a broker, for `Sealer`s in unit tests: one in-memory keys topic."""

    def __init__(self, topic: Topic | None = None, keys: NamespaceKeys | None = None) -> None:
        self.topic = topic or Topic()
        self.keys = keys or NamespaceKeys([OLD])
        self.book = self.topic.book(self.keys)
        self.shreds: list[tuple[str, int | None, tuple[int, int] | None]] = []  # every call, as asked

    def _reread(self) -> None:
        self.book = self.topic.book(self.keys)

    def key(self, key_id: str):  # noqa: ANN201 - DataKey
        return self.book.key(key_id)

    async def prime(self, key_id: str) -> None:
        self._reread()

    async def data_key(self, memory_key: str):  # noqa: ANN201 - DataKey
        found = self.book.current(memory_key)
        if found is None:
            self.topic.propose(self.keys, memory_key, self.book.epoch(memory_key))
            self._reread()
            found = self.book.current(memory_key)
        assert found is not None
        return self.book.key(found.key_id)

    async def shred(self, memory_key: str, through: int | None = None, at: tuple[int, int] | None = None) -> None:
        """As `KeyRing.shred`: up to epoch `through` (default: the current one), once."""
        self.shreds.append((memory_key, through, at))
        plan = self.book.shred_plan(memory_key, through)
        if plan is None:
            return
        epoch, key_ids = plan
        for key_id in key_ids:
            self.topic.append(DK + key_id, None)
        self.topic.shred(memory_key, epoch, at)
        self._reread()

    async def successor_key(self, memory_key: str):  # noqa: ANN201 - DataKey
        found = self.book.current(memory_key, 1)
        if found is None:
            self.topic.propose(self.keys, memory_key, self.book.epoch(memory_key) + 1)
            self._reread()
            found = self.book.current(memory_key, 1)
        assert found is not None
        return self.book.key(found.key_id)
