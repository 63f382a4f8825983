"""The search index kept from events, with the hash embedder: deterministic ids, idempotent
re-application, deletion that stays deleted (also after a rebuild), isolation between memories
and threads, and the §12 rendering."""

import re

import pytest

from omstream.projections.search.embedding.hashed import HashEmbedder
from omstream.projections.search.index import IndexProjection
from omstream.projections.search.search import NO_MATCH, ObservationSearch
from omstream.projections.search.sqlite_vec import SqliteVecIndex, open_index
from tests.unit.projections.search.events import Memory, group, group_id


def fresh(path=":memory:", embedder=None):
    embedder = embedder or HashEmbedder(64)
    index = SqliteVecIndex(path, embedder.name, embedder.dim)
    return index, IndexProjection(index, embedder), ObservationSearch(index, embedder)


def conversation(memory: Memory, facts: dict[str, str]) -> list:
    """A message and one observed group per fact."""
    events = []
    for i, (name, fact) in enumerate(facts.items()):
        events.append(memory.message(i, fact))
        events.append(memory.observed(group(group_id(memory.memory_key, name), f"{memory.thread_id}-m{i}",
                                            f"{memory.thread_id}-m{i}", [f"* 🔴 {fact}"])))
    return events


FACTS = {"dog": "User's dog is named Biscuit", "car": "User drives a red Volvo estate",
         "job": "User works as a pharmacist in Leeds"}


def ids_in(results: str) -> list[str]:
    return re.findall(r"- observation group: (\w+)", results)


async def test_every_group_is_indexed_under_its_deterministic_id_and_found():
    index, projection, search = fresh()
    memory = Memory("thread:t1", "t1")
    events = conversation(memory, FACTS)
    assert await projection.apply(events) == 3
    assert index.count("thread:t1") == 3
    found = await search.search(memory_key="thread:t1", thread_id="t1", resource_id="u1",
                                query="what is the dog called Biscuit", top_k=1)
    assert found["count"] == 1 and ids_in(found["results"]) == [group_id("thread:t1", "dog")]
    # Re-sent events (same seqs) and a replay into another index give the same entries.
    assert await projection.apply(events) == 0
    other, replayed, _ = fresh()
    await replayed.apply(events)
    ids = "SELECT id FROM memory_observations_64 ORDER BY id"
    assert list(index._db.execute(ids)) == list(other._db.execute(ids))


async def test_activation_and_reflection_groups_are_indexed_and_older_ones_stay():
    index, projection, search = fresh()
    memory = Memory("thread:t1", "t1")
    await projection.apply([memory.activated(group("a" * 16, "t1-m1", "t1-m3", ["* 🔴 User is allergic to peanuts"]))])
    await projection.apply([memory.observed(group("b" * 16, "t1-m1", "t1-m9", ["* 🔴 condensed: peanut allergy"],
                                                  kind="reflection"), operation="reflection")])
    assert index.count() == 2
    found = await search.search(memory_key="thread:t1", thread_id="t1", resource_id="u1", query="peanuts", top_k=5)
    assert sorted(ids_in(found["results"])) == ["a" * 16, "b" * 16]


async def test_a_deleted_memory_is_gone_and_never_comes_back():
    index, projection, search = fresh()
    memory = Memory("thread:t1", "t1")
    before = conversation(memory, FACTS)
    deletion = memory.deleted()
    after = conversation(memory, {"new": "User moved to Lisbon"})
    await projection.apply(before)
    await projection.apply([deletion])
    assert index.count("thread:t1") == 0
    assert index.thread("t1") is None
    # The old events again (a re-sent batch): duplicates, nothing comes back.
    await projection.apply(before)
    assert index.count("thread:t1") == 0
    found = await search.search(memory_key="thread:t1", thread_id="t1", resource_id="u1", query="dog Biscuit", top_k=5)
    assert found == {"results": NO_MATCH, "count": 0}
    # What the thread says after its deletion is a new memory, indexed.
    await projection.apply(after)
    assert index.count("thread:t1") == 1
    # A rebuild replays everything in order, the deletion included.
    rebuilt, projection2, search2 = fresh()
    await projection2.apply(before + [deletion] + after)
    found = await search2.search(memory_key="thread:t1", thread_id="t1", resource_id="u1", query="dog", top_k=20)
    assert ids_in(found["results"]) == [group_id("thread:t1", "new")]


