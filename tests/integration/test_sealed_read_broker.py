"""`om serve` in a namespace with a key, on the real broker: sealed events on `<ns>.events` (written
here as the fold agent will write them), a memory deleted and its key shredded before the server
starts.  The server opens the live memory's events (its context window and feed read in clear),
passes over the deleted one's, and keeps the events sealed in its data directory; a one-off
`ProjectionFeed(settings)` opens them with the settings' key by itself."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

import aiohttp
import orjson
import pytest

from omstream import kafka
from omstream.crypto.sealing import is_marked, record_owner, sealer_of
from omstream.infra.broker import free_port
from omstream.projections.feed import ProjectionFeed
from omstream.projections.serve import serve
from omstream.schemas.codec import encode
from omstream.settings import Settings
from omstream.topics import Topics, ensure_topics
from tests.helpers import engine
from tests.unit.projections.test_store import memory_events

pytestmark = pytest.mark.integration

KEY = "a-namespace-key-for-the-read-side-" + "k" * 16


SECRET = "B-SECRET-7781"


def mark(event):
    """b's messages carry the secret (in its accepted messages, which the read model would keep)."""
    if event.type != "om-message-accepted":
        return event
    message = event.data.message
    return event.model_copy(update={"data": event.data.model_copy(update={
        "message": message.model_copy(update={"content": f"{SECRET} {message.content}"})})})


async def test_om_serve_opens_sealed_events_and_passes_over_a_deleted_memorys(broker, tmp_path):
    settings = replace(Settings(), namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
                       partitions=1, namespace_key=KEY, data_dir=str(tmp_path), web_port=free_port())
    await ensure_topics(settings)
    kept = memory_events("a", engine(300), 8)
    gone = [mark(e) for e in memory_events("b", engine(300), 6, delete_at=5)]
    assert gone[-1].type == "om-memory-deleted"
    writer = sealer_of(settings)  # the worker's ring (repairing)
    await writer.start()
    producer = kafka.producer(settings)
    await producer.start()
    try:
        sealed = 0
        for offset, event in enumerate(kept + gone):
            value = encode(event.model_copy(update={"input_offset": offset, "input_last": True}))
            owner = record_owner(orjson.loads(value))
            value = await writer.seal(value, owner, context=event.event_id.encode())
            sealed += is_marked(value)
            await producer.send_and_wait(Topics.of(settings).events, value, key=event.memory_key.encode())
        await writer.shred("thread:b")
    finally:
        await producer.stop()
        await writer.stop()
    assert sealed > 10

    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve(settings, on_ready=ready.set_result))
    try:
        url = await asyncio.wait_for(ready, 60)
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                async with http.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.1)
            async with http.get(f"{url}/threads") as r:
                assert [t["threadId"] for t in (await r.json())["threads"]] == ["a"]
            async with http.get(f"{url}/threads/a/context") as r:
                window = await r.json()
            text = orjson.dumps(window).decode()
            assert "alpha" in text and "om1" not in text  # opened: the messages' words, no envelope
            async with http.get(f"{url}/threads/b/context") as r:
                assert r.status == 404
            async with http.get(f"{url}/threads/a/events", params={"follow": "false"}) as r:
                feed = await r.text()
            assert "om-message-accepted" in feed and "om1" not in feed
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
    # A one-off projection (no sealer given) takes the settings' key by itself.
    feed = ProjectionFeed(settings)
    await feed.start()
    try:
        await feed.read_to_end()
        assert set(feed.projection.threads) == {"a"} and feed.opener.passed["shredded"] > 0
        assert "alpha" in orjson.dumps(feed.projection.snapshot("a")).decode()
    finally:
        await feed.stop()
    # At rest: the events table holds the topic's bytes, sealed; nothing of b in any file.
    files = b"".join(p.read_bytes() for p in Path(tmp_path, "readmodel").rglob("*.sqlite*"))
    assert b"om1d:" in files
    assert SECRET.encode() not in files
