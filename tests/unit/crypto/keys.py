"""Key books filled without a broker: the records a KeyRing would write, applied in order."""

from __future__ import annotations

import os

from omstream.crypto.book import DK, SHRED, KeyBook, Proposal, proposal_value
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

    def shred(self, memory_key: str, epoch: int = 0) -> None:
        self.append(SHRED + memory_key, b'{"v":1,"epoch":%d}' % epoch)

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
