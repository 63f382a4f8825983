"""Resource scope on the real broker (issue 28): one memory per user across their threads.

- Isolation (acceptance 2): three users, two threads each, produced interleaved; no event of
  one user's memory, and no context answer or feed frame `om serve` gives for one user's
  thread, holds another user's message text, thread id (plain or hashed) or observation.
- Two producers (acceptance 5): two threads of one user written at once by two clients give
  the memory `om simulate` makes of the log's order.
- Batching (acceptance 3): with a small `maxTokensPerBatch` and an Observer that takes a fixed
  time per call, one cycle's batch calls run side by side in the model agent (their start and
  end times, as the model agent recorded them on the log, overlap) and their thread sets follow
  the rule (largest threads first up to the threshold, by oldest message, batched greedily).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from datetime import timedelta

import aiohttp
import orjson
import pytest

from omstream.client import OmClient
from omstream.engine.sections import section_bodies, shown_thread_id
from omstream.engine.tokens import count_messages
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.control import StepStarted
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.keys import UnroutedRecord
from omstream.schemas.messages import Message
from omstream.simulation import simulate
from omstream.topics import Topics
from tests.helpers import T0, text_of
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server, read_all
from tests.integration.test_export import substance

pytestmark = pytest.mark.integration

RESOURCES = ("alpha", "beta", "gamma")
ALPHA_TOKEN, ADMIN_TOKEN = "alpha-token-0123456789", "admin-token-0123456789"


def say(resource: str, thread: str, n: int, words: int = 40) -> Message:
    """The n-th message of a run; its text carries its user's mark (`ALPHA-SECRET-…`)."""
    return Message(id=f"{thread}-m{n}", thread_id=thread, resource_id=resource,
                   role="user" if n % 2 == 0 else "assistant",
                   content=f"{resource.upper()}-SECRET-{n} " + text_of(words, n),
                   created_at=T0 + timedelta(seconds=20 * n))


def settled(key: str, last_offset: int):
    """The memory has folded the record at `last_offset` (an event caused by it or a later
    input) and every thread's cycle that started has ended or failed."""
    def check(events) -> bool:
        mine = [e for e in events if e.memory_key == key]
        if not any(e.input_offset is not None and e.input_offset >= last_offset for e in mine):
            return False
        starts = Counter((e.data.cycle_id, e.thread_id) for e in mine if e.type == "data-om-observation-start")
        ends = Counter((e.data.cycle_id, e.thread_id) for e in mine
                       if e.type in ("data-om-observation-end", "data-om-observation-failed"))
        return starts == ends
    return check


