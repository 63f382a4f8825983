"""The live feed without a broker: the data-part framing, the history's replay and resume, and
the SSE route and the client's reader over a real HTTP connection (aiohttp's test server)."""

import asyncio
import random

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from omstream.client.feed_reader import FeedEvent, follow_feed, sse_frames
from omstream.engine.fold import fold
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.sse import FEED_OPTIONS, FeedOptions
from omstream.projections.http.web import build_web_app
from omstream.projections.views.history import EventHistory
from omstream.projections.views.parts import data_part, frame_json
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.schemas.parts import DataPart
from omstream.settings import Settings
from tests.helpers import engine, fold_inputs, message, scripted_result

FOUR = ["type", "id", "data", "transient"]


def lifecycle():
    """A memory's events: messages, steps, a blocking observation that ends, more messages."""
    config = engine(300)
    inputs = []
    for i in range(8):
        inputs += [message(i), StepStarted(thread_id="t1", step_number=0, at=message(i).created_at,
                                           after_message_id=f"t1-m{i}")]
    state, events, jobs, _ = fold_inputs(inputs, config)
    pending = list(jobs)
    while pending:  # every cycle answered: the memory ends unblocked
        out = fold(state, scripted_result(pending.pop(0)), config)
        state, events, pending = out.state, events + list(out.events), pending + list(out.jobs)
    return state, events, config


def test_every_event_is_a_four_key_part_with_its_data_as_on_the_topic():
    _, events, _ = lifecycle()
    kinds = {e.type for e in events}
    assert {"om-message-accepted", "data-om-status", "data-om-observation-start", "data-om-observation-end"} <= kinds
    for event in events:
        frame = orjson.loads(frame_json(data_part(event)))
        assert list(frame) == FOUR
        DataPart.model_validate(frame)
        assert frame["data"] == orjson.loads(encode(event))["data"]  # byte for byte the event's fields
        assert frame["type"] == (event.type if event.type.startswith("data-") else "data-" + event.type)
        if event.type == "data-om-status":
            assert frame["id"] == "om-status" and frame["transient"] is True
        elif event.type == "om-message-accepted":
            assert frame["id"] == event.data.message.id and frame["transient"] is True
        elif event.type.startswith(("data-om-observation", "data-om-buffering", "data-om-activation")):
            assert frame["id"] == event.data.cycle_id and frame["transient"] is False
    with pytest.raises(ValueError):
        DataPart.model_validate({**frame, "extra": 1})


def test_history_replays_from_a_seq_once_and_deletion_forgets_it():
    state, events, config = lifecycle()
    history = EventHistory()
    live = history.subscribe("thread:t1")
    history.extend(events)
    history.extend(events)  # re-sent after a crash: nothing twice
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1))
    assert [e.seq for e in history.since("thread:t1")] == seqs
    assert [e.seq for e in history.since("thread:t1", 5)] == seqs[5:]
    assert history.since("thread:t1", len(events)) == [] and history.since("thread:other") == []
    assert live.queue.qsize() == len(events)
    deleted = fold(state, ThreadDeleted(thread_id="t1", at=message(20).created_at), config).events
    history.extend(deleted)
    assert history.since("thread:t1") == [] and history.last_seq("thread:t1") == deleted[-1].seq
    history.extend(events)  # an old event re-sent cannot bring the history back
    assert history.since("thread:t1") == []
    assert live.queue.qsize() == len(events) + len(deleted)  # the live UI learns of the deletion


def test_a_subscriber_that_falls_behind_overflows_without_holding_the_others():
    _, events, _ = lifecycle()
    history = EventHistory()
    slow, fast = history.subscribe("thread:t1", queue_size=3), history.subscribe(None, queue_size=3)
    for event in events:
        history.append(event)
        fast.queue.get_nowait()
    assert slow.overflowed.is_set() and not fast.overflowed.is_set()
    history.unsubscribe(slow)
    history.unsubscribe(fast)
    assert history.subscribers() == 0


async def frames_of(response):
    async def lines():
        async for line in response.content:
            yield line
    return [f async for f in sse_frames(lines())]


@pytest.fixture
def served():
    async def make(options=FeedOptions(ping_interval=0.1)):
        feed = ProjectionFeed(Settings())
        app = build_web_app(feed)
        app[FEED_OPTIONS] = options
        client = TestClient(TestServer(app))
        await client.start_server()
        return feed, client
    return make


def run(scenario):
    asyncio.run(scenario())


