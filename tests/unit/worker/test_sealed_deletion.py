"""A deletion in a sealed namespace under crashes and beside another live version
(`omstream.pipeline.sealed_fold`, `FoldLoop`), no broker: the fakes of `test_fold_loop`, a
`MemoryRing` for the keys topic.

A resource memory with two threads; a batch deletes thread t1.  What must hold: t1's messages
are shredded, and the resource keeps t2 (its messages, its ids), whatever stopped the worker in
the deletion's batch, and whichever version folds the deletion first.

A crash is the loop abandoned while a step of the batch hangs (the changelog's append: the
store; the ring's shred), then a new loop over the same local store taking the batch again, as a
restarted worker is handed the records it had not acked."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson
import pytest

from omstream.crypto.errors import Shredded
from omstream.crypto.sealing import Sealer, content_owner
from omstream.pipeline.memories import StateCache
from omstream.pipeline.sealed_fold import BatchKeys, StateBlobs
from omstream.pipeline.storage import load_state
from omstream.schemas.codec import encode
from omstream.schemas.control import ThreadDeleted
from omstream.versions import WorkerStats
from omstream.worker.fold_loop import FoldLoop
from tests.helpers import T0, message
from tests.unit.crypto.keys import MemoryRing
from tests.unit.worker.test_fold_loop import Sender
from tests.unit.worker.test_sealed_fold import consumed, make_loop, opened, sealed_inputs

MEMORY = "resource:u1"
T1 = content_owner(MEMORY, "t1", is_message=True)


class GatedRing(MemoryRing):
    """A ring whose shreds hang while `gate` is set and not opened (`reached` is set once one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.reached = asyncio.Event()

    async def shred(self, memory_key: str, through: int | None = None, at: tuple[int, int] | None = None) -> None:
        if self.gate is not None:
            self.reached.set()
            await self.gate.wait()
        await super().shred(memory_key, through, at)


def gated_append(changelog) -> asyncio.Event:
    """Make the changelog's appends hang (the store never reaches the broker); the event is set
    once one does."""
    reached, hang = asyncio.Event(), asyncio.Event()
    append = changelog.append

    async def hanging(writes):
        reached.set()
        await hang.wait()
        return await append(writes)

    changelog.append = hanging
    changelog.release = lambda: setattr(changelog, "append", append)
    return reached


@pytest.fixture()
def cleanup():
    worlds: list = []
    yield worlds.append
    for world in worlds:
        world.files.close()


async def history(seal: Sealer) -> list:
    """Two messages of t1 and of t2, then t1's deletion (offset 4)."""
    items = [message(0, "t1"), message(1, "t1"), message(0, "t2"), message(1, "t2"),
             ThreadDeleted(thread_id="t1", resource_id="u1", at=T0)]
    return await sealed_inputs(seal, items, MEMORY)


def kept(seal: Sealer, world) -> Any:
    """The resource's stored state, opened (None: unreadable)."""
    blobs = StateBlobs(BatchKeys(seal))
    loaded = load_state(lambda k: blobs.open(k, world.store.read(0, k)), lambda p: world.store.scan(0, p),
                        MEMORY.encode())
    return None if loaded is None else loaded.state


def assert_deleted_and_kept(seal: Sealer, world, accepted: dict[str, bytes]) -> None:
    with pytest.raises(Shredded):
        opened(seal, accepted["t1"], MEMORY)  # t1's messages: gone
    opened(seal, accepted["t2"], MEMORY)  # t2's: still readable
    state = kept(seal, world)
    assert state is not None, "the resource's state was lost with the deleted thread"
    assert {m.thread_id for m in state.pending} == {"t2"}
    assert {"t2-m0", "t2-m1"} <= set(state.seen)


def restarted(world, seal: Sealer) -> FoldLoop:
    """A new fold loop over `world`'s local store: a restarted worker (its cache empty)."""
    old = world.loop
    return FoldLoop(old.context, Sender([]), world.store, StateCache(100), lambda m: None, stats=WorkerStats(),
                    busy=set(), sealer=seal)


def accepted_by_thread(world) -> dict[str, bytes]:
    return {orjson.loads(r.value)["threadId"]: r.value for r in world.sent
            if orjson.loads(r.value).get("type") == "om-message-accepted"}


@pytest.mark.parametrize("point", ["store", "shred"])
async def test_a_crash_inside_a_deletion_batch_keeps_what_the_memory_keeps(tmp_path, cleanup, point):
    ring = GatedRing()
    seal = Sealer(cast(Any, ring))
    inputs = await history(seal)
    world = make_loop(tmp_path, "w", seal, scope="resource")
    cleanup(world)
    await world.loop.take(inputs[:4], 1)
    await world.loop.wait_stored()
    accepted = accepted_by_thread(world)

    # The deletion's batch hangs at `point`; the worker dies there.
    if point == "store":
        reached = gated_append(world.store.changelog)
    else:
        ring.gate, reached = asyncio.Event(), ring.reached
    taking = asyncio.ensure_future(world.loop.take(inputs[4:], 2))
    await asyncio.wait_for(reached.wait(), timeout=30)  # the batch is at `point` (its store may run behind `take`)
    taking.cancel()
    world.loop.abandon()
    await asyncio.gather(taking, return_exceptions=True)
    if point == "shred":
        from omstream.pipeline.sealed_fold import pending_shreds

        core = world.store.read(0, MEMORY.encode())
        assert core is not None and [s.owner for s in pending_shreds(core)] == [T1, MEMORY]

    # Restarted: the same local store, the unacked deletion read again.
    if point == "store":
        world.store.changelog.release()
    ring.gate = None
    again = restarted(world, seal)
    await again.take(inputs[4:], 3)
    await again.wait_stored()
    assert_deleted_and_kept(seal, world, accepted)
    # Each owner was shredded once, by the deletion at offset 4.
    assert {(o, at) for o, _, at in ring.shreds} == {(T1, (0, 4)), (MEMORY, (0, 4))}
    # A later message of t2 folds on from the kept state.
    later = consumed(5, await seal.seal(encode(message(2, "t2")), content_owner(MEMORY, "t2", is_message=True)),
                     MEMORY.encode())
    sent = len(again.sender.sent)
    await again.take([later], 4)
    await again.wait_stored()
    assert "om-message-accepted" in {orjson.loads(r.value)["type"] for r in again.sender.sent[sent:]}
    assert {m.id for m in kept(seal, world).pending} == {"t2-m0", "t2-m1", "t2-m2"}


async def test_a_second_version_folding_the_deletion_later_shreds_nothing_of_the_first(tmp_path, cleanup):
    """Two live versions of the namespace fold the same log with one key ring.  The second folds
    the deletion after the first has shredded, from the state it holds in memory: it must neither
    roll the keys again nor shred the successor the first one's kept state is sealed under."""
    ring = MemoryRing()
    seal = Sealer(cast(Any, ring))
    inputs = await history(seal)
    first, second = make_loop(tmp_path, "v1", seal, scope="resource"), make_loop(tmp_path, "v2", seal,
                                                                                  scope="resource")
    cleanup(first)
    cleanup(second)
    for world in (first, second):
        await world.loop.take(inputs[:4], 1)
        await world.loop.wait_stored()
    await first.loop.take(inputs[4:], 2)
    await first.loop.wait_stored()
    # The second still holds the memory it folded (the same consumer generation: its cache).
    # One that read it back from its store after the first's shred would find it unreadable,
    # sealed under the shredded key: the keys are the memory's, shared by the versions.
    await second.loop.take(inputs[4:], 1)
    await second.loop.wait_stored()
    for world in (first, second):
        assert_deleted_and_kept(seal, world, accepted_by_thread(first))
    assert kept(seal, first).model_dump() == kept(seal, second).model_dump()
    assert [o for o, _, _ in ring.shreds] == [T1, MEMORY]  # the second version shredded nothing


def test_a_core_owing_many_shreds_names_them_all():
    """A resource deleted whole owes a shred per thread: the header grows past any fixed prefix."""
    from omstream.pipeline.sealed_fold import Shred, pending_shreds

    owed = [Shred(f"thread:{MEMORY}/t{n:03d}", 0, (1, 900)) for n in range(200)] + [Shred(MEMORY, 0, (1, 900))]
    core = b'{"seq":41,"shred":%s,"sealed":"om1d:k:n:c"}' % orjson.dumps([s.as_json() for s in owed])
    assert pending_shreds(core) == owed
    assert pending_shreds(b'{"seq":41,"sealed":"om1d:k:n:c"}') == []
    assert pending_shreds(b'{"seq":41,"shred":[["x", "not an epoch", 1, 2]],"sealed":""}') == []
