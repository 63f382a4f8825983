"""Extractors through the broker (spec §9): an inline and a structured extractor and the thread
title, with the scripted models; values in the end events, the memory's state and the read
side; `data-om-thread-update` when the title changes and not when it is pinned."""

import asyncio

import pytest

from omstream.client import OmClient
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server, final_states

pytestmark = pytest.mark.integration

OPTIONS = om_options(observation={"messageTokens": 300, "bufferTokens": False, "threadTitle": True, "extract": [
    {"name": "Preferences", "instructions": "What the user likes (bravo, charlie).",
     "onExtracted": "tests.integration.extractor_models:tidy"},
    {"name": "Profile", "instructions": "The user's profile.", "schema": "tests.integration.extractor_models:Profile"},
]})
THREADS = ("free", "pinned")
CYCLES = 2  # 12 messages of ~60 words at messageTokens 300


def test_extractor_values_and_titles_through_the_broker(new_env, tmp_path):
    env = new_env(options=OPTIONS)
    env.start_worker()
    def ends(events, thread):
        return [e for e in events if e.thread_id == thread and e.type == "data-om-observation-end"]

    async def scenario():
        async with EventWatcher(env.settings) as watcher, OmClient(env.settings) as client:
            await client.set_title("pinned", "Pinned by the user", pinned=True, resource_id="u1")
            for i in range(12):
                await client.send_messages([message(i, thread=t) for t in THREADS])
            return await watcher.wait_for(
                lambda es: all(len(ends(es, t)) >= CYCLES for t in THREADS), timeout=120)

    log = asyncio.run(scenario())
    jobs_per_thread = {}
    for thread in THREADS:
        done = ends(log, thread)
        for end in done:
            values = end.data.extracted_values
            assert sorted(values) == ["preferences", "profile", "thread-title"], (thread, values)
            assert not values["preferences"].startswith("["), "onExtracted (imported by the worker) ran"
            assert set(values["profile"]) == {"name", "likes"}
            assert end.data.extraction_failures is None
        jobs_per_thread[thread] = done
    updates = {t: [(e.data.old_title, e.data.new_title) for e in log
                   if e.thread_id == t and e.type == "data-om-thread-update"] for t in THREADS}
    first_title = jobs_per_thread["free"][0].data.extracted_values["thread-title"]
    assert updates["free"] == [(None, first_title)]  # later cycles keep the title they are shown
    assert updates["pinned"] == [(None, "Pinned by the user")]  # the patch itself, never a cycle
    print(f"\ntitles: {updates}; values of the last cycle: {jobs_per_thread['free'][-1].data.extracted_values}")

    states = asyncio.run(final_states(env.settings))
    free = states["thread:free"]
    assert set(free["metadata"]["extracted"]) == {"preferences", "profile"}
    assert free["title"] == first_title and states["thread:pinned"]["title"] == "Pinned by the user"

    server = Server(env.settings, tmp_path / "serve.log")
    try:
        async def read():
            await server.ready()
            return await server.get("/threads/free/context"), await server.get("/threads")
        (status, context), (_, threads) = asyncio.run(read())
    finally:
        server.stop()
    assert status == 200
    assert context["title"] == first_title
    assert context["extractedValues"]["profile"] == free["metadata"]["extracted"]["profile"]
    assert any(m["role"] == "system" and m["content"].startswith("<preferences>") for m in context["chat"])
    assert {t["threadId"]: t["title"] for t in threads["threads"]} == {
        "free": first_title, "pinned": "Pinned by the user"}
