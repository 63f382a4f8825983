"""The feed as the AI SDK reads it: the `ai` package from the npm registry, majors 5, 6 and 7
(tests/js, installed by `npm ci` there the first time: the npm registry is one this project may
reach, as the model's wheels come from the package index), reads a finite feed through `DefaultChatTransport`'s reconnect
path and `readUIMessageStream`, as `useChat` consumes a stream, and builds its parts: every
non-transient part once per (type, id), holding its latest data, and every part on the data
stream in order."""

import asyncio

import orjson
import pytest
from aiohttp.test_utils import TestServer

from omstream.engine.fold import fold
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from omstream.projections.views.parts import data_part, frame_json
from omstream.schemas.control import ThreadPatched
from omstream.settings import Settings
from tests.helpers import message
from tests.unit.projections.test_feed_sse import lifecycle


@pytest.mark.parametrize("major", [5, 6, 7])
def test_the_ai_sdk_builds_the_message_parts_from_the_feed(major, node_packages):
    state, events, config = lifecycle()
    for title in ("First title", "Second title"):  # one part, replaced in place (`om-thread-title`)
        out = fold(state, ThreadPatched(thread_id="t1", title=title, at=message(30).created_at), config)
        state, events = out.state, events + list(out.events)
    frames = [orjson.loads(frame_json(data_part(e))) for e in events]
    expected: dict[tuple[str, str], dict] = {}
    for frame in frames:
        if not frame["transient"]:
            expected[(frame["type"], frame["id"])] = frame["data"]  # a later part replaces in place

    async def scenario():
        feed = ProjectionFeed(Settings())
        feed.history.extend(events)
        server = TestServer(build_web_app(feed))
        await server.start_server()
        try:
            node = await asyncio.create_subprocess_exec(
                "node", "read_feed.mjs", str(major), str(server.make_url("/threads/t1/events?follow=false")),
                cwd=node_packages, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(node.communicate(), 60)
            assert node.returncode == 0, err.decode()[-2000:]
            return orjson.loads(out)
        finally:
            await server.close()

    read = asyncio.run(scenario())
    parts = [p for p in read["parts"] if p["type"].startswith("data-")]
    assert {(p["type"], p["id"]): p["data"] for p in parts} == expected
    assert [p["data"]["newTitle"] for p in parts if p["type"] == "data-om-thread-update"] == ["Second title"]
    assert len(parts) == len(expected) and not any(p.get("transient") for p in parts)
    got, want = [(d["type"], d["id"], d["data"]) for d in read["data"]], [(f["type"], f["id"], f["data"]) for f in frames]
    assert len(got) == len(want) and got == want, next((i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w) if got != want else None
    print(f"\nai@{major}: {len(frames)} parts streamed, {len(parts)} kept in the message "
          f"({sum(f['transient'] for f in frames)} transient)")
