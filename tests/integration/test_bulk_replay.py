"""A settled replay at bulk speed (`omstream.replay.bulk`) against the worker's settled replay.

History: twelve threads talk (buffering and reflection happen), one thread is deleted half way
through its conversation and goes on talking, and a record no fold can read sits among them.
Then `om replay --as bulk` folds it in-process from a cold cache while messages keep arriving
(to old threads and a new one), before and after the end offsets the bulk fold read, and its
worker takes over at those offsets (this found a stall in the worker's consumer, in 2 of 4
runs: a fetch from the committed offset, dropped while the partitions were being sought, was
never read again; see `WorkerConsumer.perform_seek`).  Then `om replay --as ref --no-bulk` folds
the same log through its worker alone.  The two versions must be equal event for event (envelope positions
aside: an answer's events carry where it was folded), every message accepted once, and their
final states equal (positions aside); the reference makes no model call (the bulk fold cached
every answer, signed as the model agent signs them).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest

from omstream.client import OmClient
from omstream.replay.watch import Watch
from omstream.schemas.control import ThreadDeleted
from omstream.schemas.messages import Message
from omstream.topics import Topics
from tests.integration.options import om_options
from tests.integration.support import final_states
from tests.integration.test_replay import (
    conversation,
    distinct,
    events_by_memory,
    first_difference,
    run_replay,
    without_positions,
)

pytestmark = pytest.mark.integration

THREADS = [f"b{k:02d}" for k in range(12)]
DELETED = "bdel"


async def history(settings) -> None:
    async with OmClient(settings) as client:
        await asyncio.gather(*(client.play(conversation(t)[:30]) for t in THREADS))
        talk = conversation(DELETED)
        await client.play(talk[:16])
        await client.send_control(ThreadDeleted(thread_id=DELETED, at=talk[15].created_at))
        await client.play(talk[16:30])
        producer = client._producer
        assert producer is not None
        await producer.send_and_wait(Topics.of(settings).log, b"{not json", key=b"thread:b00")


async def talk_during(settings, version) -> list[tuple[str, int, int]]:
    """Messages to old threads and a new one until the version's group has committed (the bulk
    fold is done), and a few after; each message's id and position."""
    sent: list[tuple[str, int, int]] = []
    watch = Watch(version)
    committed_at: int | None = None
    async with OmClient(settings) as client:
        for i in range(2000):
            thread = THREADS[i % 3] if i % 2 else "during"
            m = Message(id=f"during-{i}", thread_id=thread, role="user", content=f"note {i} for {thread}",
                        created_at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
            position = await client.send_message(m)
            sent.append((m.id, position.partition, position.offset))
            if committed_at is None and i % 5 == 0:
                if (await watch_positions(watch)).folded > 0:
                    committed_at = i
            if committed_at is not None and i >= committed_at + 6:
                break
            await asyncio.sleep(0.05)
    await watch.stop()
    assert committed_at is not None, "the bulk fold never committed"
    return sent


async def positions(version) -> tuple:
    """The version's positions, its group's committed offsets and the ends (what a stall shows)."""
    watch = Watch(version)
    await watch.start()
    try:
        assert watch._admin is not None and watch._consumer is not None
        return (await watch.positions(), await watch._admin.list_consumer_group_offsets(version.app_id),
                await watch._consumer.end_offsets(watch._tps))
    finally:
        await watch.stop()


async def watch_positions(watch: Watch):
    if watch._consumer is None:
        await watch.start()
    return await watch.positions()


def test_bulk_replay_equals_the_worker_replay_and_hands_over(new_env):
    env = new_env(options=om_options(observation={"messageTokens": 800}, reflection={"observationTokens": 900}))
    settings = env.settings
    asyncio.run(history(settings))

    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "omstream.cli", "--config", str(env.config), "replay",
                             "--as", "bulk", "--exit-when-caught-up"], stdout=subprocess.PIPE,
                            stderr=(env.root / "bulk.err").open("w"), text=True)
    try:
        during = asyncio.run(talk_during(settings, replace(settings, version="bulk")))
        try:
            out, _ = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            print(f"not caught up: {asyncio.run(positions(replace(settings, version='bulk')))}")
            raise
    finally:
        proc.kill()
    assert proc.returncode == 0, (env.root / "bulk.err").read_text()[-3000:]
    bulk = orjson.loads(out)
    ends = {int(p): o for p, o in bulk["bulk"]["ends"].items()}
    folded_in_bulk = [m for m, p, o in during if o < ends[p]]
    after_bulk = [m for m, p, o in during if o >= ends[p]]
    print(f"bulk replay in {time.monotonic() - started:.1f} s: {bulk}")
    print(f"messages while it ran: {len(during)}, {len(folded_in_bulk)} before its end offsets, "
          f"{len(after_bulk)} after (folded by the worker that took over)")
    assert bulk["foldMode"] == "settled" and bulk["modelCalls"] > 0
    assert folded_in_bulk and after_bulk

    ref = run_replay(env.config, "ref", "--no-bulk")
    print(f"worker replay: {ref}")
    assert "bulk" not in ref and ref["modelCalls"] == 0
    assert ref["cacheHits"] == bulk["modelCalls"] + bulk["cacheHits"]  # the same requests

    got = asyncio.run(events_by_memory(replace(settings, version="bulk")))
    want = asyncio.run(events_by_memory(replace(settings, version="ref")))
    assert set(got) == set(want) == {f"thread:{t}" for t in [*THREADS, DELETED, "during"]}
    compared = 0
    for key in want:
        assert len(distinct(got[key])) == len(got[key]), f"{key}: an event written twice"
        a, b = without_positions(got[key]), without_positions(want[key])
        assert a == b, f"{key}: {first_difference(a, b)}"
        compared += len(a)
    accepted = Counter(e["data"]["message"]["id"] for evs in got.values() for e in evs
                       if e["type"] == "om-message-accepted")
    assert all(accepted[m] == 1 for m, _, _ in during), "a message sent during the replay lost or doubled"
    kinds = Counter(e["type"] for evs in got.values() for e in evs)
    print(f"{compared} events equal, record by record; {dict(sorted(kinds.items()))}")
    assert kinds["data-om-activation"] and kinds["om-memory-deleted"] == 1

    def without_offsets(states: dict[str, dict]) -> dict[str, dict]:
        return {k: {f: v for f, v in s.items() if f != "offsets"} for k, s in states.items()}

    assert without_offsets(asyncio.run(final_states(replace(settings, version="bulk")))) == \
        without_offsets(asyncio.run(final_states(replace(settings, version="ref"))))
