"""Recall over a resource memory on the real broker (issues 28 and 29): the worker writes each
thread's observation groups inside its `<thread id>` section, `om serve`'s context shows them
as `## Group` sections, every range end leads recall to its message from a sibling thread,
threads mode lists the user's threads, and another user's thread is refused."""

import asyncio
import time

import pytest

from omstream.client import OmClient
from omstream.engine.prompting.groups import parse_groups
from omstream.engine.prompting.sections import section_bodies, shown_thread_id
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server

pytestmark = pytest.mark.integration


def _said(i: int, thread: str, resource: str):
    return message(i, thread=thread).model_copy(update={"resource_id": resource})


def test_a_resource_memorys_groups_lead_recall_across_its_threads(new_env, tmp_path):
    env = new_env(options=om_options(scope="resource", observation={"messageTokens": 150, "bufferTokens": False},
                                     retrieval={"scope": "resource"}))
    env.start_worker()
    mine = [_said(i, thread, "u1") for i in range(5) for thread in ("ga", "gb")]
    other = [_said(i, "gc", "u2") for i in range(4)]

    def observed(evs, thread: str) -> bool:
        return any(e.type == "data-om-observation-end" and e.thread_id == thread for e in evs)

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages(mine + other)
            events = await watcher.wait_for(lambda evs: sum(e.type == "om-message-accepted" for e in evs) == 14
                                            and observed(evs, "ga") and observed(evs, "gb"), timeout=60)
            ends = [e for e in events if e.type == "data-om-observation-end" and e.memory_key == "resource:u1"]
            last = await client.send_message(_said(9, "ga", "u1"))
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                context = await client.context("ga", after=last, base_url=server.url)
                followed = []
                started = time.monotonic()
                for end in ends:
                    for group in parse_groups(end.data.observations or ""):
                        part = await client.recall("ga", base_url=server.url, cursor=group.start,
                                                   threadId=end.thread_id, partIndex=0)
                        followed.append((end.thread_id, group, part))
                took = (time.monotonic() - started) / max(len(followed), 1)
                threads = await client.recall("ga", base_url=server.url, mode="threads")
                foreign = await server.get("/threads/ga/recall", threadId="gc")
            finally:
                server.stop()
        return ends, context, followed, threads, foreign, took

    ends, context, followed, threads, foreign, took = asyncio.run(scenario())
    assert {e.thread_id for e in ends} >= {"ga", "gb"}
    assert {t for t, _, _ in followed} >= {"ga", "gb"}, followed
    for thread, group, part in followed:
        assert group.start.startswith(f"{thread}-") and group.end.startswith(f"{thread}-"), group
        assert part["messageId"] == group.start, part
    log = context["observations"]
    shown = {shown_thread_id(t, True) for t in ("ga", "gb")}  # ids obscured: the resource default
    sections = section_bodies(log)
    assert {s for s, _ in sections} == shown and all(parse_groups(body) for _, body in sections), log
    system = "\n".join(m["content"] for m in context["chat"] if m["role"] == "system")
    for group in parse_groups(log):
        assert f"## Group `{group.id}`" in system
    assert "id: ga" in threads["threads"] and "id: gb" in threads["threads"] and "gc" not in threads["threads"]
    assert foreign[0] == 400 and foreign[1]["error"] == "bad-parameter", foreign
    print(f"{len(followed)} groups of 2 threads followed back to their messages, "
          f"{took * 1000:.1f} ms a recall through om serve")