async def _get(url: str, token: str, **params: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(url, params=params, headers={"Authorization": f"Bearer {token}"}) as r:
            return r.status, await r.text()


def _frames(body: str) -> list[str]:
    return [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def _foreign(resource: str, threads: dict[str, list[str]], observations: dict[str, str]) -> list[str]:
    """What no output of `resource`'s memory may hold: the other users' marks, thread ids
    (plain and as shown to models) and observation lines."""
    out = []
    for other, their_threads in threads.items():
        if other == resource:
            continue
        out.append(f"{other.upper()}-SECRET")
        out += [t for thread in their_threads for t in (thread, shown_thread_id(thread, True))]
        out += [line.strip() for line in observations.get(other, "").splitlines()
                if len(line.strip()) > 24 and not line.startswith(("<thread", "</thread", "Date:", "---"))]
    return out


def test_resources_never_see_each_other_through_events_contexts_or_feeds(new_env, tmp_path, monkeypatch):
    env = new_env(options=om_options(scope="resource", observation={"messageTokens": 500, "bufferTokens": False}))
    env.start_worker()
    monkeypatch.setenv("OM_API_TOKENS", f"{ALPHA_TOKEN} = alpha; {ADMIN_TOKEN} = *")
    threads = {r: [f"{r}-t1", f"{r}-t2"] for r in RESOURCES}
    topics = Topics(env.settings.namespace)
    turns = 8

    async def scenario():
        last: dict[str, int] = {}
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            # A step that names no resource cannot be routed in resource scope: refused before
            # it is sent, and dead-lettered when a producer writes it anyway.
            with pytest.raises(UnroutedRecord, match="names no resourceId"):
                await client.step_started("alpha-t1", step_number=0)
            await client.send_raw(topics.log, b"resource:alpha-t1",
                                  encode(StepStarted(thread_id="alpha-t1", step_number=0, at=T0)))
            for n in range(turns):  # every thread of every user takes its turn, interleaved
                for resource in RESOURCES:
                    for thread in threads[resource]:
                        sent = say(resource, thread, n)
                        await client.send_message(sent)
                        if sent.role == "user":
                            await client.step_started(thread, step_number=0, resource_id=resource,
                                                      at=sent.created_at, after_message_id=sent.id)
            for resource in RESOURCES:
                step = await client.step_started(threads[resource][0], step_number=1, resource_id=resource,
                                                 at=T0 + timedelta(hours=1))
                last[resource] = step.offset
            for resource in RESOURCES:
                await watcher.wait_for(settled(f"resource:{resource}", last[resource]), timeout=90)
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                contexts, feeds = {}, {}
                for resource in RESOURCES:
                    for thread in threads[resource]:
                        status, body = await _get(f"{server.url}/threads/{thread}/context", ADMIN_TOKEN, wait="0")
                        assert status == 200, body
                        contexts[thread] = orjson.loads(body)
                        status, body = await _get(f"{server.url}/threads/{thread}/events", ADMIN_TOKEN,
                                                  follow="false")
                        assert status == 200, body
                        feeds[thread] = _frames(body)
                # A token bound to alpha reads alpha's threads, and nothing of beta's.
                access = {thread: (await _get(f"{server.url}/threads/{thread}/context", ALPHA_TOKEN, wait="0"))[0]
                          for thread in ("alpha-t1", "alpha-t2", "beta-t1", "gamma-t2")}
                access["feed alpha-t2"] = (await _get(f"{server.url}/threads/alpha-t2/events", ALPHA_TOKEN,
                                                      follow="false"))[0]
                access["feed beta-t1"] = (await _get(f"{server.url}/threads/beta-t1/events", ALPHA_TOKEN,
                                                     follow="false"))[0]
                listed = orjson.loads((await _get(f"{server.url}/threads", ALPHA_TOKEN))[1])
            finally:
                server.stop()
            dead = [orjson.loads(r.value) for r in await read_all(env.settings, topics.dlq, idle=0.3)]
            return watcher.events, contexts, feeds, access, listed, dead

    events, contexts, feeds, access, listed, dead = asyncio.run(scenario())
    assert [d["code"] for d in dead] == ["invalid"] and "names no resourceId" in dead[0]["reason"], dead
    assert access == {"alpha-t1": 200, "alpha-t2": 200, "beta-t1": 403, "gamma-t2": 403,
                      "feed alpha-t2": 200, "feed beta-t1": 403}, access
    assert sorted(t["threadId"] for t in listed["threads"]) == ["alpha-t1", "alpha-t2"]

    observations = {r: contexts[threads[r][0]]["observations"] for r in RESOURCES}
    checked = Counter()
    for event in events:
        resource = event.memory_key.split(":", 1)[1]
        text = encode(event).decode()
        for needle in _foreign(resource, threads, observations):
            assert needle not in text, (event.type, event.memory_key, needle)
        checked["events"] += 1
    for resource in RESOURCES:
        forbidden = _foreign(resource, threads, observations)
        mine = threads[resource]
        for thread in mine:
            context = contexts[thread]
            body = orjson.dumps(context).decode()
            assert all(needle not in body for needle in forbidden), thread
            # The memory is the user's: both threads' sections, the same log in both views.
            assert context["memoryKey"] == f"resource:{resource}"
            assert {i for i, _ in section_bodies(context["observations"])} == {shown_thread_id(t, True) for t in mine}
            assert context["observations"] == observations[resource]
            assert f"{resource.upper()}-SECRET" in body
            checked["contexts"] += 1
            for frame in feeds[thread]:
                assert all(needle not in frame for needle in forbidden), (thread, frame[:200])
                checked["frames"] += 1
            # The thread's feed: its own messages, and its own pair of each shared cycle.
            accepted = [orjson.loads(f)["data"]["message"]["threadId"] for f in feeds[thread]
                        if '"type":"data-om-message-accepted"' in f]
            assert accepted and set(accepted) == {thread}
            ends = [orjson.loads(f)["data"] for f in feeds[thread] if '"type":"data-om-observation-end"' in f]
            assert ends and all(thread in e.get("threadIds", [thread]) for e in ends)
            checked["needles"] += len(forbidden)
    cycles = {e.data.cycle_id for e in events if e.type == "data-om-observation-start" and len(e.data.thread_ids) > 1}
    print(f"isolation: {checked['events']} events, {checked['contexts']} contexts, {checked['frames']} feed frames "
          f"checked against {checked['needles'] // checked['contexts']} foreign marks each; "
          f"{len(cycles)} cycles covered two threads; access {access}")
    assert cycles