async def test_a_search_never_returns_another_memorys_groups():
    index, projection, search = fresh()
    a, b = Memory("thread:thread-A", "thread-A", "ua"), Memory("thread:thread-B", "thread-B", "ub")
    await projection.apply(conversation(a, FACTS) + conversation(b, FACTS))
    for memory, other in ((a, b), (b, a)):
        found = await search.search(memory_key=memory.memory_key, thread_id=memory.thread_id,
                                    resource_id=memory.resource_id, query="dog Biscuit Volvo pharmacist", top_k=20)
        assert sorted(ids_in(found["results"])) == sorted(group_id(memory.memory_key, n) for n in FACTS)
        assert other.thread_id not in found["results"]
    await projection.apply([a.deleted()])
    assert index.count(a.memory_key) == 0 and index.count(b.memory_key) == 3


async def test_resource_memory_shows_other_threads_and_a_thread_scoped_search_only_its_own():
    index, projection, search = fresh()
    r1 = Memory("resource:u1", "t1")
    events = [r1.message(0, "hello", thread_id="t1"), r1.message(1, "hi", thread_id="t2"), r1.titled("Trip planning"),
              r1.observed(group("1" * 16, "t1-m0", "t1-m0", ["* 🔴 User's dog is named Biscuit"]), thread_id="t1"),
              r1.observed(group("2" * 16, "t2-m1", "t2-m1", ["* 🔴 User's dog Biscuit hates rain"]), thread_id="t2")]
    await projection.apply(events)
    found = await search.search(memory_key="resource:u1", thread_id="t1", resource_id="u1", query="dog Biscuit", top_k=10)
    text = found["results"]
    assert found["count"] == 2
    assert "### Current thread memory\n\nThis result came from the current thread.\n- thread: t1 (Trip planning)" in text
    assert ("### Older memory from another thread\n\nThis result came from an older memory generation in another "
            "thread.\n- thread: t2 ((untitled))")  # as the original writes it in text
    assert "- source: raw messages from ID t2-m1 through ID t2-m1" in text
    assert "- thread updated: 2025-03-03 09:01:00Z" in text
    assert re.search(r"- score: \d\.\d\d\n\n```text\n\* 🔴 User's dog Biscuit hates rain\n```", text)
    scoped = await search.search(memory_key="resource:u1", thread_id="t1", resource_id=None, query="dog", top_k=10)
    assert ids_in(scoped["results"]) == ["1" * 16]


async def test_results_are_the_best_group_once_top_k_clamped_and_cut_to_2000_tokens():
    index, projection, search = fresh()
    memory = Memory("thread:t1", "t1")
    long_lines = [f"* 🟡 the user talked about gardening tomatoes number {i} " + "word " * 40 for i in range(60)]
    events = [memory.observed(group(f"{i:016x}", "a", "b", long_lines)) for i in range(30)]
    await projection.apply(events)
    assert index.count() == 30 * len(__import__("omstream.projections.search.groups", fromlist=["chunks"]).chunks(
        "\n".join(long_lines)))
    found = await search.search(memory_key="thread:t1", thread_id="t1", resource_id="u1",
                                query="gardening tomatoes", top_k=50)
    assert found["count"] == 20  # topK at most 20
    ids = ids_in(found["results"])
    assert len(ids) == len(set(ids))  # each group once, however many of its chunks matched
    from omstream.engine.rules.tokens import TokenxCounter
    assert TokenxCounter().count(found["results"]) <= 2000
    assert "[truncated" in found["results"]


async def test_the_index_is_kept_on_disk_per_embedder(tmp_path):
    embedder = HashEmbedder(32)
    index = open_index(tmp_path, embedder.name, embedder.dim)
    projection = IndexProjection(index, embedder)
    memory = Memory("thread:t1", "t1")
    await projection.apply(conversation(memory, FACTS), {0: 7})
    index.close()
    again = open_index(tmp_path, embedder.name, embedder.dim)
    assert again.count() == 3 and again.positions() == {0: 7}
    assert again.memory("thread:t1").last_seq == memory.seq
    # Another embedder is another index, empty: it is rebuilt from the events.
    other = open_index(tmp_path, "hash/16", 16)
    assert other.path.parent != again.path.parent and other.count() == 0 and other.positions() == {}
    # The same name opened with another dimension is emptied rather than searched wrongly.
    again.close()
    resized = open_index(tmp_path, embedder.name, 48)
    assert resized.count() == 0 and resized.positions() == {}


