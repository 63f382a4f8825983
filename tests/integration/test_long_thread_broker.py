"""The recorded long-thread run reproduced through the real broker and worker.

The driver plays the agent loop the recording was made with: user message, step 0, wait for that
step's `data-om-status` (the memory has settled), the reply, the turn's end.  The status and
cycle lines must equal the recording, as they do in `om simulate`.
"""

import asyncio

import pytest

from omstream.client import OmClient
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import format_timeline
from tests.integration.options import om_options
from tests.integration.support import EventWatcher
from tests.scenarios.test_long_thread import SCENARIO, _expected_lines

pytestmark = pytest.mark.integration

OPTIONS = om_options(checkThresholdsAt="step", observation={"messageTokens": 3000, "bufferTokens": False},
                     reflection={"observationTokens": 4000})


def test_long_thread_timeline_through_the_broker(new_env):
    env = new_env(options=OPTIONS)
    env.start_worker()
    messages = read_conversation(SCENARIO / "conversation.jsonl")

    async def drive():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            async def step_reported(steps: int) -> None:
                await watcher.wait_for(lambda evs: sum(e.type == "data-om-status" for e in evs) >= steps)

            await client.play(messages, after_step=step_reported)
            return watcher.events

    log = asyncio.run(drive())
    assert format_timeline(log) == _expected_lines(), env.logs()
