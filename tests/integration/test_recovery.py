"""A worker SIGKILLed mid-stream refolds to exactly what an uninterrupted worker makes.

Two namespaces get the same input: one worker runs undisturbed, the other is killed (its whole
process group) as soon as the event topic shows that it is half way through its cycles, and is
restarted.  The crashed namespace must end with the same context windows, the same final state
and the same events: every re-sent copy identical, and id for id equal to the uninterrupted
run's, even where the crash made a model agent answer a job twice (the fold recognises the second
answer of a cycle and changes nothing).
"""

import asyncio
import time
from collections import Counter

import orjson
import pytest

from omstream.client import OmClient
from omstream.engine.rules.tokens import get_counter
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import (
    EventWatcher,
    decided,
    decided_state,
    events,
    expected_cycles,
    final_states,
    read_all,
    settled_feed,
)

pytestmark = pytest.mark.integration

THREADS = ("crash-a", "crash-b")
BEFORE_KILL = 60  # messages per thread sent before the kill; the rest while the worker is down

OPTIONS = om_options(observation={"messageTokens": 1000, "bufferTokens": False})


def conversation():
    return {t: [message(i, thread=t, words=30 + (i * 17) % 80) for i in range(100)] for t in THREADS}


def comparable(state: dict) -> dict:
    # Offsets name positions in this run's topics and the clock includes the model call's
    # measured duration; everything the memory *is* must be equal.
    return decided_state({k: v for k, v in state.items() if k not in ("offsets", "clock")})


#: Fields that carry a model call's measured (wall-clock) duration: the cycle's end is its start
#: plus the call's own duration (engine.cycles.jobs.outcome_time), so two runs differ there and only there.
TIMED = ("eventTime", "completedAt", "durationMs", "failedAt")


def content(event) -> dict:
    return event.model_dump(mode="json", by_alias=True)


def timeless(event) -> dict:
    body = content(event)
    data = {k: v for k, v in body.get("data", {}).items() if k not in TIMED}
    # inputOffset/inputLast name a position in this run's log (model results land where they land).
    # seq: the notices of held inputs take seqs where the models' timing put them (support.NOTICES);
    # the event's id counts the decided events only, so it says where the event stands.
    return {**{k: v for k, v in body.items() if k not in (*TIMED, "inputOffset", "inputLast", "seq")}, "data": data}


async def send(env, msgs, lo: int, hi: int) -> None:
    async with OmClient(env.settings) as client:
        for i in range(lo, hi):
            await client.send_messages([msgs[t][i] for t in THREADS])


async def calm_run(env, msgs) -> None:
    env.start_worker()
    await send(env, msgs, 0, 100)


async def crashed_run(env, msgs, kill_at: int) -> dict:
    worker = env.start_worker()
    async with EventWatcher(env.settings) as watch:
        await send(env, msgs, 0, BEFORE_KILL)
        # Evidence, not a sleep: the worker has started `kill_at` cycles (and is folding on).
        seen = await watch.wait_for(
            lambda evs: sum(e.type == "data-om-observation-start" for e in evs) >= kill_at, timeout=60)
        worker.kill()
        seen_at_kill = len(seen)
    await send(env, msgs, BEFORE_KILL, 100)  # while no worker runs: the log keeps them
    at_kill = await events(env.settings)  # everything the killed worker had sent
    env.start_worker()
    return {"watched": seen_at_kill, "log": at_kill}


def test_sigkill_mid_stream_refolds_to_the_uninterrupted_run(new_env):
    started_at = time.monotonic()
    msgs = conversation()
    expected = {t: expected_cycles(ms, get_counter("tokenx"), 1000) for t, ms in msgs.items()}
    early = {t: expected_cycles(ms[:BEFORE_KILL], get_counter("tokenx"), 1000) for t, ms in msgs.items()}
    kill_at = max(1, sum(early.values()) // 2)
    calm, crashed = new_env(options=OPTIONS), new_env(options=OPTIONS)

    async def scenario():
        _, kill = await asyncio.gather(calm_run(calm, msgs), crashed_run(crashed, msgs, kill_at))
        kill["restarted"] = time.monotonic() - started_at
        want = {t: (100, expected[t]) for t in THREADS}
        feeds = await asyncio.gather(settled_feed(calm.settings, want, timeout=90),
                                     settled_feed(crashed.settings, want, timeout=90))
        states = await asyncio.gather(final_states(calm.settings), final_states(crashed.settings))
        logs = await asyncio.gather(events(calm.settings), events(crashed.settings))
        log = await read_all(crashed.settings, f"{crashed.settings.namespace}.log", idle=0.3)
        answers = [orjson.loads(r.value)["cycleId"] for r in log if b'"model-result"' in r.value]
        return kill, feeds, states, logs, answers

    kill, (feed_a, feed_b), (states_a, states_b), (log_a, log_b), answers = asyncio.run(scenario())

    # The kill landed mid-stream: the killed worker had sent some of the events, not all.
    ids_at_kill = {e.event_id for e in kill["log"]}
    ids_b = {e.event_id for e in log_b}
    assert kill["watched"] > 0 and 0 < len(ids_at_kill) < len(ids_b), crashed.logs()
    assert ids_at_kill <= ids_b

    for thread in THREADS:
        a, b = feed_a.projection.threads[thread], feed_b.projection.threads[thread]
        assert a.cycles == b.cycles == expected[thread], crashed.logs()
        snap_a, snap_b = a.snapshot(), b.snapshot()
        for part in ("observations", "observedMessageIds", "messages", "chat"):
            assert snap_a[part] == snap_b[part], part
        key = f"thread:{thread}"
        assert comparable(states_a[key]) == comparable(states_b[key])
        assert len(states_b[key]["seen"]) == 100

    # A re-sent event is the same event: every copy of an id has the same content.
    copies = Counter(e.event_id for e in log_b)
    by_id: dict[str, dict] = {}
    for e in log_b:
        assert by_id.setdefault(e.event_id, content(e)) == content(e), f"two contents for {e.event_id}"
    log_a, log_b = decided(log_a), decided(log_b)
    calm_once = {e.event_id: e for e in log_a}
    assert len(calm_once) == len(log_a), "the uninterrupted run sent an event twice"
    assert not any(e.type in ("om-result-ignored", "data-om-observation-failed") for e in log_a)
    crashed_once = {e.event_id: e for e in log_b}

    # Id for id, each event is the uninterrupted run's event with that id (up to the model calls'
    # measured durations, TIMED), though jobs whose answer was sent but whose offset the model
    # agent had not committed yet ran again after the restart and answered twice.
    assert set(crashed_once) == set(calm_once)
    for event_id, e in crashed_once.items():
        assert timeless(e) == timeless(calm_once[event_id]), e
    duplicates = sum(n - 1 for n in Counter(answers).values())

    resent = sum(n - 1 for n in copies.values())
    print(f"\nkill after {kill_at} cycle starts ({kill['watched']} events watched); the killed "
          f"worker had sent {len(ids_at_kill)} of {len(ids_b)} events; {resent} events re-sent "
          f"after the restart ({sum(1 for n in copies.values() if n > 1)} ids), all identical; "
          f"{duplicates} jobs answered twice, every event id equal to the uninterrupted run's; "
          f"restarted at {kill['restarted']:.1f}s, done in {time.monotonic() - started_at:.1f}s")
