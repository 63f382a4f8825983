"""The fold agent with a namespace key (`omstream.pipeline.sealed_fold`, issue 31), no broker: the
key ring is a `MemoryRing`, the rest the fakes of `test_fold_loop`.

Sealed inputs fold to the plain fold's outputs, sealed; a refold writes the same bytes; the
state table holds ciphertext only; a shredded input is passed over; a deletion shreds.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from omstream.crypto.errors import Shredded
from omstream.crypto.sealing import Sealer, content_owner
from omstream.limits import Limits
from omstream.pipeline.folding import FoldContext
from omstream.pipeline.memories import StateCache
from omstream.pipeline.sealed_fold import BatchKeys, StateBlobs
from omstream.pipeline.storage import load_state
from omstream.schemas.codec import encode
from omstream.schemas.control import ResourceDeleted, ThreadDeleted
from omstream.settings import Settings
from omstream.versions import WorkerStats
from omstream.worker.fold_loop import FoldLoop
from omstream.worker.table import StateStore
from tests.helpers import T0, engine, message
from tests.unit.crypto.keys import MemoryRing
from tests.unit.worker.test_fold_loop import LOG_MS, TOPICS, Changelog, Files, Sender

WORD = b"[0] "  # a message's text starts with "[<i>] ": plaintext to look for


def context(scope: str = "thread") -> FoldContext:
    config = engine(200, scope=scope)
    return FoldContext(Settings(om=config.om), TOPICS, config, Limits(), b"secret")


def make_loop(tmp_path, name: str, sealer: Sealer | None, scope: str = "thread"):
    journal: list = []
    files = Files(tmp_path / name, journal)
    store = StateStore(Changelog(journal), files)
    kwargs = {} if sealer is None else {"sealer": sealer}
    loop = FoldLoop(context(scope), Sender(journal), store, StateCache(100), lambda m: None,
                    stats=WorkerStats(), busy=set(), **kwargs)
    return SimpleNamespace(loop=loop, store=store, files=files, sent=loop.sender.sent,
                           changelog=store.changelog.records)


@pytest.fixture()
def worlds(tmp_path):
    made: list = []

    def make(name: str, sealer: Sealer | None, scope: str = "thread"):
        made.append(make_loop(tmp_path, name, sealer, scope))
        return made[-1]

    yield make
    for world in made:
        world.files.close()


def sealer() -> Sealer:
    return Sealer(cast(Any, MemoryRing()))


def consumed(offset: int, value: bytes, key: bytes):
    return SimpleNamespace(topic=TOPICS.log, partition=0, offset=offset, key=key, value=value, headers=[],
                           timestamp=LOG_MS / 1000)


async def sealed_inputs(seal: Sealer | None, items: list, memory: str = "thread:t1") -> list:
    """Records as `OmClient` writes them: each message sealed under its content owner."""
    out = []
    for offset, item in enumerate(items):
        value = encode(item)
        if seal is not None:
            owner = content_owner(memory, getattr(item, "thread_id", None),
                                  is_message=getattr(item, "type", "message") == "message")
            value = await seal.seal(value, owner)
        out.append(consumed(offset, value, memory.encode()))
    return out


def opened(seal: Sealer, value: bytes, memory: str = "thread:t1") -> bytes:
    data = orjson.loads(value)
    owner = content_owner(memory, data.get("threadId"), is_message=data.get("type") == "om-message-accepted")
    result = seal.open(value, owner)
    assert result is not None
    return result


def messages(n: int, thread: str = "t1") -> list:
    return [message(i, thread) for i in range(n)]


async def test_sealed_inputs_fold_to_the_plain_outputs_sealed(worlds):
    seal = sealer()
    plain, sealed = worlds("plain", None), worlds("sealed", seal)
    await plain.loop.take(await sealed_inputs(None, messages(8)), 1)
    await sealed.loop.take(await sealed_inputs(seal, messages(8)), 1)
    await plain.loop.wait_stored()
    await sealed.loop.wait_stored()
    assert {r.topic for r in plain.sent} == {TOPICS.events, TOPICS.jobs}  # a job: its messages are content
    assert [(r.topic, r.key) for r in sealed.sent] == [(r.topic, r.key) for r in plain.sent]
    assert [opened(seal, r.value) for r in sealed.sent] == [r.value for r in plain.sent]
    assert all(WORD not in r.value for r in sealed.sent)
    assert any(WORD in r.value for r in plain.sent)
    # The state table: same records, every value ciphertext, and it reads back as the plain one.
    assert [w.key for w in sealed.changelog] == [w.key for w in plain.changelog]
    assert all(WORD not in (w.value or b"") for w in sealed.changelog)
    blobs = StateBlobs(BatchKeys(seal))
    back = load_state(lambda k: blobs.open(k, sealed.store.read(0, k)), lambda p: sealed.store.scan(0, p),
                      b"thread:t1")
    plain_state = load_state(lambda k: plain.store.read(0, k), lambda p: plain.store.scan(0, p), b"thread:t1")
    assert back is not None and plain_state is not None
    assert back.state.model_dump(exclude={"seen"}) == plain_state.state.model_dump(exclude={"seen"})
    assert dict(back.state.seen) == dict(plain_state.state.seen)


async def test_a_refold_writes_the_same_bytes(worlds):
    seal = sealer()
    inputs = await sealed_inputs(seal, messages(8))
    first, again = worlds("first", seal), worlds("again", seal)
    await first.loop.take(inputs, 1)
    await again.loop.take(inputs, 1)
    await first.loop.wait_stored()
    await again.loop.wait_stored()
    assert [r.value for r in first.sent] == [r.value for r in again.sent]
    assert first.changelog == again.changelog


async def test_a_second_batch_reads_the_sealed_state_from_the_store(worlds):
    seal = sealer()
    inputs = await sealed_inputs(seal, messages(6))
    world = worlds("w", seal)
    await world.loop.take(inputs[:3], 1)
    await world.loop.wait_stored()
    await world.loop.take(inputs[3:], 2)  # a new generation: the cache is cleared, the store read
    await world.loop.wait_stored()
    plain = worlds("p", None)
    await plain.loop.take(await sealed_inputs(None, messages(6)), 1)
    assert [opened(seal, r.value) for r in world.sent] == [r.value for r in plain.sent]


async def test_without_a_key_the_outputs_are_the_same_bytes(worlds):
    inputs = await sealed_inputs(None, messages(8))
    default, plain = worlds("default", None), worlds("plain", Sealer(None))
    await default.loop.take(inputs, 1)
    await plain.loop.take(inputs, 1)
    await default.loop.wait_stored()
    await plain.loop.wait_stored()
    assert [r.value for r in default.sent] == [r.value for r in plain.sent]
    assert default.changelog == plain.changelog


async def test_an_input_of_a_shredded_memory_is_passed_over(worlds):
    seal = sealer()
    inputs = await sealed_inputs(seal, messages(2))
    await seal.shred("thread:t1")
    world = worlds("w", seal)
    await world.loop.take(inputs, 1)
    await world.loop.wait_stored()
    assert world.sent == [] and world.loop.passed_over == 2


async def test_a_tampered_input_is_dead_lettered_without_its_text(worlds):
    seal = sealer()
    [one] = await sealed_inputs(seal, messages(1))
    moved = consumed(0, one.value.replace(b'"threadId":"t1"', b'"threadId":"t2"'), b"thread:t2")
    world = worlds("w", seal)
    await world.loop.take([moved], 1)
    [letter] = world.sent
    data = orjson.loads(letter.value)
    assert letter.topic == TOPICS.dlq and data["code"] == "invalid" and "[0]" not in data["reason"]


async def test_a_thread_deletion_shreds_the_memory_and_keeps_its_new_state(worlds):
    seal = sealer()
    inputs = await sealed_inputs(seal, [*messages(3), ThreadDeleted(thread_id="t1", at=T0)])
    world = worlds("w", seal)
    await world.loop.take(inputs[:3], 1)
    await world.loop.wait_stored()
    before = list(world.sent)
    await world.loop.take(inputs[3:], 2)
    await world.loop.wait_stored()
    deleted = world.sent[len(before):]
    assert [orjson.loads(r.value)["type"] for r in deleted] == ["om-memory-deleted"]
    opened(seal, deleted[0].value)  # sealed under the successor: still readable
    with pytest.raises(Shredded):
        opened(seal, before[0].value)  # the deleted messages: gone
    # The state after the deletion survives the shred (its sequence number with it).
    blobs = StateBlobs(BatchKeys(seal))
    back = load_state(lambda k: blobs.open(k, world.store.read(0, k)), lambda p: world.store.scan(0, p),
                      b"thread:t1")
    assert back is not None and back.state.seq > 0 and back.state.pending == ()


async def test_deleting_one_thread_of_a_resource_rolls_the_resource_key(worlds):
    seal = sealer()
    items = [*messages(2, "t1"), *messages(2, "t2"), ThreadDeleted(thread_id="t1", resource_id="u1", at=T0)]
    inputs = await sealed_inputs(seal, items, "resource:u1")
    world = worlds("w", seal, scope="resource")
    await world.loop.take(inputs[:4], 1)
    await world.loop.wait_stored()
    before = list(world.sent)
    await world.loop.take(inputs[4:], 2)
    await world.loop.wait_stored()
    accepted = {orjson.loads(r.value)["threadId"]: r.value for r in before
                if orjson.loads(r.value)["type"] == "om-message-accepted"}
    with pytest.raises(Shredded):
        opened(seal, accepted["t1"], "resource:u1")
    opened(seal, accepted["t2"], "resource:u1")  # the other thread's messages stay
    for r in world.sent[len(before):]:
        opened(seal, r.value, "resource:u1")  # written under the successor of the shredded key
    # The kept state was rewritten under the successor: it reads after the shred, t2 still in it.
    blobs = StateBlobs(BatchKeys(seal))
    back = load_state(lambda k: blobs.open(k, world.store.read(0, k)), lambda p: world.store.scan(0, p),
                      b"resource:u1")
    assert back is not None
    assert {m.thread_id for m in back.state.pending} == {"t2"} and "t2-m0" in back.state.seen
    # A later batch folds on from it.
    later = consumed(5, await seal.seal(encode(message(5, "t2")), content_owner("resource:u1", "t2", is_message=True)),
                     b"resource:u1")
    sent = len(world.sent)
    await world.loop.take([later], 3)
    outputs = world.sent[sent:]
    assert TOPICS.dlq not in {r.topic for r in outputs}
    assert "om-message-accepted" in {orjson.loads(r.value)["type"] for r in outputs}


async def test_deleting_a_resource_shreds_every_thread(worlds):
    seal = sealer()
    items = [*messages(1, "t1"), *messages(1, "t2"), ResourceDeleted(resource_id="u1", at=T0)]
    inputs = await sealed_inputs(seal, items, "resource:u1")
    world = worlds("w", seal, scope="resource")
    await world.loop.take(inputs, 1)
    await world.loop.wait_stored()
    for r in world.sent:
        data = orjson.loads(r.value)
        if data["type"] == "om-message-accepted":
            with pytest.raises(Shredded):
                opened(seal, r.value, "resource:u1")
        else:
            opened(seal, r.value, "resource:u1")  # sealed under the successor of the resource key


def bulk_events(seal: Sealer | None, records: list, shredded: str | None = None):
    """The bulk fold of a settled version (`omstream.replay.bulk_fold`), outputs opened."""
    from dataclasses import replace

    from omstream.replay.bulk_fold import BulkFold, Record
    from omstream.schemas.codec import decode_job
    from tests.helpers import scripted_result

    class Answers:
        async def answer(self, job: bytes):
            return scripted_result(decode_job(job), ms=0)

    config = replace(engine(200), version="v2", settled=True)
    kwargs = {} if seal is None else {"sealer": seal}
    bulk = BulkFold(FoldContext(Settings(), TOPICS, config, Limits(), b"secret"), 0, Answers(), set(), **kwargs)

    async def run() -> None:
        if shredded is not None and seal is not None:
            await seal.shred(shredded)
        for r in records:
            await bulk.feed(Record(TOPICS.log, 0, r.offset, r.key, r.value, [], None))
        await bulk.finish()

    import asyncio

    asyncio.run(run())
    outputs = bulk.take_outputs()
    if seal is not None:
        for r in outputs:
            assert WORD not in r.value, r.value[:400]
        assert all(WORD not in (w.value or b"") for w in bulk.writes())
        outputs = [SimpleNamespace(topic=r.topic, value=opened(seal, r.value)) for r in outputs]
    return [r.value for r in outputs], bulk


def test_the_bulk_fold_opens_and_seals_as_the_live_fold():
    import asyncio

    seal = sealer()
    plain, _ = bulk_events(None, asyncio.run(sealed_inputs(None, messages(8))))
    sealed, _ = bulk_events(seal, asyncio.run(sealed_inputs(seal, messages(8))))
    assert sealed == plain and plain


def test_the_bulk_fold_passes_over_a_shredded_memory():
    import asyncio

    seal = sealer()
    outputs, bulk = bulk_events(seal, asyncio.run(sealed_inputs(seal, messages(4))), shredded="thread:t1")
    assert outputs == [] and bulk.passed_over == 4


async def test_a_sealed_signed_result_is_checked_on_its_sealed_bytes_and_folded(worlds):
    from omstream.pipeline.signing import HEADER, sign
    from omstream.schemas.codec import decode_job
    from tests.helpers import scripted_result

    async def run(seal: Sealer | None, name: str) -> list[bytes]:
        world = worlds(name, seal)
        await world.loop.take(await sealed_inputs(seal, messages(8)), 1)
        [job] = [r.value for r in world.sent if r.topic == TOPICS.jobs]
        if seal is not None:
            job = opened(seal, job)
        value = encode(scripted_result(decode_job(job), ms=0))
        if seal is not None:
            value = await seal.seal(value, "thread:t1")  # as the model agent writes it
        result = SimpleNamespace(topic=TOPICS.log, partition=0, offset=8, key=b"thread:t1", value=value,
                                 headers=[(HEADER, sign(b"secret", value))], timestamp=LOG_MS / 1000)
        before = len(world.sent)
        await world.loop.take([result], 1)
        out = [r.value for r in world.sent[before:]]
        return [opened(seal, v) for v in out] if seal is not None else out

    seal = sealer()
    plain, sealed = await run(None, "plain"), await run(seal, "sealed")
    assert sealed == plain
    assert "data-om-observation-end" in {orjson.loads(v)["type"] for v in plain}


async def test_a_deletion_folded_again_after_its_shred_shreds_nothing_more(worlds):
    """A crash between the shred and the state's store (or a version replaying history): the
    deletion is folded from no state, and must not shred the keys its first fold left current."""
    seal = sealer()
    inputs = await sealed_inputs(seal, [*messages(3), ThreadDeleted(thread_id="t1", at=T0)])
    first = worlds("first", seal)
    await first.loop.take(inputs, 1)
    await first.loop.wait_stored()
    after = await seal.key_of("thread:t1")  # the successor, current now
    again = worlds("again", seal)  # an empty store: what a replay, or the crash, reads
    await again.loop.take(inputs, 1)
    await again.loop.wait_stored()
    assert again.loop.passed_over == 3
    assert (await seal.key_of("thread:t1")).key_id == after.key_id


async def test_a_state_whose_key_was_shredded_starts_again_from_its_sequence_number(worlds):
    """Another version, or a crash between the shred and the store: the stored state reads as
    none (no dead letter), and the memory's new events continue its sequence numbers."""
    seal = sealer()
    world = worlds("w", seal)
    await world.loop.take(await sealed_inputs(seal, messages(3)), 1)
    await world.loop.wait_stored()
    seq = max(orjson.loads(r.value)["seq"] for r in world.sent if r.topic == TOPICS.events)
    core = world.store.read(0, b"thread:t1")
    assert core is not None and core.startswith(b'{"seq":%d,' % seq) and WORD not in core
    await seal.shred("thread:t1")
    sent = len(world.sent)
    later = consumed(3, await seal.seal(encode(message(3)), "thread:t1"), b"thread:t1")
    await world.loop.take([later], 2)  # a new generation: read from the store
    await world.loop.wait_stored()
    outputs = [orjson.loads(opened(seal, r.value)) for r in world.sent[sent:] if r.topic == TOPICS.events]
    assert TOPICS.dlq not in {r.topic for r in world.sent[sent:]}
    assert outputs and min(o["seq"] for o in outputs) == seq + 1
    blobs = StateBlobs(BatchKeys(seal))
    back = load_state(lambda k: blobs.open(k, world.store.read(0, k)), lambda p: world.store.scan(0, p),
                      b"thread:t1")
    assert back is not None and back.state.pending_ids == ("t1-m3",)