def test_replay_resume_filter_and_done(served):
    async def scenario():
        feed, client = await served()
        try:
            _, events, _ = lifecycle()
            feed.history.extend(events)
            r = await client.get("/threads/t1/events", params={"follow": "false"})
            assert r.headers["content-type"] == "text/event-stream"
            assert r.headers["cache-control"] == "no-cache"
            assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
            assert r.headers["x-accel-buffering"] == "no"
            raw = (await r.read()).decode()
            assert "\r" not in raw and raw.endswith("data: [DONE]\n\n")
            frames = [f async for f in sse_frames(_lines(raw))]
            assert frames[-1] == (None, "[DONE]")
            assert [int(i) for i, _ in frames[:-1]] == [e.seq for e in events]
            assert all(list(orjson.loads(d)) == FOUR for _, d in frames[:-1])
            # ?after= and Last-Event-ID (which wins) resume after that seq.
            r = await client.get("/threads/t1/events", params={"follow": "false", "after": "3"})
            assert [int(i) for i, _ in await frames_of(r) if i][:1] == [4]
            r = await client.get("/threads/t1/events", params={"follow": "false", "after": "3"},
                                 headers={"Last-Event-ID": "7"})
            assert [int(i) for i, _ in await frames_of(r) if i] == [e.seq for e in events[7:]]
            r = await client.get("/threads/t1/events", params={"follow": "false", "types": "om-message-accepted"})
            got = [orjson.loads(d)["type"] for i, d in await frames_of(r) if i]
            assert got == ["data-om-message-accepted"] * 8
            r = await client.get("/threads/t1/events", params={"follow": "false", "types": "data-om-status,data-om-observation-end"})
            assert {orjson.loads(d)["type"] for i, d in await frames_of(r) if i} == {"data-om-status", "data-om-observation-end"}
            for bad in ({"types": "nope"}, {"after": "x"}, {"follow": "maybe"}):
                assert (await client.get("/threads/t1/events", params=bad)).status == 400
            r = await client.get("/events", params={"follow": "false"})
            ids = [i for i, _ in await frames_of(r) if i]
            assert ids == [f"thread:t1:{e.seq}" for e in events]
        finally:
            await client.close()
    run(scenario)


async def _lines(text):
    for line in text.splitlines(keepends=True):
        yield line.encode()


def test_live_follow_pings_and_drops_a_slow_client_which_resumes_without_loss(served):
    async def scenario():
        feed, client = await served(FeedOptions(ping_interval=0.1, queue_size=4))
        try:
            _, events, _ = lifecycle()
            feed.history.extend(events[:5])
            r = await client.get("/threads/t1/events", params={"after": "2"})
            got = []
            pinged = False
            while len(got) < 5:
                line = (await r.content.readline()).decode()
                pinged |= line.startswith(": ping")
                if line.startswith("id: "):
                    got.append(int(line[4:]))
                    if len(got) == 3:
                        feed.history.extend(events[5:7])  # live, after the replay
            assert got == [3, 4, 5, 6, 7]
            while not pinged:
                pinged = (await r.content.readline()).startswith(b": ping")
            # More than queue_size events at once, before the handler can run: it is dropped.
            feed.history.extend(events[7:])
            rest = (await r.read()).decode()  # the server ended the response
            assert "id: " not in rest
            assert feed.history.subscribers() == 0
            # The client's reader resumes from its last id and misses nothing.
            seen = [e.seq async for e in follow_feed(f"{client.make_url('/threads/t1/events')}",
                                                     after=7, follow=False)]
            assert seen == [e.seq for e in events[7:]]
        finally:
            await client.close()
    run(scenario)


def test_the_reader_reconnects_with_last_event_id_and_yields_each_event_once(served):
    async def scenario():
        feed, client = await served(FeedOptions(ping_interval=0.05, queue_size=3))
        try:
            _, events, _ = lifecycle()
            url = str(client.make_url("/threads/t1/events"))
            seen: list[FeedEvent] = []
            connections, subscribe = [], feed.history.subscribe
            feed.history.subscribe = lambda *a, **k: connections.append(1) or subscribe(*a, **k)

            async def read():
                async for event in follow_feed(url, retry_delay=0.01):
                    seen.append(event)
                    if len(seen) == len(events):
                        return

            reader = asyncio.create_task(read())
            rng = random.Random(7)
            i = 0
            while i < len(events):
                n = rng.randint(1, 6)  # bursts over queue_size drop the connection now and then
                feed.history.extend(events[i:i + n])
                i += n
                await asyncio.sleep(0.01)
            await asyncio.wait_for(reader, 10)
            assert [e.seq for e in seen] == [e.seq for e in events]
            assert [e.type for e in seen] == [e.type for e in events]
            assert seen[0].data == events[0].data  # typed, equal to the event's own data
            assert len(connections) > 1  # it was dropped, and resumed
            print(f"\nreader: {len(seen)} events once each, in order, over {len(connections)} connections")
        finally:
            await client.close()
    run(scenario)


def test_the_namespace_feed_follows_every_memory_live_with_memory_key_ids(served):
    async def scenario():
        feed, client = await served()
        try:
            _, events, _ = lifecycle()
            other = [e.model_copy(update={"memory_key": "thread:t2", "thread_id": "t2"}) for e in events[:3]]
            feed.history.extend(events[:2])  # before the request: not replayed on the live feed
            r = await client.get("/events", params={"types": "om-message-accepted"})
            assert r.status == 200 and r.headers["x-vercel-ai-ui-message-stream"] == "v1"
            assert feed.history.subscribers() == 1  # subscribed before the headers were sent
            feed.history.extend(events[2:6])
            feed.history.extend(other)
            want = [f"thread:t1:{e.seq}" for e in events[2:6] if e.type == "om-message-accepted"] + \
                   [f"thread:t2:{e.seq}" for e in other if e.type == "om-message-accepted"]
            got = []
            while len(got) < len(want):
                line = (await r.content.readline()).decode()
                if line.startswith("id: "):
                    got.append(line[4:].strip())
            assert got == want
            r.close()
        finally:
            await client.close()
    run(scenario)
