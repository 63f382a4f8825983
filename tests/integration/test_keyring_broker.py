"""The key ring on the real broker: two rings create a memory's key at once and agree; a shred
reaches the other ring; the topic's compaction removes the shredded wrapped keys within the
stated window (read back from the beginning, printed in seconds); a namespace key rotates.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import orjson
import pytest

from omstream.crypto import KeyRing, NamespaceKeyError, Shredded, decrypt_fields, encrypt_fields
from omstream.crypto.book import DK
from omstream.crypto.wrapping import NamespaceKeys
from omstream.settings import Settings
from omstream.topics import Topics, ensure_topics, read_until_end
from tests.helpers import until

pytestmark = pytest.mark.integration

OLD = "old-namespace-key-" + "a" * 32
NEW = "new-namespace-key-" + "b" * 32
WINDOW_MS = 3000  # shred_window_ms of this namespace (production default: 60 s)
CLEANER_BACKOFF_S = 15  # the broker's log.cleaner.backoff.ms (Kafka's default, as infra/ runs it)


async def new_ring(settings: Settings, *texts: str) -> KeyRing:
    ring = KeyRing(settings.bootstrap, Topics.of(settings).keys, NamespaceKeys(list(texts) or [OLD]),
                   roll_after_ms=settings.shred_window_ms)
    await ring.start()
    return ring


async def wrapped_records(settings: Settings, key_ids: set[str]) -> list[int]:
    """Offsets of records of `<ns>.keys` that still carry one of the wrapped keys (not tombstones)."""
    return [r.offset async for r in read_until_end(settings.bootstrap, Topics.of(settings).keys, [0])
            if r.key.decode().removeprefix(DK) in key_ids and r.value is not None]


async def proposals_of(settings: Settings) -> dict[str, str]:
    """key id -> memory key of every proposal written to `<ns>.keys` so far."""
    return {r.key.decode().removeprefix(DK): orjson.loads(r.value)["memoryKey"]
            async for r in read_until_end(settings.bootstrap, Topics.of(settings).keys, [0])
            if r.key.startswith(DK.encode()) and r.value is not None}


async def test_two_rings_agree_shred_everywhere_and_compaction_forgets(broker):
    settings = replace(Settings(), namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
                       partitions=1, shred_window_ms=WINDOW_MS)
    await ensure_topics(settings)
    a, b = await new_ring(settings), await new_ring(settings)
    try:
        # Step 1: both create the first key of the same memories at once.
        memories = [f"thread:t{i}" for i in range(6)]
        pairs = [await asyncio.gather(a.data_key(m), b.data_key(m)) for m in memories]
        assert all(ka.key_id == kb.key_id and ka.material == kb.material for ka, kb in pairs)
        proposals = await proposals_of(settings)
        winners = {ka.key_id for ka, _ in pairs}
        print(f"\n{len(memories)} memories created by two rings at once: {len(proposals)} proposals written, "
              f"one key each agreed")
        # Step 2: what one ring seals, the other opens.
        secret, gone = {"type": "message", "content": "locker 4711"}, memories[0]
        sealed = encrypt_fields(secret, await a.data_key(gone))
        assert decrypt_fields(sealed, gone, b) == secret
        kept = encrypt_fields({"type": "message", "content": "kept"}, await a.data_key(memories[1]))
        # Step 3: a shreds; b reports Shredded as soon as it has read the marker.  Every wrapped
        # key of `gone` and every losing proposal (tombstoned by its creator) must then vanish.
        gone_ids = {k for k, m in proposals.items() if m == gone}
        vanish = gone_ids | (set(proposals) - winners)
        shredded_at = time.monotonic()
        await a.shred(gone)

        def b_reports_shredded() -> bool:
            try:
                decrypt_fields(sealed, gone, b)
            except Shredded:
                return True
            return False

        await until(b_reports_shredded, timeout=10)
        print(f"shred seen by the other ring after {time.monotonic() - shredded_at:.2f} s")
        assert decrypt_fields(kept, memories[1], b)["content"] == "kept"
        # Step 4: the wrapped keys leave the topic: read it from the beginning until no record
        # of them but tombstones remains (a ring ticks after segment.ms, the cleaner compacts).
        deadline = shredded_at + WINDOW_MS / 1000 + CLEANER_BACKOFF_S + 30
        while remaining := await wrapped_records(settings, vanish):
            assert time.monotonic() < deadline, f"still readable at offsets {remaining}"
            await asyncio.sleep(0.5)
        took = time.monotonic() - shredded_at
        print(f"shredded wrapped keys compacted out of {Topics.of(settings).keys} after {took:.1f} s "
              f"(window {WINDOW_MS / 1000:.0f} s + cleaner backoff {CLEANER_BACKOFF_S} s)")
        assert len(await wrapped_records(settings, winners - gone_ids)) == len(memories) - 1  # the others' stay
        # Step 5: a ring started now agrees: gone is Shredded, the memory used again has a new key.
        c = await new_ring(settings)
        try:
            with pytest.raises(Shredded):
                decrypt_fields(sealed, gone, c)
            with pytest.raises(Shredded):
                await c.resolve(next(iter(gone_ids)))
            assert decrypt_fields(kept, memories[1], c)["content"] == "kept"
            reborn = await c.data_key(gone)
            assert reborn.key_id not in gone_ids and c.book.epoch(gone) == 1
        finally:
            await c.stop()
    finally:
        await a.stop()
        await b.stop()


async def test_namespace_key_rotation_without_downtime(broker):
    settings = replace(Settings(), namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
                       partitions=1, shred_window_ms=WINDOW_MS)
    await ensure_topics(settings)
    old = await new_ring(settings, OLD)
    sealed = {m: encrypt_fields({"type": "message", "content": m}, await old.data_key(m))
              for m in ("thread:r1", "thread:r2", "resource:u1")}
    await old.stop()
    # Step 1: every process accepts both; step 2: NEW wraps and the stale wrappings are rewritten.
    accepting = await new_ring(settings, OLD, NEW)
    rotating = await new_ring(settings, NEW, OLD)
    try:
        assert await rotating.rewrap() == 3
        await accepting.catch_up()
        for m, record in sealed.items():
            assert decrypt_fields(record, m, accepting)["content"] == m  # served throughout
        assert await rotating.rewrap() == 0
    finally:
        await accepting.stop()
        await rotating.stop()
    # Step 3: OLD dropped: a process with NEW alone reads every key; one with OLD alone cannot.
    fresh = await new_ring(settings, NEW)
    stale = await new_ring(settings, OLD)
    try:
        for m, record in sealed.items():
            assert decrypt_fields(record, m, fresh)["content"] == m
            with pytest.raises(NamespaceKeyError):
                decrypt_fields(record, m, stale)
        assert orjson.loads(orjson.dumps(sealed))  # the records themselves never changed
    finally:
        await fresh.stop()
        await stale.stop()


async def test_a_resource_keeps_what_it_sealed_with_its_successor_key(broker):
    """A thread deleted inside a resource memory: the kept observations are sealed under the
    next epoch's key, then the current epoch is shredded; every ring then opens only the kept."""
    settings = replace(Settings(), namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
                       partitions=1, shred_window_ms=WINDOW_MS)
    await ensure_topics(settings)
    a, b = await new_ring(settings), await new_ring(settings)
    try:
        memory = "resource:u1"
        before = encrypt_fields({"type": "om-memory-deleted", "data": {"observations": "t1 and t2"}},
                                await a.data_key(memory))
        successor = await a.successor_key(memory)
        assert (await b.successor_key(memory)).key_id == successor.key_id
        kept = encrypt_fields({"type": "om-memory-deleted", "data": {"observations": "t2 only"}}, successor)
        await a.shred(memory)
        await b.catch_up()
        for ring in (a, b):
            with pytest.raises(Shredded):
                decrypt_fields(before, memory, ring)
            assert decrypt_fields(kept, memory, ring)["data"]["observations"] == "t2 only"
            assert (await ring.data_key(memory)).key_id == successor.key_id
    finally:
        await a.stop()
        await b.stop()
