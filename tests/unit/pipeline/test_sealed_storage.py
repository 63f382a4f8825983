"""The stored layout of a memory with a namespace key (`Memories(..., blobs=StateBlobs)`), no broker:
the tables of `tests.unit.pipeline.test_storage`, their records sealed, the key ring a `MemoryRing`.

Folding a cached memory, or a batch while the previous one is still being stored, writes the
same records as reading the store every batch, also across a deletion, whether the deletion
shreds the memory's key (its records are written again under the successor) or not (a replay).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from hypothesis import example, given, settings
from hypothesis import strategies as st

from omstream.crypto.sealing import Sealer
from omstream.engine.fold import fold, new_state
from omstream.pipeline.memories import Memories, StateCache
from omstream.pipeline.sealed_fold import BatchKeys, Shred, StateBlobs
from omstream.pipeline.storage import load_state
from omstream.schemas.control import ThreadDeleted
from tests.helpers import engine, message
from tests.unit.crypto.keys import MemoryRing
from tests.unit.pipeline.test_storage import KEY, LIMIT, Table, comparable, run

OWNER = KEY.decode()


class SealedTable(Table):
    """A `Table` whose batches seal what they write with their own key ring.  `shredding`: a
    batch that deletes the memory rolls its key and shreds it, as `FoldLoop` does."""

    def __init__(self, cache: StateCache | None = None, *, lagging: bool = False, shredding: bool) -> None:
        super().__init__(cache, lagging=lagging)
        self.sealer, self.shredding = Sealer(cast(Any, MemoryRing())), shredding
        self.blobs = StateBlobs(BatchKeys(self.sealer))
        self.batches = 0

    def batch(self, inputs, config) -> list:
        deleting = self.shredding and any(isinstance(item, ThreadDeleted) for item in inputs)
        ring = cast(Any, self.sealer.ring)
        successors = {OWNER: asyncio.run(ring.successor_key(OWNER))} if deleting else {}
        self.batches += 1
        deletions = {OWNER: Shred(OWNER, self.sealer.epoch(OWNER), (0, self.batches))} if deleting else {}
        keys = BatchKeys(self.sealer, {OWNER: asyncio.run(self.sealer.key_of(OWNER))}, successors,
                         shredding=self.shredding, deletions=deletions)
        self.blobs.keys = keys
        memories = Memories(self.read, self.scan, LIMIT, self.cache, self.unsaved, self.blobs)
        state = memories.get(KEY, 0) or new_state(OWNER, "t1", "u1")
        jobs = []
        for item in inputs:
            out = fold(state, item, config)
            memories.check(KEY, state, out.state)
            if deleting and isinstance(item, ThreadDeleted):
                keys.roll([OWNER])
            state = out.state
            jobs += out.jobs
        memories.put(KEY, state)
        self.store(memories)
        for owner in keys.shreds:  # shredded once the state is stored, as `FoldLoop` does
            shred = keys.deletions[owner]
            asyncio.run(self.sealer.shred(owner, shred.epoch, shred.at))
        return jobs

    def opened(self) -> dict[bytes, bytes | None]:
        """Every record, opened (None: sealed under a shredded key)."""
        return {k: self.blobs.open(k, v) for k, v in self.records.items()}

    def state(self):
        loaded = load_state(lambda k: self.blobs.open(k, self.records.get(k)), lambda p: self.scan(0, p), KEY)
        assert loaded is not None
        return loaded.state


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(20, 60), st.booleans(), st.booleans())
# The thread deleted, then a message it had accepted before (t1-m3) accepted again in the same
# batch: without shredding, the write that started the memory again deleted that id's record.
@example(batch_sizes=[1, 9, 12], count=20, buffering=False, shredding=False)
# With shredding: a batch folded while the deleting batch's predecessor was still being stored
# left that batch's records behind, under the shredded key.
@example(batch_sizes=[1, 9, 12], count=20, buffering=False, shredding=True)
def test_sealed_the_cache_of_written_memories_changes_nothing_that_is_stored(batch_sizes, count, buffering,
                                                                            shredding):
    config = engine(400, observation={"bufferTokens": 120 if buffering else False},
                    reflection={"observationTokens": 500})
    inputs = [message(i, words=25) for i in range(count)] + [message(3, words=25)]  # 3: a duplicate
    inputs.insert(count // 2, ThreadDeleted(thread_id="t1", resource_id="u1", at=message(count // 2).created_at))
    plain = SealedTable(shredding=shredding)
    cached = SealedTable(StateCache(4), shredding=shredding)
    lagging = SealedTable(StateCache(0), lagging=True, shredding=shredding)
    for table in (plain, cached, lagging):
        pure = run(table, config, inputs, batch_sizes)
    lagging.flush()
    # Each table has its own keys: the records compare opened.
    assert cached.opened() == plain.opened() and lagging.opened() == plain.opened()
    assert None not in plain.opened().values()  # nothing left under a shredded key
    assert comparable(cached.state()) == comparable(plain.state()) == comparable(lagging.state()) == comparable(pure)
