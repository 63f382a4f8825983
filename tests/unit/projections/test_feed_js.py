"""examples/feed.js, run as it is in Node.js (`node examples/feed.js t1 ORIGIN`) with the WHATWG EventSource (`eventsource`, in
tests/js) against the real feed route: it shows each event of its three types once, in `seq`
order, through the replay, the live events, and a connection the server dropped (a client that
fell behind), which EventSource resumes by itself with `Last-Event-ID`."""

import asyncio
import os
import subprocess
from pathlib import Path

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.sse import FEED_OPTIONS, FeedOptions
from omstream.projections.http.web import build_web_app
from omstream.projections.views.parts import data_part
from omstream.settings import Settings
from tests.unit.projections.test_feed_sse import lifecycle

FEED_JS = Path(__file__).resolve().parents[3] / "examples" / "feed.js"
SHOWN = ("data-om-status", "data-om-activation", "data-om-observation-end")  # feed.js's ?types=


def expected_line(event) -> list:
    """What feed.js logs for an event, as run_feed_js.mjs prints it."""
    part = data_part(event)
    if event.type == "data-om-status":
        window = part.data["windows"]["active"]["messages"]
        return [str(event.seq), "unobserved", window["tokens"], "/", window["threshold"], "tokens"]
    return [str(event.seq), part.type, part.id, part.data]


def test_feed_js_shows_every_event_once_through_replay_live_and_a_dropped_connection(node_packages):
    _, events, _ = lifecycle()
    half = len(events) // 2
    wanted = [expected_line(e) for e in events if e.type in SHOWN]
    assert len({line[1] for line in wanted}) >= 2  # statuses and at least one observation end
    connections = 0

    @web.middleware
    async def count(request, handler):
        nonlocal connections
        connections += request.path == "/threads/t1/events"
        return await handler(request)

    async def scenario() -> list:
        feed = ProjectionFeed(Settings())
        feed.history.extend(events[:half])
        app = build_web_app(feed)
        app.middlewares.append(count)
        app[FEED_OPTIONS] = FeedOptions(queue_size=2)  # the live burst below overflows it: dropped
        server = TestServer(app)
        await server.start_server()
        node = await asyncio.create_subprocess_exec(
            "node", "run_feed_js.mjs", str(server.make_url("/")), str(FEED_JS),
            cwd=node_packages, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        shown: list = []

        async def read(until: int) -> None:
            while len(shown) < until:
                line = await node.stdout.readline()
                assert line, (await node.stderr.read()).decode()[-2000:]
                shown.append(orjson.loads(line))

        try:
            replayed = sum(e.type in SHOWN for e in events[:half])
            await asyncio.wait_for(read(replayed), 30)  # the replay, on the first connection
            feed.history.extend(events[half:])  # live, all at once: more than the client's queue
            await asyncio.wait_for(read(len(wanted)), 30)
            return shown
        finally:
            node.kill()
            await node.wait()
            await server.close()

    shown = asyncio.run(scenario())
    assert shown == wanted
    assert connections >= 2, connections  # the dropped connection was resumed, and lost nothing
    print(f"{len(shown)} lines over {connections} connections, events {len(events)}")


def test_feed_js_without_a_thread_prints_its_usage_and_fails():
    env = {k: v for k, v in os.environ.items() if k not in ("OM_THREAD", "OM_URL", "OM_TOKEN")}
    done = subprocess.run(["node", str(FEED_JS)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: node examples/feed.js THREAD [BASE_URL]")
