"""`recall` modes threads and search, scopes, parameters, and deletion (spec §12)."""

import pytest

from omstream.projections.feed import ProjectionFeed
from omstream.projections.recall import SEARCH_NOT_CONFIGURED, RecallError, parse_params
from omstream.projections.store.store import ReadModelStore
from omstream.schemas.codec import encode
from omstream.schemas.control import ThreadDeleted
from omstream.settings import Settings
from tests.unit.projections.recall_helpers import T0, ask, msg, project, source_of


def three_threads():
    """u1 has t1 (created 09:00, updated 09:02) and t2 (10:00-10:30); u2 has t3."""
    messages = [msg("t1", n, f"t1 says {n}") for n in range(3)]
    messages += [msg("t2", n, f"t2 says {n}", minutes=60 + 10 * n) for n in range(4)]
    messages += [msg("t3", n, f"t3 says {n}", resource="u2", minutes=120 + n) for n in range(2)]
    return project(messages)


async def test_threads_lists_the_resource_newest_first_with_current_marked():
    source = source_of(three_threads()[0])
    answer = await ask(source, "t1", mode="threads")
    assert (answer["count"], answer["page"], answer["hasMore"]) == (2, 0, False)
    lines = answer["threads"].split("\n")
    assert lines == ["- **(untitled)**", "  id: t2", "  updated: 2025-03-03 10:30:00Z | created: 2025-03-03 10:00:00Z",
                     "- **(untitled)** ← current", "  id: t1",
                     "  updated: 2025-03-03 09:02:00Z | created: 2025-03-03 09:00:00Z"]
    assert "t3" not in answer["threads"]  # another resource's


async def test_threads_before_after_and_paging():
    source = source_of(three_threads()[0])
    before = await ask(source, "t1", mode="threads", before="2025-03-03T09:30:00Z")
    assert before["count"] == 1 and "id: t1" in before["threads"]
    after = await ask(source, "t1", mode="threads", after="2025-03-03T09:30:00Z")
    assert after["count"] == 1 and "id: t2" in after["threads"]
    assert (await ask(source, "t1", mode="threads", after="2025-03-04"))["threads"] == "No threads found matching the criteria."
    first = await ask(source, "t1", mode="threads", limit=1)
    assert first["count"] == 1 and first["hasMore"] is True and "id: t2" in first["threads"]
    second = await ask(source, "t1", mode="threads", limit=1, page=1)
    assert second["page"] == 1 and second["hasMore"] is False and "id: t1" in second["threads"]


async def test_threads_show_the_title():
    projection, _ = three_threads()
    projection.threads["t2"].title = "Trip to Lisbon"
    answer = await ask(source_of(projection), "t1", mode="threads")
    assert answer["threads"].startswith("- **Trip to Lisbon**\n  id: t2")


async def test_thread_scope_lists_only_the_current_thread():
    source = source_of(three_threads()[0])
    answer = await ask(source, "t1", scope="thread", mode="threads")
    assert answer["count"] == 1 and answer["hasMore"] is False and "id: t2" not in answer["threads"]
    assert answer["threads"].startswith("- **(untitled)** ← current\n  id: t1")
    assert (await ask(source, "t1", mode="threads", threadId="current"))["count"] == 1


async def test_resource_scope_reads_another_thread_of_the_resource_only():
    source = source_of(three_threads()[0])
    other = await ask(source, "t1", threadId="t2")
    assert "[t2-m000]" in other["messages"] and "threadId wasn't passed" not in other["messages"]
    with pytest.raises(RecallError, match="does not belong to the active resource"):
        await ask(source, "t1", threadId="t3")
    with pytest.raises(RecallError, match="Could not resolve cursor"):
        await ask(source, "t1", cursor="t3-m000", threadId="t2")
    moved = await ask(source, "t1", cursor="t2-m001")
    assert moved["count"] == 0 and 'Pass threadId="t2"' in moved["messages"]
    followed = await ask(source, "t1", cursor="t2-m001", threadId="t2")
    assert "[t2-m002]" in followed["messages"]


async def test_thread_scope_never_sees_another_thread():
    source = source_of(three_threads()[0])
    with pytest.raises(RecallError, match="limited to the current thread"):
        await ask(source, "t1", scope="thread", threadId="t2")
    with pytest.raises(RecallError, match="Could not resolve cursor"):
        await ask(source, "t1", scope="thread", cursor="t2-m001")
    answer = await ask(source, "t1", scope="thread")
    assert "threadId wasn't passed" not in answer["messages"] and "t2-" not in answer["messages"]


