"""A worker killed mid-stream resumes without losing or doubling anything."""

import asyncio
import time

import pytest

from omstream.client import OmClient
from omstream.engine.tokens import get_counter
from tests.helpers import message
from tests.integration.support import events, expected_cycles, final_states, settled_feed

pytestmark = pytest.mark.integration

THREADS = ("crash-a", "crash-b")


def conversation():
    return {t: [message(i, thread=t, words=30 + (i * 17) % 80) for i in range(100)] for t in THREADS}


def comparable(state: dict) -> dict:
    # Offsets name positions in this run's topics, the clock includes the model call's measured
    # duration, and seq also counts the duplicate results a crash causes (checked separately);
    # everything the memory *is* must be equal.
    return {k: v for k, v in state.items() if k not in ("offsets", "clock", "seq")}


def run(env, *, kill_after_half: bool):
    msgs = conversation()
    expected = {t: expected_cycles(ms, get_counter("tokenx"), 1000) for t, ms in msgs.items()}
    worker = env.start_worker()

    async def produce(lo, hi):
        async with OmClient(env.settings) as client:
            for i in range(lo, hi):
                await client.send_messages([msgs[t][i] for t in THREADS])

    asyncio.run(produce(0, 50))
    if kill_after_half:
        time.sleep(8)  # the worker is now folding and calling the model
        worker.kill()
        env.start_worker()
    asyncio.run(produce(50, 100))
    feed = asyncio.run(settled_feed(env.settings, {t: (100, expected[t]) for t in THREADS}, timeout=180))
    states = asyncio.run(final_states(env.settings))
    log = asyncio.run(events(env.settings))
    return feed, states, expected, log


def test_sigkill_half_way_gives_the_same_memory_as_an_uninterrupted_run(new_env):
    calm, crashed = new_env(1000), new_env(1000)
    feed_a, states_a, expected, log_a = run(calm, kill_after_half=False)
    feed_b, states_b, _, log_b = run(crashed, kill_after_half=True)
    for thread in THREADS:
        a, b = feed_a.projection.threads[thread], feed_b.projection.threads[thread]
        assert a.cycles == b.cycles == expected[thread], crashed.logs()
        snap_a, snap_b = a.snapshot(), b.snapshot()
        assert snap_a["observations"] == snap_b["observations"]
        assert snap_a["observedMessageIds"] == snap_b["observedMessageIds"]
        assert snap_a["messages"] == snap_b["messages"]
        assert snap_a["chat"] == snap_b["chat"]
        key = f"thread:{thread}"
        assert comparable(states_a[key]) == comparable(states_b[key])
        assert len(states_b[key]["seen"]) == 100
        # The only extra events are the recorded duplicates of results the crash made the model
        # agent deliver twice; every other event is the same, with the same id.
        # Re-sent events carry the id of the first copy; consumers keep one per id.
        def once(log):
            return list({e.event_id: e for e in log if e.memory_key == key}.values())

        def lifecycle(log):
            return [e.type for e in once(log) if e.type not in ("om-result-ignored", "data-om-status")]

        ignored = sum(1 for e in once(log_b) if e.type == "om-result-ignored")
        assert states_b[key]["seq"] - states_a[key]["seq"] == ignored
        assert len(once(log_b)) == states_b[key]["seq"]
        assert lifecycle(log_a) == lifecycle(log_b)
