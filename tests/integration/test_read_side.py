"""The read side on the real broker: it shows only what the fold emitted, a deletion is durable,
and an agent reads its own writes (architecture §3, §5, §9).

Both tests read through `om serve` started as its own process, so the projection is the one an
agent would query, rebuilt from `<ns>.events` alone.
"""

import asyncio
from datetime import timedelta

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.codec import encode
from omstream.schemas.control import ThreadDeleted
from omstream.topics import Topics
from tests.helpers import T0, message
from tests.integration.support import EventWatcher, Server, events, read_all

pytestmark = pytest.mark.integration


def _ids(snapshot: dict) -> set[str]:
    """Every message id a context answer shows: raw, in the chat, or covered by observations."""
    raw = {m["id"] for m in snapshot["messages"]}
    return raw | set(snapshot["observedMessageIds"])


def test_deleted_and_dead_lettered_messages_never_reach_a_context(new_env, tmp_path):
    env = new_env(100_000)
    env.start_worker()
    topics = Topics(env.settings.namespace)
    gone = [message(i, thread="gone") for i in range(4)]
    kept = [message(i, thread="kept") for i in range(3)]
    # Valid messages of `kept` the worker must refuse: keyed by another memory, and one whose
    # role is not a role (invalid).  Both would have reached the agent when the read side read
    # the raw log.
    stray = message(7, thread="kept").model_copy(update={"content": "STRAY wrong key"})
    invalid = {**message(8, thread="kept").wire(), "role": "robot", "content": "STRAY invalid"}

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages(gone + kept[:2])
            await client.send_raw(topics.log, b"thread:someone-else", encode(stray))
            await client.send_raw(topics.log, b"thread:kept", orjson.dumps(invalid))
            await client.send_control(ThreadDeleted(thread_id="gone", at=T0 + timedelta(minutes=5)))
            last = await client.send_message(kept[2])
            await watcher.wait_for(lambda evs: any(e.type == "om-memory-deleted" for e in evs)
                                   and sum(e.type == "om-message-accepted" for e in evs) == 7)
            # A fresh projection (`om serve` from nothing) replays the events in order.
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                listed = (await server.get("/threads"))[1]
                gone_ctx = await server.get("/threads/gone/context", wait=0)
                kept_ctx = (await server.get("/threads/kept/context", after=last, wait=10))[1]
                # The thread starts over after its deletion: only the new message is there.
                again = await client.send_message(message(9, thread="gone"))
                restarted = (await server.get("/threads/gone/context", after=again, wait=10))[1]
            finally:
                server.stop()
        dead = [orjson.loads(r.value) for r in await read_all(env.settings, topics.dlq, idle=0.5)]
        return listed, gone_ctx, kept_ctx, restarted, dead

    listed, gone_ctx, kept_ctx, restarted, dead = asyncio.run(scenario())
    assert sorted(t["threadId"] for t in listed["threads"]) == ["kept"], listed
    assert gone_ctx[0] == 404
    assert kept_ctx["stale"] is False
    assert _ids(kept_ctx) == {m.id for m in kept}
    assert "STRAY" not in orjson.dumps(kept_ctx).decode()
    assert restarted["stale"] is False and _ids(restarted) == {"gone-m9"}
    assert not {m.id for m in gone} & _ids(restarted)
    assert sorted(d["code"] for d in dead) == ["invalid", "wrong-key"], dead


def test_an_agent_reads_every_observation_its_step_triggered(new_env, tmp_path):
    """Synchronous observation (`bufferTokens = false`) with a small threshold: right after each
    step, with no pause, the agent asks for its context `after` the step's position, and must
    see every cycle that step started, as the events log shows it afterwards."""
    env = new_env(message_tokens=400)
    env.start_worker()
    conversation = [message(i, thread="loop", words=70) for i in range(24)]
    reads: list[tuple[object, dict]] = []  # (step position, context right after it)

    async def agent_loop():
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            async with OmClient(env.settings) as client:
                for user, reply in zip(conversation[::2], conversation[1::2]):
                    await client.send_message(user)
                    step = await client.step_started("loop", step_number=0, at=user.created_at,
                                                     after_message_id=user.id)
                    reads.append((step, await client.context("loop", after=step, wait=60,
                                                             base_url=server.url)))
                    await client.send_message(reply)
                    await client.turn_ended("loop", at=reply.created_at, after_message_id=reply.id)
        finally:
            server.stop()
        return await events(env.settings)

    log = asyncio.run(agent_loop())
    ends = {e.data.cycle_id: e for e in log if e.type == "data-om-observation-end"}
    triggered = 0
    for step, context in reads:
        assert context is not None and context["stale"] is False, context
        started = [e for e in log if e.type == "data-om-observation-start" and e.input_offset == step.offset]
        for start in started:
            end = ends[start.data.cycle_id]
            assert set(end.data.observed_message_ids) <= set(context["observedMessageIds"]), (step, context)
            assert end.data.observations and end.data.observations.strip().splitlines()[-1] in context["observations"]
            triggered += 1
        # and the window shows nothing the step's cycles covered as raw
        assert not {m["id"] for m in context["messages"]} & set(context["observedMessageIds"])
    assert triggered >= 3, (triggered, env.logs())


def test_a_reader_after_a_held_message_is_told_it_is_held(new_env, tmp_path):
    """A message that arrives while a blocking observation runs (a slow model: 5 s) is held
    until the cycle ends.  A reader `after` its position is answered at once, told that the
    memory holds it (and behind which cycle), not left waiting; once the cycle ends the message
    is in the window and nothing is held."""
    from tests.integration.options import om_options

    env = new_env(options=om_options(observation={"messageTokens": 300, "bufferTokens": False,
                                                  "modelSettings": {"latencyMs": 5000}}))
    env.start_worker()
    conversation = [message(i, thread="held", words=70) for i in range(6)]

    async def scenario():
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
                for m in conversation[:-1]:
                    await client.send_message(m)
                await watcher.wait_for(lambda evs: any(e.type == "data-om-observation-start" for e in evs))
                position = await client.send_message(conversation[-1])
                early = await client.context("held", after=position, wait=1, base_url=server.url)
                _, listed = await server.get("/threads")
                later = await client.context("held", after=position, wait=60, base_url=server.url)
        finally:
            server.stop()
        return early, listed, later, await events(env.settings)

    early, listed, later, log = asyncio.run(scenario())
    starts = [e.data.cycle_id for e in log if e.type == "data-om-observation-start"]
    [held] = [e for e in log if e.type == "om-input-held" and e.data.message_id == conversation[-1].id]
    assert held.data.cycle_id in starts and held.data.input_type == "message"
    assert early["stale"] is False and early["blocked"] is True, early
    assert early["held"] == {"count": held.data.held, "cycleId": held.data.cycle_id, "since": early["held"]["since"]}
    assert conversation[-1].id not in {m["id"] for m in early["messages"]}
    [row] = listed["threads"]  # the threads' list says it too
    assert row["blocked"] is True and row["held"] >= 1, row
    assert later["held"] is None, later
    assert conversation[-1].id in {m["id"] for m in later["messages"]} | set(later["observedMessageIds"])
    [released] = [e for e in log if e.type == "om-input-released" and e.data.cycle_id == held.data.cycle_id]
    assert released.data.released >= held.data.held
