"""The fold agent: the one input log in, events, jobs, dead letters and memory states out.

The fold agent only moves bytes.  It reads the one input log, `<ns>.log` (messages, agent-loop
markers, commands and the model agents' results, in the order the fold applies them), in
batches (`Intake.batches`: what was fetched, up to `batch_max`, at most `memory_batch_max` of
one memory, a memory holding more inputs than that in batches of its own after the others', see
`omstream.worker.backlog`), and for each batch it:

1. **fold**: folds each record, in log order, from the memory's state (`omstream.pipeline.folding`:
   the input limits, decoding, the skip of what the state already folded, `fold`, and the size
   of every output and state record);
2. **send**: sends every event, job and dead letter of the batch and waits until the broker has
   them;
3. **store**: writes the records of each touched memory's state that changed
   (`omstream.pipeline.storage`), with the last offset folded, to the table's changelog, waits until the
   broker has them, and only then to the local RocksDB (`omstream.worker.table.StateStore`);
4. **ack**: acks the batch's records (their offsets may be committed).

With a namespace key (`sealer`), the batch's keys are loaded before step 1 (the fold opens its
inputs and seals its outputs and states with them, `omstream.pipeline.sealed_fold`), and the
memories the batch deleted are shredded after step 3, once their `om-memory-deleted` events are
in `<ns>.events` and the states they keep are stored under their successor keys (before step 4:
a crash in between reads the deletion again, and the stored core names the shreds it still owes,
which are done before the next fold).  A batch that shreds is stored, shredded and acked before
the next batch resolves its keys.

Steps 3 and 4 run while the next batch goes through steps 1 and 2: that batch folds the
memories from what step 3 is storing (`Memories(unsaved=...)`), and from a cache of the
memories last stored (`StateCache`) instead of reading them back.  Stores stay in batch order:
a batch's store starts when the previous one has finished.

Step 2 before step 3 is what makes a crash harmless: a state is never stored ahead of its
outputs, and outputs sent twice carry the same deterministic ids, so consumers drop the copy.
A record is acked, so its offset may be committed, only once its batch's states are stored,
so every record below the committed position has its state (with its offset) in the changelog,
which is what a restart (or another worker) restores from.  Records after the committed
position are redelivered; the ones the stored state covers are skipped, the rest are refolded
from that state, giving the same outputs with the same ids.  Effectively once, not Kafka
transactions: see docs/reliability.md.

The model agents answer every job (`omstream.worker.model_agent`): an unreadable job that still
names its cycle, a run that raises and a run past `job_deadline_ms` all write a failed result,
signed like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Callable, Sequence
from functools import partial
from typing import Any, Protocol

from ..crypto.sealing import PLAIN, Sealer
from ..engine.step import HookCall
from ..models.hooks import Hooks
from ..pipeline.folding import MAX_OUTPUT_BYTES, Consumed, FoldContext, fold_batch
from ..pipeline.memories import Memories, StateCache, StateWrite
from ..pipeline.sealed_fold import (
    BatchKeys,
    Shred,
    StateBlobs,
    batch_keys,
    pending_shreds,
    resource_threads,
    unwrapped,
)
from ..pipeline.sending import OutputRecord, Sender, until_done
from ..pipeline.storage import Loaded
from ..versions import WorkerStats

__all__ = ["FoldLoop", "StateTable"]

log = logging.getLogger("omstream.worker")


class StateTable(Protocol):
    """The state table as the fold agent uses it (`omstream.worker.table.StateStore`)."""

    def read(self, partition: int, key: bytes) -> bytes | None: ...

    def scan(self, partition: int, prefix: bytes) -> list[bytes]: ...

    async def write(self, writes: Sequence[StateWrite]) -> None:
        """Store `writes`: the changelog first, then the local copy."""
        ...


#: Acks a record: its offset may be committed once every record before it is acked too.
Ack = Callable[[Consumed], object]


class FoldLoop:
    """The fold agent's batches: fold, send, store, ack (see the module docstring).

    One loop for all partitions, not one per partition: Faust stops a partition's actor when
    the partition is revoked, batch in flight or not.  `stats` gets each stored memory's size
    and generation; `busy` (the intake's) the keys of the memories holding more inputs behind
    their cycles than a batch takes of one memory (`omstream.worker.backlog.lanes`).
    """

    def __init__(self, context: FoldContext, sender: Sender, table: StateTable, cache: StateCache, ack: Ack,
                 *, stats: WorkerStats, busy: set[Any], sealer: Sealer = PLAIN, hooks: Hooks | None = None) -> None:
        self.context, self.sender, self.table, self.cache = context, sender, table, cache
        self._ack, self.stats, self.busy, self.sealer = ack, stats, busy, sealer
        self.hooks = hooks  # the lifecycle hooks (§13), called once a batch's outputs are sent
        self.passed_over = 0  # inputs of shredded memories passed over
        self._generation: int | None = None  # the consumer generation `cache` and `_unsaved` belong to
        self._storing: asyncio.Future[None] | None = None  # the previous batch's store and ack
        self._unsaved: dict[bytes, Loaded] = {}  # the memories it is storing, as they will be stored
        self._taking = asyncio.Lock()  # held while a batch is folded and sent

    async def run(self, batches: AsyncIterable[Sequence[Consumed]], generation: Callable[[], int]) -> None:
        """Take every batch; `generation()` is the consumer's generation (it changes with every
        rebalance).  A batch still being stored when the loop ends stays unacked: its records
        are read again."""
        try:
            async for batch in batches:
                async with self._taking:
                    await self.take(batch, generation())
        finally:
            self.abandon()

    async def settle(self) -> None:
        """Return once the batch being taken (if any) is folded, sent, stored and acked.  The
        caller makes sure no other batch starts meanwhile (a rebalance stops the flow)."""
        async with self._taking:
            pass
        await self.wait_stored()

    async def take(self, batch: Sequence[Consumed], generation: int) -> None:
        """Fold and send one batch, and start storing it (after the previous batch's store).

        Never raises: a bad record becomes a dead letter, not a restart."""
        started = time.perf_counter()
        if generation != self._generation:
            # A rebalance: partitions may have moved and come back, and the recovery may have
            # rewritten the store.  Read memories from the store again, once the previous batch
            # is in it.
            await self.wait_stored()
            self.cache.clear()
            self._unsaved, self._generation = {}, generation
        blobs = StateBlobs(BatchKeys(self.sealer)) if self.sealer.enabled else None
        memories = Memories(self.table.read, self.table.scan, MAX_OUTPUT_BYTES, self.cache, self._unsaved, blobs)
        keys = await self.keys_of(batch, memories)
        if blobs is not None:
            blobs.keys = keys
        calls: list[HookCall] = []
        records = self.fold(batch, memories, keys, calls)
        folded = time.perf_counter()
        await self.send(records)
        await self.call_hooks(calls)
        sent = time.perf_counter()
        writes, self._unsaved = memories.writes(), memories.stored()
        # The next batch is folded and sent (from `_unsaved`) while this one is stored; the
        # stores themselves stay in batch order.
        await self.wait_stored()
        self._storing = asyncio.ensure_future(self._store_and_ack(batch, writes, self._unsaved, keys))
        if keys.shreds:
            await self.wait_stored()  # the next batch's keys are resolved after the shreds
        self._note(self._unsaved)
        log.debug("batch", extra={"records": len(batch), "outputs": len(records), "writes": len(writes),
                                  "passedOver": keys.passed_over, "shredded": len(keys.shreds),
                                  "foldMs": round((folded - started) * 1000, 1),
                                  "sendMs": round((sent - folded) * 1000, 1),
                                  "waitMs": round((time.perf_counter() - sent) * 1000, 1)})

    def fold(self, batch: Sequence[Consumed], memories: Memories, keys: BatchKeys | None = None,
             hooks: list[HookCall] | None = None) -> list[OutputRecord]:
        """Step 1: the batch's outputs; the new states stay in `memories`, the hook calls go
        to `hooks`.

        Inline, not in a thread: measured, a thread made each batch's fold several times slower
        (it fights the event loop for the GIL), and `batch_max` bounds the stall."""
        records = fold_batch(self.context, batch, memories, keys, hooks)
        if keys is not None:
            self.passed_over += keys.passed_over
        return records

    async def keys_of(self, batch: Sequence[Consumed], memories: Memories) -> BatchKeys:
        """Before step 1: the data keys the batch opens and seals with (retried: the key ring
        may be catching up with a restarting broker), after the shreds the stored cores owe."""
        found: list[BatchKeys] = []

        def threads_of(memory: str, partition: int) -> set[str]:
            return resource_threads(memories.get(memory.encode(), partition))

        async def load() -> None:
            if self.sealer.ring is not None:
                key_ids, owed = self._stored_keys(batch)
                for shred in owed:
                    if not self.sealer.shredded_by(shred.owner, shred.at):
                        await self.sealer.shred(shred.owner, shred.epoch, shred.at)
                for key_id in sorted(key_ids):
                    await self.sealer.ring.prime(key_id)
            found.append(await batch_keys(self.sealer, batch, threads_of))

        await until_done("load a batch's data keys", load)
        return found[-1]

    def _stored_keys(self, batch: Sequence[Consumed]) -> tuple[set[str], list[Shred]]:
        """The keys that sealed the stored core record of each memory of the batch, loaded
        first (one written by another worker a moment ago, before a rebalance) so that the
        fold's synchronous reads find them, and the shreds those cores still owe (a crash
        came between a deletion's store and its shred)."""
        ids: set[str] = set()
        owed: list[Shred] = []
        for partition, key in sorted({(m.partition, m.key or b"") for m in batch}):
            raw = self.table.read(partition, key) if key else None
            if raw is not None:
                owed += pending_shreds(raw)
                try:
                    ids |= self.sealer.blob_key_ids(unwrapped(raw))
                except ValueError:
                    continue  # damaged: the fold reports it (`state-unreadable`)
        return ids, owed

    async def call_hooks(self, calls: Sequence[HookCall]) -> None:
        """After step 2: the lifecycle hooks of the cycles the batch started and ended, in
        order (`hookExecution = 'await'` holds the batch until each returns).  A batch folded
        again after a crash calls them again: hooks are at least once."""
        if self.hooks:
            for call in calls:
                await self.hooks.call(call.name, call.payload, background=call.background)

    async def shred(self, keys: BatchKeys) -> None:
        """After step 3: forget what the batch deleted (each owner's successor key, which the
        batch sealed what the memory keeps with, becomes current)."""
        for owner in keys.shreds:
            shred = keys.deletions[owner]
            await until_done("shred a deleted memory's key",
                             partial(self.sealer.shred, owner, shred.epoch, shred.at))

    async def send(self, records: Sequence[OutputRecord]) -> None:
        """Step 2: the batch's outputs, until the broker has every one."""
        await until_done("send a batch's outputs", lambda: self.sender.send_all(records))

    async def store(self, writes: Sequence[StateWrite], stored: dict[bytes, Loaded]) -> None:
        """Step 3: the batch's state records, changelog then local store; retried until done,
        never raised, since the batch's records are acked only after it."""
        await until_done("store a batch's states", lambda: self.table.write(writes))
        self.cache.keep(stored)  # after a rebalance, `take` clears it before its next fold

    def ack(self, batch: Sequence[Consumed]) -> None:
        """Step 4: the batch's records may be committed."""
        for message in batch:
            self._ack(message)

    async def _store_and_ack(self, batch: Sequence[Consumed], writes: Sequence[StateWrite],
                             stored: dict[bytes, Loaded], keys: BatchKeys) -> None:
        await self.store(writes, stored)
        await self.shred(keys)
        self.ack(batch)

    async def wait_stored(self) -> None:
        """Return once the last batch taken is stored and acked."""
        if self._storing is not None:
            await self._storing

    def abandon(self) -> None:
        """Stop a store in flight: its records stay unacked, so they are read again."""
        if self._storing is not None and not self._storing.done():
            self._storing.cancel()

    def _note(self, stored: dict[bytes, Loaded]) -> None:
        for key, loaded in stored.items():
            self.stats.memories[key.decode()] = [loaded.state.observation_tokens, loaded.state.generation]
            # Busy: a long queue of inputs behind its cycles (`backlog.lanes`).
            if len(loaded.state.held) > self.context.settings.memory_batch_max:
                self.busy.add(key)
            else:
                self.busy.discard(key)
