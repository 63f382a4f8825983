"""The long thread with async buffering on, through the broker and worker, then manual cycles.

Driven like the recordings (each step settles before the next input), the broker run must
write the same lifecycle as `om simulate` with the same options: the fold is the same function
whether Kafka or the simulator feeds it.  Then `om observe` and `om reflect` travel as commands.
"""

import asyncio

import pytest

from omstream.client import OmClient
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import format_timeline, simulate
from omstream.schemas.config import load_om_config
from tests.integration.options import om_options
from tests.integration.support import EventWatcher
from tests.scenarios.test_long_thread import SCENARIO
from tests.scenarios.test_long_thread_async import assert_activation_steps_wait_for_nothing

pytestmark = pytest.mark.integration

OPTIONS = om_options(checkThresholdsAt="step", observation={"messageTokens": 3000},
                     reflection={"observationTokens": 4000})


def settled(steps: int):
    """The step's status is out and no background cycle is still running.

    Only judged when the last event read closes its input's output (`inputLast`): a step's
    status comes before the buffering start it triggers, and a read may end between them."""
    def check(events) -> bool:
        if not events or not events[-1].input_last:
            return False
        count = {t: 0 for t in ("data-om-status", "data-om-buffering-start", "data-om-buffering-end",
                                "data-om-buffering-failed")}
        for e in events:
            if e.type in count:
                count[e.type] += 1
        return (count["data-om-status"] >= steps and count["data-om-buffering-start"]
                == count["data-om-buffering-end"] + count["data-om-buffering-failed"])
    return check


def test_async_long_thread_matches_the_simulator_and_manual_cycles_work(new_env):
    env = new_env(options=OPTIONS)
    env.start_worker()
    messages = read_conversation(SCENARIO / "conversation.jsonl")[:60]  # 30 turns

    async def drive():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.play(messages, after_step=lambda steps: watcher.wait_for(settled(steps)))
            lifecycle = list(watcher.events)
            await client.observe("thread-long", request_id="observe-1")
            await client.observe("thread-long", request_id="observe-1")  # re-sent: applied once
            await watcher.wait_for(lambda evs: any(
                e.type == "data-om-observation-end" and e.data.operation_type == "observation"
                for e in evs[len(lifecycle):]))
            await client.reflect("thread-long", prompt="Keep only the user's preferences.")
            await watcher.wait_for(lambda evs: any(
                e.type == "data-om-observation-end" and e.data.operation_type == "reflection"
                for e in evs[len(lifecycle):]))
            await asyncio.sleep(1.0)
            await watcher.wait_for(lambda evs: True)
            return lifecycle, watcher.events[len(lifecycle):]

    lifecycle, manual = asyncio.run(drive())
    om = load_om_config({"observationalMemory": {
        "observation": {"model": "scripted/observer", "messageTokens": 3000},
        "reflection": {"model": "scripted/reflector", "observationTokens": 4000},
        "tokenCounter": "tokenx"}})
    expected = asyncio.run(simulate(messages, om))
    timeline = format_timeline(lifecycle, buffering_end=True)
    assert timeline == format_timeline(expected.events, buffering_end=True), env.logs()
    assert_activation_steps_wait_for_nothing(timeline)

    observed = [e for e in manual if e.type == "data-om-observation-start"
                and e.data.operation_type == "observation"]
    assert len(observed) == 1  # the duplicate command was applied once
    reflection = [e for e in manual if e.type == "data-om-observation-end" and e.data.operation_type == "reflection"]
    assert reflection and reflection[0].data.generation == lifecycle_generation(lifecycle) + 1


def lifecycle_generation(events) -> int:
    return max(e.data.generation_count for e in events if e.type == "data-om-status")
