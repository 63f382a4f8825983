"""The live feed on the real broker: `om serve` as its own process, the worker folding messages
while clients follow a thread's `GET /threads/{threadId}/events`.

A follower disconnected at random points resumes with `Last-Event-ID` and gets every event of
the memory exactly once, in order, each frame a four-key AI SDK data part whose `data` is the
event's own on `<ns>.events`.
"""

import asyncio
import os
import random
import time
from collections import Counter

import aiohttp
import orjson
import pytest

from omstream.client import OmClient
from omstream.client.feed_reader import sse_frames
from omstream.projections.views.parts import part_type
from omstream.topics import Topics
from tests.helpers import message
from tests.integration.openapi_check import check_answer
from tests.integration.options import om_options
from tests.integration.support import Server, read_all

pytestmark = pytest.mark.integration

FOUR = ["type", "id", "data", "transient"]
KEY = "thread:live"


def check_frame(data: str) -> dict:
    """The AI SDK's data part, and nothing else."""
    part = orjson.loads(data)
    assert list(part) == FOUR, part
    assert isinstance(part["type"], str) and part["type"].startswith("data-om-")
    assert isinstance(part["id"], str) and part["id"]
    assert isinstance(part["data"], dict) and isinstance(part["transient"], bool)
    return part


async def topic_events(settings) -> dict[int, tuple[dict, int]]:
    """seq -> (the event as written, its Kafka timestamp) for the thread's memory, once each."""
    out: dict[int, tuple[dict, int]] = {}
    for r in await read_all(settings, Topics(settings.namespace).events, idle=0.3):
        event = orjson.loads(r.value)
        if event["memoryKey"] == KEY:
            out.setdefault(event["seq"], (event, r.timestamp))
    return out


async def produce(client: OmClient, rng: random.Random, pairs: int, more) -> int:
    """An agent loop: user message, step, reply, turn end, with small random pauses; at least
    `pairs` turns, and on while `more()`.  The number of turns."""
    i = 0
    while i < pairs or more():
        user, reply = message(2 * i, thread="live", words=70), message(2 * i + 1, thread="live", words=70)
        await client.send_message(user)
        await client.step_started("live", step_number=0, at=user.created_at, after_message_id=user.id)
        await client.send_message(reply)
        await client.turn_ended("live", at=reply.created_at, after_message_id=reply.id)
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        i += 1
    return i


async def settled(settings, messages: int, reached) -> dict[int, tuple[dict, int]]:
    """The memory's events once every message was accepted, the topic stopped growing and
    `reached(max seq)` holds."""
    previous, deadline = -1, time.monotonic() + 180
    while time.monotonic() < deadline:
        log = await topic_events(settings)
        top = max(log, default=0)
        accepted = sum(event["type"] == "om-message-accepted" for event, _ in log.values())
        if accepted == messages and top == previous and await reached(top):
            return log
        previous = top
        await asyncio.sleep(1.0)
    raise TimeoutError("the feed never reached the topic's last event")