# --- search -------------------------------------------------------------------------------------
class FakeSearch:
    def __init__(self):
        self.calls = []

    async def search(self, *, memory_key, thread_id, resource_id, query, top_k):
        self.calls.append((memory_key, thread_id, resource_id, query, top_k))
        return {"results": "### Current thread memory", "count": 1}


async def test_search_without_a_port_says_it_is_not_configured():
    source = source_of(three_threads()[0])
    assert await ask(source, "t1", mode="search", query="dog") == {"results": SEARCH_NOT_CONFIGURED, "count": 0}
    assert SEARCH_NOT_CONFIGURED.startswith("Search is not configured")


async def test_search_asks_the_port_within_the_scope():
    source, port = source_of(three_threads()[0]), FakeSearch()
    assert await ask(source, "t1", mode="search", query="dog", search=port) == {"results": "### Current thread memory",
                                                                               "count": 1}
    await ask(source, "t1", scope="thread", mode="search", query="cat", limit=50, search=port)
    await ask(source, "t1", resource=None, mode="search", query="owl", search=port)
    assert port.calls == [("thread:t1", "t1", "u1", "dog", 10), ("thread:t1", "t1", None, "cat", 20),
                          ("thread:t1", "t1", None, "owl", 10)]
    with pytest.raises(RecallError, match="query is required"):
        await ask(source, "t1", mode="search", search=port)


# --- parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "names"), [
    ({"page": 51}, "page"), ({"page": -51}, "page"), ({"limit": 0}, "limit"), ({"detail": "medium"}, "detail"),
    ({"mode": "all"}, "mode"), ({"anchor": "middle"}, "anchor"), ({"partType": "video"}, "partType"),
    ({"partIndex": -1}, "partIndex"), ({"charOffset": -5}, "charOffset"), ({"before": "last week"}, "before"),
    ({"cursor": ""}, "cursor"), ({"colour": "red"}, "colour"),
])
def test_a_bad_parameter_is_refused_naming_it(raw, names):
    with pytest.raises(RecallError, match=f"^{names}"):
        parse_params(raw)


def test_query_string_values_are_read_as_numbers():
    params = parse_params({"page": "-2", "limit": "5", "partIndex": "1", "charOffset": "10"})
    assert (params.page, params.limit, params.part_index, params.char_offset) == (-2, 5, 1, 10)


# --- deletion -----------------------------------------------------------------------------------
async def test_after_thread_deleted_recall_returns_nothing_of_it_also_after_a_rebuild(tmp_path):
    messages = [msg("t1", n, f"keep {n}") for n in range(3)] + [msg("t2", n, f"secret {n}", minutes=30 + n)
                                                                 for n in range(3)]
    projection, events = project(messages, extra=[("t2", ThreadDeleted(thread_id="t2", at=T0.replace(hour=12)))])
    assert any(e.type == "om-memory-deleted" for e in events)

    async def nothing_of_t2(source):
        listed = await ask(source, "t1", mode="threads")
        assert "t2" not in listed["threads"] and listed["count"] == 1
        with pytest.raises(RecallError):
            await ask(source, "t1", threadId="t2")
        with pytest.raises(RecallError):
            await ask(source, "t1", cursor="t2-m001", threadId="t2")
        with pytest.raises(RecallError):
            await ask(source, "t1", cursor="t2-m001")
        assert source.messages("t2") == [] and source.thread("t2") is None
        assert "secret" not in (await ask(source, "t1", limit=20))["messages"]

    await nothing_of_t2(source_of(projection))
    # The read model rebuilt from the events (a store, then read back), as `om serve` restarts.
    records = [(offset, encode(e.model_copy(update={"input_offset": offset, "input_last": True})), None)
               for offset, e in enumerate(events)]
    feed = ProjectionFeed(Settings(), store=ReadModelStore(tmp_path / "rm.sqlite"))
    feed._load("t.events/1", {0: 10**9})
    feed._apply_batch({0: records})
    feed.store.close()
    back = ProjectionFeed(Settings(), store=ReadModelStore(tmp_path / "rm.sqlite"))
    back._load("t.events/1", {0: 10**9})
    await nothing_of_t2(source_of(back.projection))
    assert [m.id for m in source_of(back.projection).messages("t1")] == ["t1-m000", "t1-m001", "t1-m002"]
    back.store.close()
    # Folded again from nothing (no store), the same.
    rebuilt, _ = project([])
    for event in events:
        rebuilt.apply_event(event)
    await nothing_of_t2(source_of(rebuilt))
