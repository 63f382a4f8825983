"""The search index on the real broker: fed by `<ns>.events` alone, kept in the data directory,
read on from its stored position after a restart, a deleted memory gone (and still gone when
another embedder's index is rebuilt from the topic's beginning)."""

import asyncio

import pytest

from omstream import kafka
from omstream.projections.search.embedding.hashed import HashEmbedder
from omstream.projections.search.feed import SearchService, start_search
from omstream.schemas.codec import encode
from omstream.topics import Topics
from tests.unit.projections.search.events import Memory, group, group_id
from tests.unit.projections.search.seeded import seeded
from tests.unit.projections.search.test_index import ids_in

pytestmark = pytest.mark.integration


async def produce(settings, events) -> None:
    producer = kafka.producer(settings)
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(Topics.of(settings).events, encode(event), key=event.memory_key.encode())
    finally:
        await producer.stop()


async def caught_up(service: SearchService, records: int, timeout: float = 60) -> None:
    """Wait for the evidence: the index's committed positions cover `records` records."""
    feed = asyncio.create_task(service.feed.run())
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while sum(service.index.positions().values()) < records:
            assert asyncio.get_running_loop().time() < deadline, service.index.positions()
            if feed.done():
                feed.result()
            await asyncio.sleep(0.02)
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)


async def found(service, memory_key, thread_id, query) -> list[str]:
    result = await service.search.search(memory_key=memory_key, thread_id=thread_id, resource_id="u1",
                                         query=query, top_k=5)
    return ids_in(result["results"])


def test_index_follows_the_events_restarts_where_it_stopped_and_deletions_stay(new_env):
    asyncio.run(scenario(new_env().settings))


async def scenario(settings) -> None:
    events, questions, ids = seeded("thread:seeded", "seeded")
    other = Memory("thread:other", "other")
    other_events = [other.message(0, "I keep bees on my allotment"),
                    other.observed(group(group_id("other", "bees"), "other-m0", "other-m0",
                                         ["* 🔴 User keeps bees on an allotment"]))]
    await produce(settings, events)

    service = await start_search(settings)  # the default embedder, as `om serve` would
    applied: list[int] = []
    service.feed.listeners.append(lambda batch: applied.append(sum(map(len, batch.values()))))
    await caught_up(service, len(events))
    assert service.index.count("thread:seeded") == 60
    assert ids["pet"] in await found(service, "thread:seeded", "seeded", "What did we name the shelter animal?")
    await service.close()

    # Deleted while the server is down; another memory goes on.
    seeded_memory = Memory("thread:seeded", "seeded")
    seeded_memory.seq = len(events)
    await produce(settings, [seeded_memory.deleted(), *other_events])
    service = await start_search(settings)
    applied.clear()
    service.feed.listeners.append(lambda batch: applied.append(sum(map(len, batch.values()))))
    await caught_up(service, len(events) + 3)
    print(f"after the restart the index read {sum(applied)} records (3 new, {len(events)} before)")
    assert sum(applied) == 3  # read on from the stored position, not from the beginning
    assert service.index.count("thread:seeded") == 0 and await found(service, "thread:seeded", "seeded", "dog") == []
    assert await found(service, "thread:other", "other", "bees") == [group_id("other", "bees")]
    await service.close()

    # Another embedder: another index, rebuilt from the topic's beginning, the deletion replayed.
    rebuilt = await start_search(settings, HashEmbedder(64))
    assert rebuilt.index.path != service.index.path and rebuilt.index.count() == 0
    await caught_up(rebuilt, len(events) + 3)
    assert rebuilt.index.count("thread:seeded") == 0 and rebuilt.index.count("thread:other") == 1
    await rebuilt.close()
