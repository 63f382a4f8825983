"""The HTTP read side without a broker: `after=` waits for an input's events, `stale` on timeout,
and `/healthz` before and after the projection caught up.  The feed is fed the way its consumer
loop feeds it (`_apply` with the bytes of `<ns>.events`)."""

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from omstream.engine.fold import fold, new_state
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted
from omstream.schemas.positions import LogPosition
from omstream.settings import Settings
from tests.helpers import engine, message


def stamped(events, offset: int) -> list[bytes]:
    """As the worker writes them: the input's offset on each, the last one marked."""
    last = len(events) - 1
    return [encode(e.model_copy(update={"input_offset": offset, "input_last": True if i == last else None}))
            for i, e in enumerate(events)]


def records():
    """(log offset, event bytes) for a message and its step, both on partition 0."""
    config, state = engine(100_000), new_state("thread:t1", "t1", "u1")
    out = fold(state, message(0), config)
    step = fold(out.state, StepStarted(thread_id="t1", step_number=0, at=message(0).created_at,
                                       after_message_id="t1-m0"), config)
    return [(10, stamped(out.events, 10)), (11, stamped(step.events, 11))]


def test_an_input_is_caught_up_only_with_its_last_event():
    feed = ProjectionFeed(Settings())
    (_, message_events), (_, step_events) = records()
    assert len(step_events) == 1 and len(message_events) >= 1
    for raw in message_events:
        feed._apply(0, raw)
    assert feed.caught_up(0, 10) and not feed.caught_up(0, 11) and not feed.caught_up(1, 0)
    assert feed.projection.view("t1").messages["t1-m0"].tokens is not None


def test_a_partial_input_is_not_caught_up():
    feed = ProjectionFeed(Settings())
    config, state = engine(100_000), new_state("thread:t1", "t1", "u1")
    two = fold(state, message(0), config).events  # acceptance, then the per-message status
    assert len(two) == 2
    first, second = stamped(two, 5)
    feed._apply(0, first)
    assert feed.caught_up(0, 4) and not feed.caught_up(0, 5)
    feed._apply(0, second)
    assert feed.caught_up(0, 5)


@pytest.fixture
def served():
    async def make():
        feed = ProjectionFeed(Settings())
        client = TestClient(TestServer(build_web_app(feed)))
        await client.start_server()
        return feed, client
    return make


def test_after_waits_for_the_write_and_says_stale_on_timeout(served):
    async def scenario():
        feed, client = await served()
        try:
            assert (await client.get("/healthz")).status == 503
            feed.ready = True
            assert (await client.get("/healthz")).status == 200
            (_, message_events), (step_at, step_events) = records()
            for raw in message_events:
                feed._apply(0, raw)
            # The step is not folded yet: the read waits, then answers the current view as stale.
            r = await client.get("/threads/t1/context", params={"after": "0:11", "wait": "0.2"})
            body = await r.json()
            assert r.status == 200 and body["stale"] is True and len(body["messages"]) == 1

            async def fold_the_step_later():
                await asyncio.sleep(0.2)
                for raw in step_events:
                    feed._apply(0, raw)
                async with feed.changed:
                    feed.changed.notify_all()

            later = asyncio.create_task(fold_the_step_later())
            r = await client.get("/threads/t1/context",
                                 params={"after": str(LogPosition(0, step_at)), "wait": "5"})
            body = await r.json()
            await later
            assert body["stale"] is False and feed.caught_up(0, step_at)
            assert (await client.get("/threads/t1/context", params={"after": "zero"})).status == 400
            assert (await client.get("/threads/nope/context", params={"wait": "0"})).status == 404
        finally:
            await client.close()

    asyncio.run(scenario())


def test_log_positions_read_and_print_as_partition_colon_offset():
    assert str(LogPosition(1, 42)) == "1:42" and LogPosition.parse("1:42") == (1, 42)
    for bad in ("1", "a:2", "1:-3", ""):
        with pytest.raises(ValueError):
            LogPosition.parse(bad)
