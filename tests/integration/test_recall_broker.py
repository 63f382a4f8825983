"""Recall through `om serve` on the real broker (spec §12): the worker writes observation groups,
the read side pages the messages behind a group's range, lists the resource's threads, refuses
bad parameters as JSON, and shows nothing of a deleted thread, in a projection rebuilt from the
events after the deletion."""

import asyncio
import re
import time
from datetime import timedelta

import pytest

from omstream.client import OmClient
from omstream.engine.prompting.groups import parse_groups
from omstream.projections.recall import RecallError
from omstream.schemas.control import ThreadDeleted
from tests.helpers import T0, message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server

pytestmark = pytest.mark.integration


def _user(i: int, thread: str, resource: str):
    return message(i, thread=thread).model_copy(update={"resource_id": resource})


def test_recall_pages_behind_a_group_lists_threads_and_forgets_a_deleted_one(new_env, tmp_path):
    env = new_env(options=om_options(observation={"messageTokens": 150, "bufferTokens": False},
                                     retrieval={"scope": "resource"}))
    env.start_worker()
    a = [_user(i, "ra", "u1") for i in range(6)]
    b = [_user(i, "rb", "u1") for i in range(3)]
    c = [_user(i, "rc", "u2") for i in range(3)]

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages(a + b + c)
            events = await watcher.wait_for(lambda evs: sum(e.type == "om-message-accepted" for e in evs) == 12
                                            and any(e.type == "data-om-observation-end" and e.thread_id == "ra"
                                                    for e in evs))
            group = parse_groups(next(e.data.observations for e in events
                                      if e.type == "data-om-observation-end" and e.thread_id == "ra"))[0]
            await client.send_control(ThreadDeleted(thread_id="rb", at=T0 + timedelta(hours=1)))
            await watcher.wait_for(lambda evs: any(e.type == "om-memory-deleted" and e.thread_id == "rb" for e in evs))
            last = await client.send_message(_user(9, "ra", "u1"))
            # A projection made after the deletion: rebuilt from the events alone.
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                started = time.monotonic()
                page = await client.recall("ra", after=last, base_url=server.url, cursor=group.start, limit=3)
                took = time.monotonic() - started
                back = await client.recall("ra", base_url=server.url, cursor=group.end, page=-1, limit=2)
                threads = (await server.get("/threads/ra/recall", mode="threads"))[1]
                to_deleted = await server.get("/threads/ra/recall", threadId="rb")
                foreign = await server.get("/threads/ra/recall", cursor="rc-m1", threadId="rc")
                bad = await server.get("/threads/ra/recall", page="99")
                not_object = await server.post("/threads/ra/recall", b"[1]")
                unknown = await server.get("/threads/rb/recall")
                with pytest.raises(RecallError, match="does not belong"):
                    await client.recall("ra", base_url=server.url, threadId="rb")
            finally:
                server.stop()
        return group, page, back, threads, to_deleted, foreign, bad, not_object, unknown, took

    group, page, back, threads, to_deleted, foreign, bad, not_object, unknown, took = asyncio.run(scenario())
    assert group.start == "ra-m0" and re.fullmatch(r"[0-9a-f]{16}", group.id), group
    shown = re.findall(r"\*\* \[([^\]]+)\]:", page["messages"])
    assert shown == ["ra-m1", "ra-m2", "ra-m3"] and page["hasNextPage"] is True and page["count"] == 3, page
    end = next(m for m in a if m.id == group.end)
    before = [m.id for m in a if m.created_at < end.created_at][-2:]
    assert re.findall(r"\*\* \[([^\]]+)\]:", back["messages"]) == before and back["hasNextPage"] is False, back
    assert "id: ra" in threads["threads"] and "rb" not in threads["threads"] and "rc" not in threads["threads"]
    assert to_deleted[0] == 400 and to_deleted[1]["error"] == "bad-parameter", to_deleted
    assert foreign[0] == 400 and "rc-" not in str(foreign[1]["detail"]).replace("rc-m1", ""), foreign
    assert bad == (400, bad[1]) and bad[1]["error"] == "bad-parameter" and bad[1]["detail"].startswith("page"), bad
    assert not_object[0] == 400 and not_object[1]["error"] == "bad-parameter", not_object
    assert unknown[0] == 404 and unknown[1]["error"] == "unknown-thread", unknown
    print(f"group {group.id} range {group.range}; recall after the write answered in {took * 1000:.0f} ms")


FACTS = ["My dog Biscuit loves chasing seagulls at the beach", "I work as a nurse on the night shift at St Mary's",
         "My sister Anna is getting married in Lisbon next June", "I am allergic to peanuts and shellfish"]


@pytest.mark.parametrize("scope", ["thread", "resource"])
def test_search_through_om_serve_finds_the_group_that_holds_a_fact(new_env, tmp_path, scope):
    """`retrieval.vector`: `om serve` keeps the index (the default local embedder) and recall's
    `search` mode answers from the groups the worker wrote.  Thread scope: another thread finds
    nothing of this thread's; resource scope: the user's other thread finds it (as memory from
    another thread), another user's thread nothing."""
    env = new_env(options=om_options(observation={"messageTokens": 25, "bufferTokens": False}, scope=scope,
                                     retrieval={"scope": scope, "vector": True}))
    env.start_worker()
    said = [message(i, thread="s1").model_copy(update={"role": "user", "content": fact})
            for i, fact in enumerate(FACTS)]
    sibling = message(0, thread="s2").model_copy(update={"role": "user", "content": "The weather is mild today"})
    stranger = _user(0, "s3", "u2").model_copy(update={"role": "user", "content": "I like tea"})

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages([*said, sibling, stranger])
            events = await watcher.wait_for(lambda evs: sum(e.type == "data-om-observation-end"
                                                            and e.thread_id == "s1" for e in evs) >= 2,
                                            timeout=90)
            groups = [g for e in events if e.type == "data-om-observation-end" and e.thread_id == "s1"
                      for g in parse_groups(e.data.observations)]
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                asked = time.monotonic()
                found = None
                while time.monotonic() - asked < 60:  # the index is its own consumer: wait for it
                    found = await client.recall("s1", base_url=server.url, mode="search",
                                                query="what is the name of my pet?")
                    if found["count"]:
                        break
                    await asyncio.sleep(0.2)
                took = time.monotonic() - asked
                from_sibling = await client.recall("s2", base_url=server.url, mode="search", query="dog Biscuit")
                from_stranger = await client.recall("s3", base_url=server.url, mode="search", query="dog Biscuit")
            finally:
                server.stop()
        return groups, found, from_sibling, from_stranger, took

    groups, found, from_sibling, from_stranger, took = asyncio.run(scenario())
    holding = next(g for g in groups if "Biscuit" in g.content)
    assert found is not None and found["count"] >= 1, found
    first = found["results"].split("### ")[1]
    assert holding.id in first and "Biscuit" in first, found["results"]
    if scope == "resource":
        assert "Older memory from another thread" in from_sibling["results"] and "Biscuit" in from_sibling["results"]
    else:
        assert "Biscuit" not in str(from_sibling["results"]), from_sibling
    assert "Biscuit" not in str(from_stranger["results"]), from_stranger
    print(f"{scope} scope: {len(groups)} groups; the one holding the fact ranked first, found {took:.1f} s "
          f"after om serve was ready")
