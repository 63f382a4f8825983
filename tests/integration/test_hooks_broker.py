"""Lifecycle hooks (§13) in a worker on the real broker: the fold agent calls each configured hook
once per cycle, after the cycle's events are on the log, with the model calls' usage."""

import asyncio
import json
import time

import pytest

from omstream.client import OmClient
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import events

pytestmark = pytest.mark.integration

HOOKS = {name: f"tests.integration.hook_recorder:{function}" for name, function in (
    ("onObservationStart", "on_observation_start"), ("onObservationEnd", "on_observation_end"),
    ("onReflectionStart", "on_reflection_start"), ("onReflectionEnd", "on_reflection_end"))}


def test_the_fold_agent_calls_each_hook_once_per_cycle_with_its_usage(new_env, tmp_path):
    calls_file = tmp_path / "hooks.jsonl"
    env = new_env(options=om_options(observation={"messageTokens": 300, "bufferTokens": False},
                                     reflection={"observationTokens": 250}, hooks=HOOKS, hookExecution="await"))
    worker = env.start_worker(env={"HOOK_RECORD_FILE": str(calls_file)})

    async def scenario() -> list:
        async with OmClient(env.settings) as client:
            await client.send_messages([message(i, words=40) for i in range(20)])
        return await events(env.settings)

    asyncio.run(scenario())
    deadline = time.monotonic() + 120

    def made() -> list[dict]:
        return [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []

    while True:  # the evidence: every cycle the log started is closed, and an end hook for each
        log = asyncio.run(events(env.settings))
        started = {e.data.cycle_id for e in log if e.type == "data-om-observation-start"}
        ended = [e for e in log if e.type == "data-om-observation-end"]
        closed = {e.data.cycle_id for e in log if e.type in ("data-om-observation-end", "data-om-observation-failed")}
        if ended and started == closed and len([c for c in made() if c["hook"].endswith("End")]) >= len(ended):
            break
        assert worker.proc.poll() is None and time.monotonic() < deadline, (made(), env.logs())
        time.sleep(0.3)
    calls = made()
    reflections = [e for e in ended if e.data.operation_type == "reflection"]
    observations = [e for e in ended if e.data.operation_type == "observation"]
    assert reflections and len(observations) >= 3, [e.type for e in log]
    names = [c["hook"] for c in calls]
    assert names.count("onObservationStart") == names.count("onObservationEnd") == len(observations)
    # A reflection ladder's failed rungs are cycles on the log, not to the hooks.
    assert names.count("onReflectionStart") == names.count("onReflectionEnd") == len(reflections)
    for call in calls:
        assert call["threadId"] == "t1" and call["resourceId"] == "u1" and call["trigger"] == "turn-sync"
        assert call["cycleId"] in started
    ends = [c for c in calls if c["hook"].endswith("End")]
    assert {c["cycleId"] for c in ends if c["hook"] == "onObservationEnd"} == {e.data.cycle_id for e in observations}
    assert all(c["usage"]["totalTokens"] > 0 and "error" not in c for c in ends)
    rungs = len(started) - len(ended)
    print(f"\nhooks: {len(calls)} calls for {len(observations)} observations and {len(reflections)} reflections "
          f"({rungs} failed ladder rungs between)")

