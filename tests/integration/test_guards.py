"""Nothing crashes the fold and no cycle waits forever, on a real broker.

Records that break the input limits (too deep, too large, too many parts, too long a part,
createdAt far ahead of the log) are interleaved with valid messages: each bad one is in
`<ns>.dlq` with its code, each valid one is folded exactly once (one `om-message-accepted` on
`<ns>.events`), and the worker never restarts.  A model that never answers fails its blocking
cycle at the job deadline and the memory goes on with the messages it held.
"""

import asyncio
import base64
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.codec import encode
from omstream.topics import Topics
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server, read_all

pytestmark = pytest.mark.integration


def accepted_ids(events) -> list[str]:
    return [e.data.message.id for e in events if e.type == "om-message-accepted"]


def assert_worker_never_restarted(env) -> None:
    [worker] = env.workers
    log = worker.log.read_text(errors="replace")
    assert worker.proc.poll() is None, env.logs()
    assert "Traceback" not in log and "crashed" not in log.lower(), log[-3000:]


def test_bad_records_are_dead_lettered_with_their_code_and_valid_ones_fold_once(new_env):
    env = new_env(100_000)
    env.start_worker()
    topics = Topics(env.settings.namespace)
    key = b"thread:lim"
    body = encode(message(90, thread="lim"))
    deep = body[:-1] + b',"metadata":{"deep":' + b'{"a":' * 300 + b"1" + b"}" * 300 + b"}}"
    large = orjson.dumps({**orjson.loads(body), "id": "lim-large", "content": "x" * (600 * 1024)})
    long_part = orjson.dumps({**orjson.loads(body), "id": "lim-long", "content": "y" * 100_001})
    parts = orjson.dumps({**orjson.loads(body), "id": "lim-parts",
                          "content": [{"type": "text", "text": "p"}] * 201})
    ahead = datetime.now(UTC) + timedelta(days=1)
    future = orjson.dumps({**orjson.loads(body), "id": "lim-future",
                           "createdAt": ahead.isoformat().replace("+00:00", "Z")})
    bad = {"too-deep": deep, "too-large": large, "text-too-long": long_part,
           "too-many-parts": parts, "future-time": future}
    valid = [message(i, thread="lim") for i in range(6)]

    async def scenario():
        async with EventWatcher(env.settings) as watcher, OmClient(env.settings) as client:
            for good, raw in zip(valid, [*bad.values(), None]):
                await client.send_messages([good])
                if raw is not None:
                    await client.send_raw(topics.log, key, raw)
            events = await watcher.wait_for(lambda evs: "lim-m5" in accepted_ids(evs), timeout=90)
        return events, await read_all(env.settings, topics.dlq)

    events, dead = asyncio.run(scenario())
    assert accepted_ids(events) == [m.id for m in valid]  # each valid one once, in log order
    letters = [orjson.loads(r.value) for r in dead]
    assert sorted(letter["code"] for letter in letters) == sorted(bad), letters
    for letter in letters:
        assert base64.b64decode(letter["value"]) == bad[letter["code"]]
        assert letter["source"]["topic"] == topics.log and letter["key"] == key.decode()
    assert_worker_never_restarted(env)


# The worker's job deadline is an [omstream] setting: these lines extend the [omstream] table
# the test config ends with.  The observer never answers its first call for a given request.
HANGING = om_options(settings={"job_deadline_ms": 2000}, observation={
    "messageTokens": 500, "bufferTokens": False, "modelSettings": {"failWith": "hang"}})


def test_a_model_that_never_answers_fails_the_cycle_at_the_deadline_and_held_messages_apply(new_env, tmp_path):
    env = new_env(options=HANGING)
    env.start_worker()
    first = [message(i, thread="hang") for i in range(6)]  # enough for a blocking observation
    held = message(6, thread="hang")

    def failures(events):
        return [e for e in events if e.type == "data-om-observation-failed"]

    async def scenario():
        async with EventWatcher(env.settings) as watcher, OmClient(env.settings) as client:
            await client.send_messages(first)
            await watcher.wait_for(lambda evs: any(e.type == "data-om-observation-start" for e in evs), 60)
            await client.send_messages([held])  # held behind the blocking cycle
            # The first cycle fails at the deadline; the held message then starts a second
            # cycle (everything is still unobserved), which fails the same way.
            events = await watcher.wait_for(lambda evs: len(failures(evs)) >= 2, timeout=60)
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            status, context = await server.get("/threads/hang/context", wait=30)
        finally:
            server.stop()
        return events, status, context

    events, status, context = asyncio.run(scenario())
    types = [e.type for e in events]
    first_failure = types.index("data-om-observation-failed")
    assert accepted_ids(events) == [m.id for m in (*first, held)]
    # The held message is folded only once the blocked cycle has failed.
    assert types.index("om-message-accepted", types.index("data-om-observation-start")) > first_failure
    for failed in failures(events)[:2]:
        assert "no answer within the job deadline (2000 ms)" in failed.data.error
    assert status == 200 and context["blocked"] is False
    assert [m["id"] for m in context["messages"]] == [m.id for m in (*first, held)]
    # The answer says why the messages are still raw.
    assert "no answer within the job deadline (2000 ms)" in context["lastFailure"]["error"]
    assert_worker_never_restarted(env)


# The model agents' deadline is left long (10 min): the fold's own backstop ends the cycle.
BACKSTOP = om_options(settings={"job_deadline_ms": 600000}, cycleDeadline="2s", observation={
    "messageTokens": 500, "bufferTokens": False, "modelSettings": {"failWith": "hang"}})


def test_the_fold_fails_an_overdue_cycle_at_the_next_input_past_cycle_deadline(new_env):
    env = new_env(options=BACKSTOP)
    env.start_worker()
    first = [message(i, thread="late") for i in range(6)]

    async def scenario():
        async with EventWatcher(env.settings) as watcher, OmClient(env.settings) as client:
            await client.send_messages(first)
            events = await watcher.wait_for(
                lambda evs: any(e.type == "data-om-observation-start" for e in evs), 60)
            start = next(e for e in events if e.type == "data-om-observation-start").data.started_at
            # Event time, not the worker's clock, decides: within the deadline it is held ...
            inside = message(6, thread="late").model_copy(update={"created_at": start + timedelta(seconds=1)})
            past = message(7, thread="late").model_copy(update={"created_at": start + timedelta(seconds=3)})
            await client.send_messages([inside, past])
            return await watcher.wait_for(
                lambda evs: any(e.type == "data-om-observation-failed" for e in evs)
                and "late-m6" in accepted_ids(evs), timeout=60)

    events = asyncio.run(scenario())
    failed = next(e for e in events if e.type == "data-om-observation-failed")
    assert failed.data.error.startswith("deadline: no model answer within cycleDeadline (2000 ms)")
    types = [e.type for e in events]
    assert types.index("data-om-observation-failed") < types.index("om-message-accepted", types.index(
        "data-om-observation-start"))  # the held message is applied after the failure
    assert accepted_ids(events).count("late-m6") == 1
    assert_worker_never_restarted(env)