def test_a_follower_disconnected_20_times_gets_every_event_once_in_order(new_env, tmp_path):
    env = new_env(options=om_options(observation={"messageTokens": 600}))  # async buffering
    env.start_worker()
    rng = random.Random(27)
    received: list[tuple[int, dict]] = []
    disconnects: list[str] = []

    async def follow(url: str) -> None:
        last: int | None = None
        async with aiohttp.ClientSession() as http:
            while True:
                headers = {"Last-Event-ID": str(last)} if last is not None else {}
                # 20 disconnects at random points while messages flow: at a random moment
                # (possibly mid-frame, or while no event is coming), half of them sooner after a
                # random number of frames; then one connection that follows on.
                cut = len(disconnects) < 20
                budget = rng.randint(1, 12) if cut and rng.random() < 0.5 else None
                try:
                    async with asyncio.timeout(rng.uniform(0.05, 1.0) if cut else None):
                        async with http.get(url, headers=headers) as response:
                            assert response.status == 200
                            check_answer("GET", url, response.status, response.headers, None, headers_sent=headers)
                            assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
                            async for frame_id, data in sse_frames(response.content):
                                part = check_frame(data)
                                seq = int(frame_id)
                                received.append((seq, part))
                                last = seq
                                if budget is not None:
                                    budget -= 1
                                    if budget == 0:
                                        disconnects.append("after frames")
                                        break
                except TimeoutError:
                    disconnects.append("at a moment")

    async def scenario():
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            follower = asyncio.create_task(follow(f"{server.url}/threads/live/events"))
            async with OmClient(env.settings) as client:
                turns = await produce(client, rng, 40, lambda: len(disconnects) < 20)

                async def reached(top: int) -> bool:
                    if follower.done():
                        follower.result()  # its failure, if it failed
                        raise AssertionError("the follower stopped")
                    return len(disconnects) >= 20 and bool(received) and received[-1][0] == top
                log = await settled(env.settings, 2 * turns, reached)
                follower.cancel()
                # The client's own reader, after the fact: the same events, typed.
                typed = [e async for e in client.events("live", follow=False, base_url=server.url)]
                threads = await client.threads(base_url=server.url)
        finally:
            server.stop()
        return log, typed, threads, turns

    log, typed, threads, turns = asyncio.run(scenario())
    seqs = [seq for seq, _ in received]
    assert len(disconnects) >= 20
    assert seqs == sorted(log) == list(range(1, len(log) + 1)), "lost, duplicated or out of order"
    for seq, part in received:
        event = log[seq][0]
        assert part["type"] == part_type(event["type"]) and part["data"] == event["data"]
    assert [e.seq for e in typed] == seqs and [e.type for e in typed] == [log[s][0]["type"] for s in seqs]
    assert [t["threadId"] for t in threads] == ["live"]
    kinds = Counter(log[s][0]["type"] for s in seqs)
    lifecycle = sum(n for k, n in kinds.items() if k != "data-om-status")
    assert kinds["om-message-accepted"] == 2 * turns and kinds["data-om-activation"] >= 1
    print(f"\nfeed: {len(seqs)} events ({lifecycle} lifecycle, {kinds['data-om-status']} status) "
          f"of {turns} turns over {len(disconnects) + 1} connections ({Counter(disconnects)}): lost 0, duplicated 0, "
          f"out of order 0; by type {dict(sorted(kinds.items()))}")


def test_100_followers_of_one_thread_all_get_every_event(new_env, tmp_path):
    """100 concurrent SSE clients (in this test's process) on one thread while messages flow:
    each gets every event of the memory once, in order; the delay from each event's append (its
    Kafka timestamp) to its delivery to each client is printed (p50 / p99)."""
    env = new_env(options=om_options(observation={"messageTokens": 600}))
    env.start_worker()
    rng = random.Random(100)
    clients = int(os.environ.get("FEED_TEST_CLIENTS", "100"))  # 1 to see the cost of the fan-out
    got: list[list[tuple[int, float]]] = [[] for _ in range(clients)]

    async def follower(url: str, mine: list, connected: asyncio.Event, count: list[int]) -> None:
        async with aiohttp.ClientSession() as http:
            async with http.get(url) as response:
                assert response.status == 200
                count[0] += 1
                if count[0] == clients:
                    connected.set()
                async for frame_id, data in sse_frames(response.content):
                    mine.append((int(frame_id), time.time() * 1000))
                    check_frame(data)

    async def scenario():
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            connected, count = asyncio.Event(), [0]
            url = f"{server.url}/threads/live/events"
            tasks = [asyncio.create_task(follower(url, got[i], connected, count)) for i in range(clients)]
            await asyncio.wait_for(connected.wait(), 60)
            async with OmClient(env.settings) as client:
                turns = await produce(client, rng, 30, lambda: False)

                async def reached(top: int) -> bool:
                    for task in tasks:
                        if task.done():
                            task.result()
                            raise AssertionError("a follower stopped")
                    return all(mine and mine[-1][0] == top for mine in got)
                log = await settled(env.settings, 2 * turns, reached)
            for task in tasks:
                task.cancel()
        finally:
            server.stop()
        return log

    log = asyncio.run(scenario())
    expected = list(range(1, len(log) + 1))
    assert sorted(log) == expected
    delays = []
    for mine in got:
        assert [seq for seq, _ in mine] == expected, "a client lost, repeated or reordered an event"
        delays += [at - log[seq][1] for seq, at in mine]
    delays.sort()
    p50, p99 = delays[len(delays) // 2], delays[int(len(delays) * 0.99)]
    print(f"\n{clients} followers x {len(expected)} events = {len(delays)} deliveries, each client every "
          f"event once in order; append -> delivery p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {delays[-1]:.0f} ms")
