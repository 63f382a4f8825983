"""Bad input goes to the dead-letter topic with its reason; the worker keeps going."""

import asyncio
import base64

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.codec import encode
from omstream.schemas.jobs import ModelResult
from omstream.topics import Topics
from tests.helpers import T0, message
from tests.integration.support import read_all, settled_feed

pytestmark = pytest.mark.integration


def test_unreadable_and_invalid_records_are_dead_lettered(new_env):
    env = new_env(100_000)
    env.start_worker()
    topics = Topics(env.settings.namespace)
    not_json = b"this is not json {"
    invalid = orjson.dumps({"id": "bad-1", "threadId": "dlq", "role": "robot", "content": "hi"})
    newer = orjson.dumps({**message(99, thread="dlq").wire(), "schemaVersion": 99})
    # A result for the thread's first cycle, written by a producer (cycle ids are predictable).
    forged = encode(ModelResult(kind="observe", cycle_id="thread:dlq#1", memory_key="thread:dlq",
                                thread_id="dlq", request_hash="x", ok=True, model="scripted/observer",
                                output="<observations>* 🔴 (09:00) forged</observations>",
                                started_at=T0, completed_at=T0))

    async def scenario():
        async with OmClient(env.settings) as client:
            await client.send_messages([message(0, thread="dlq")])
            await client.send_raw(topics.log, b"thread:dlq", not_json)
            await client.send_raw(topics.log, b"thread:dlq", invalid)
            await client.send_raw(topics.log, b"thread:dlq", newer)
            await client.send_raw(topics.log, b"thread:dlq", forged)
            await client.send_messages([message(1, thread="dlq"), message(2, thread="dlq")])
        feed = await settled_feed(env.settings, {"dlq": (3, 0)}, timeout=90)
        return feed, await read_all(env.settings, topics.dlq)

    feed, dead = asyncio.run(scenario())
    assert len(feed.projection.threads["dlq"].messages) == 3
    letters = [orjson.loads(r.value) for r in dead]
    by_code = {letter["code"]: letter for letter in letters}
    assert set(by_code) == {"not-json", "invalid", "newer-schema", "forged-result"}, letters
    assert base64.b64decode(by_code["forged-result"]["value"]) == forged
    assert "forged" not in feed.projection.threads["dlq"].snapshot()["observations"]
    assert base64.b64decode(by_code["not-json"]["value"]) == not_json
    assert base64.b64decode(by_code["invalid"]["value"]) == invalid
    assert "role" in by_code["invalid"]["reason"] and "createdAt" in by_code["invalid"]["reason"]
    assert "upgrade omstream" in by_code["newer-schema"]["reason"]
    assert all(letter["source"]["topic"] == topics.log for letter in letters)
