"""`enabled: false` through the broker: every message reaches the context raw, and no model job,
no cycle and no lifecycle event is ever produced."""

import asyncio
import time

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.codec import decode_event
from omstream.topics import Topics
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import final_states, read_all, settled_feed

pytestmark = pytest.mark.integration

DISABLED = om_options(enabled=False, observation={"messageTokens": 500})


async def wait_until_folded(settings, counts: dict[str, int], timeout: float = 90.0) -> dict:
    """The evidence that the worker has folded every message: its stored state lists them."""
    deadline = time.monotonic() + timeout
    while True:
        states = await final_states(settings)
        folded = {t: len(states.get(f"thread:{t}", {}).get("pending", [])) for t in counts}
        if folded == counts:
            return states
        if time.monotonic() > deadline:
            raise TimeoutError(f"folded {folded}, expected {counts}")
        await asyncio.sleep(0.5)


def test_a_disabled_memory_passes_every_message_raw_and_emits_no_job(new_env):
    env = new_env(options=DISABLED)
    env.start_worker()
    threads = {t: [message(i, thread=t, words=120) for i in range(30)] for t in ("alpha", "beta")}
    topics = Topics(env.settings.namespace)

    async def scenario():
        async with OmClient(env.settings) as client:
            for msgs in threads.values():
                await client.play(msgs)  # messages, steps and turn ends: thresholds are crossed
            await client.observe("alpha")
        await wait_until_folded(env.settings, {t: len(ms) for t, ms in threads.items()})
        feed = await settled_feed(env.settings, {t: (len(ms), 0) for t, ms in threads.items()})
        return (feed, await read_all(env.settings, topics.jobs, idle=0.5),
                await read_all(env.settings, topics.events, idle=0.5),
                await read_all(env.settings, topics.dlq, idle=0.5))

    feed, jobs, events, dead = asyncio.run(scenario())
    print(f"disabled memory: {sum(map(len, threads.values()))} messages, {len(jobs)} jobs, "
          f"{len(events)} events, {len(dead)} dead letters")
    # No cycle, no job: the only events are the acceptances the read side shows them from.
    assert jobs == [], env.logs()
    accepted = [decode_event(r.value) for r in events]
    assert {e.type for e in accepted} == {"om-message-accepted"}, env.logs()
    assert sorted(e.data.message.id for e in accepted) == sorted(m.id for ms in threads.values() for m in ms)
    for thread, msgs in threads.items():
        view = feed.projection.threads[thread]
        assert view.observations == "" and not view.observed
        assert [m.id for m in view.unobserved()] == [m.id for m in msgs]
    [refused] = dead
    assert "observational memory is disabled" in orjson.loads(refused.value)["reason"]