def test_index_and_embedder_must_agree():
    with pytest.raises(ValueError):
        IndexProjection(SqliteVecIndex(":memory:", "hash/8", 8), HashEmbedder(16))


async def test_the_store_deletes_one_thread_of_a_memory():
    index, projection, search = fresh()
    r1 = Memory("resource:u1", "t1")
    await projection.apply([r1.observed(group("1" * 16, "a", "b", ["* dog"]), thread_id="t1"),
                            r1.observed(group("2" * 16, "c", "d", ["* dog"]), thread_id="t2")])
    with index.transaction():
        index.delete_thread("resource:u1", "t2")
    found = await search.search(memory_key="resource:u1", thread_id="t1", resource_id="u1", query="dog", top_k=5)
    assert ids_in(found["results"]) == ["1" * 16]


async def test_deleting_one_thread_of_a_resource_memory_removes_its_groups_only():
    r1 = Memory("resource:u1", "t1")
    kept = group("1" * 16, "t1-m0", "t1-m1", ["* 🔴 User's dog is named Biscuit"])
    events = [r1.message(0, "my dog is Biscuit", thread_id="t1"), r1.message(0, "my cat is Tom", thread_id="t2"),
              r1.observed(kept, thread_id="t1"),
              r1.observed(group("2" * 16, "t2-m0", "t2-m1", ["* 🔴 User's cat is named Tom"]), thread_id="t2"),
              r1.deleted(thread_id="t2", keeps=kept)]
    for projection_events in (events[:-1], events[-1:]), (events, []):  # applied in two batches, or rebuilt at once
        index, projection, search = fresh()
        for batch in projection_events:
            await projection.apply(batch)
        found = await search.search(memory_key="resource:u1", thread_id="t1", resource_id="u1", query="pet",
                                    top_k=5)
        assert ids_in(found["results"]) == ["1" * 16], found
        assert index.thread("t2") is None and index.thread("t1") is not None
        assert index.count("resource:u1") == 1


@pytest.mark.parametrize("obscure", [False, True])
async def test_a_resource_reflections_groups_belong_to_the_threads_of_their_sections(tmp_path, obscure):
    """A reflection of a resource memory is one event (of one thread) rewriting every thread's
    section: each section's group is indexed under the section's thread (named by id, or by its
    xxhash32), so deleting a thread takes its reflected group and leaves the other's, also when
    the index was reopened between the messages and the reflection."""
    from omstream.engine.prompting.sections import shown_thread_id, wrap_section

    r1 = Memory("resource:u1", "t1")
    shown = {t: shown_thread_id(t, obscure) for t in ("t1", "t2")}
    reflected = "\n\n".join([
        group("a" * 16, "t1-m0", "t2-m0", ["* 🔴 User has pets"], kind="reflection"),
        wrap_section(shown["t1"], group("1" * 16, "t1-m0", "t1-m0", ["* 🔴 User's dog is named Biscuit"],
                                        kind="reflection")),
        wrap_section(shown["t2"], group("2" * 16, "t2-m0", "t2-m0", ["* 🔴 User's cat is named Tom"],
                                        kind="reflection"))])
    messages = [r1.message(0, "my dog is Biscuit", thread_id="t1"), r1.message(0, "my cat is Tom", thread_id="t2")]
    keeps = reflected.split("\n\n<thread")[0] + "\n\n<thread" + reflected.split("\n\n<thread")[1]
    later = [r1.observed(reflected, thread_id="t1", operation="reflection"), r1.deleted(thread_id="t2", keeps=keeps)]
    embedder = HashEmbedder(64)
    first = SqliteVecIndex(tmp_path / "index.db", embedder.name, embedder.dim)
    await IndexProjection(first, embedder).apply(messages)
    first.close()
    index = SqliteVecIndex(tmp_path / "index.db", embedder.name, embedder.dim)  # a restart: nothing cached
    projection, search = IndexProjection(index, embedder), ObservationSearch(index, embedder)
    await projection.apply(later[:1])
    t2_only = await search.search(memory_key="resource:u1", thread_id="t2", resource_id=None, query="cat", top_k=5)
    assert ids_in(t2_only["results"]) == ["2" * 16], t2_only
    await projection.apply(later[1:])
    found = await search.search(memory_key="resource:u1", thread_id="t1", resource_id="u1", query="pet", top_k=5)
    assert sorted(ids_in(found["results"])) == ["1" * 16, "a" * 16], found
