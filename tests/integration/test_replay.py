"""`om replay` on a history produced through the broker (issue 11, acceptance 1-3).

Ten threads talk at once, with async buffering and reflection, so the live version applies
many background results after later inputs of their memory (the log's order, not a settled
one).  Then:

1. a replay under the live configuration follows the log: zero model calls (every job it makes
   is a cache hit whose answer the log already holds), and every memory's events and final
   state equal the live version's;
2. a replay with a smaller `messageTokens` is settled (folded at bulk speed,
   `omstream.replay.bulk`): its thresholds are the new ones, and the model is called exactly
   for the requests the cache does not hold (the test computes both from `om simulate` of each
   thread's history);
3. each thread's replayed events equal `om simulate` on `om export` of that thread under the
   same configuration (envelope positions aside: the simulator has no log offsets);
4. a replay through its worker (`--no-bulk`) killed with SIGKILL at about half and run again
   ends with the same events;
5. while it runs, the live version keeps folding new messages and answering context requests.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest

from omstream.client import OmClient
from omstream.conversations.export import export
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import simulate
from omstream.replay.watch import Watch
from omstream.schemas.messages import Message
from omstream.settings import load_settings
from omstream.topics import Topics, partitions_of
from tests.integration.options import om_options
from tests.integration.support import Server, final_states, read_all
from tests.scenarios.test_long_thread import SCENARIO

# The last resort only (the default is 300 s): each wait below fails on its own once the replay
# stops moving, and a loaded 2-core machine has taken over 300 s for the whole test.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def options(message_tokens: int) -> str:
    return om_options(observation={"messageTokens": message_tokens}, reflection={"observationTokens": 900})
LIVE_TOKENS, NEW_TOKENS = 1200, 800
THREADS = [f"t{k:02d}" for k in range(10)]
PER_THREAD = 40


def conversation(thread: str) -> list[Message]:
    base = read_conversation(SCENARIO / "conversation.jsonl")[:PER_THREAD]
    return [m.model_copy(update={"thread_id": thread, "id": f"{thread}-{i}"}) for i, m in enumerate(base)]


async def wait_caught_up(settings, timeout: float = 180.0) -> None:
    """Until the version has folded the whole log and answered every job (twice in a row)."""
    watch = Watch(settings)
    await watch.start()
    try:
        deadline, streak = time.monotonic() + timeout, 0
        while streak < 2:
            assert time.monotonic() < deadline, "the version did not catch up"
            streak = streak + 1 if (await watch.positions()).caught_up else 0
            await asyncio.sleep(0.7)
    finally:
        await watch.stop()


def run_replay(config, name: str, *options: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "omstream.cli", "--config", str(config), "replay",
                           "--as", name, "--exit-when-caught-up", *options], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return orjson.loads(done.stdout)


async def events_by_memory(settings) -> dict[str, list[dict]]:
    """Each memory's events as the wire has them, in order, by memory key."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in await read_all(settings, Topics.of(settings).events, idle=0.3):
        out[r.key.decode()].append(orjson.loads(r.value))
    return out


def without_positions(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in ("inputOffset", "inputLast")} for e in events]


def distinct(events: list[dict]) -> list[dict]:
    """Each event once: a worker killed between a batch's sends and its state sends that batch's
    events again when it refolds, under the same ids (readers drop them by id)."""
    seen: set[str] = set()
    return [e for e in events if not (e["eventId"] in seen or seen.add(e["eventId"]))]


def first_difference(a: list[dict], b: list[dict]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"event {i}: {x} != {y}"
    return f"lengths {len(a)} != {len(b)}"


async def exported(settings, thread: str, path) -> list:
    """`om export --thread T` of the version, read back as `om simulate` reads it."""
    with open(path, "wb") as out:
        await export(settings, thread=thread, out=out)
    return read_conversation(path)


def test_replay_follows_the_live_memory_and_settles_a_new_configuration(new_env):
    env = new_env(options=options(LIVE_TOKENS))
    env.start_worker()
    live = env.settings

    async def produce() -> None:
        async with OmClient(live) as client:
            await asyncio.gather(*(client.play(conversation(t)) for t in THREADS))

    asyncio.run(produce())
    asyncio.run(wait_caught_up(live))
    live_events = asyncio.run(events_by_memory(live))
    kinds = defaultdict(int)
    for evs in live_events.values():
        for e in evs:
            kinds[e["type"]] += 1
    live_jobs = asyncio.run(read_all(live, Topics.of(live).jobs, idle=0.3))
    print(f"live: {len(live_jobs)} jobs, events {dict(sorted(kinds.items()))}")
    assert kinds["data-om-buffering-end"] and kinds["data-om-activation"], "buffering must occur"
    assert any(e["type"] == "data-om-observation-end" and e["data"]["operationType"] == "reflection"
               for evs in live_events.values() for e in evs), "reflection must occur"

    # 1. The live configuration: follows the log, costs nothing, ends equal.
    same = run_replay(env.config, "same")
    print(f"replay under the live configuration: {same}")
    assert same["foldMode"] == "follow"
    assert same["modelCalls"] == 0 and same["cacheHits"] == len(live_jobs)
    replayed = replace(live, version="same")
    assert asyncio.run(events_by_memory(replayed)) == live_events
    assert asyncio.run(final_states(replayed)) == asyncio.run(final_states(live))

    # 2 and 3. A smaller messageTokens: settled, the cache pays for what it knows.
    new_config = env.root / "new.toml"
    new_config.write_text(env.config.read_text().replace(options(LIVE_TOKENS), options(NEW_TOKENS)))
    cached = {r.key.decode() for r in asyncio.run(read_all(live, Topics.of(live).cache, idle=0.3))}
    smaller = run_replay(new_config, "smaller")
    print(f"replay with messageTokens {NEW_TOKENS}: {smaller}")
    assert smaller["foldMode"] == "settled"

    new = replace(load_settings(new_config), version="smaller", fold_mode="settled")
    replay_events = asyncio.run(events_by_memory(new))
    requests: list[str] = []
    for thread in THREADS:
        history = asyncio.run(exported(new, thread, env.root / f"{thread}.jsonl"))
        sim = asyncio.run(simulate(history, new.om))
        expected = [orjson.loads(orjson.dumps(e.wire())) for e in sim.events]
        assert without_positions(replay_events[f"thread:{thread}"]) == expected, thread
        requests += [job.request_hash for job in sim.jobs]
    thresholds = {e["data"]["windows"]["active"]["messages"]["threshold"]
                  for evs in replay_events.values() for e in evs if e["type"] == "data-om-status"}
    assert NEW_TOKENS in thresholds and LIVE_TOKENS not in thresholds
    expected_calls = len(set(requests) - cached)
    expected_hits = len(requests) - expected_calls
    print(f"requests {len(requests)}: calls expected {expected_calls}, hits expected {expected_hits}")
    assert (smaller["modelCalls"], smaller["cacheHits"]) == (expected_calls, expected_hits)
    assert expected_hits > 0 and expected_calls > 0

    # 4 and 5: a replay killed at about half and run again ends as the uninterrupted one did,
    # and the live version keeps folding and answering meanwhile.
    again = replace(new, version="again")
    before_during = datetime.now(UTC)
    server = Server(live, env.root / "web.log")
    try:
        asyncio.run(server.ready())
        # Through the worker (`--no-bulk`): a bulk fold makes no jobs to watch half way.
        proc = subprocess.Popen([sys.executable, "-m", "omstream.cli", "--config", str(new_config), "replay",
                                 "--as", "again", "--exit-when-caught-up", "--no-bulk"], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        during = asyncio.run(live_while_halfway(live, again, server, len(requests)))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        server.stop()
    print(f"while the replay ran: {during}")
    resumed = run_replay(new_config, "again", "--no-bulk")
    print(f"resumed after SIGKILL at {during['jobsDone']} of {len(requests)} jobs: {resumed}")
    assert 0 < during["jobsDone"] < len(requests)
    again_events = asyncio.run(events_by_memory(again))
    for thread in THREADS:
        key = f"thread:{thread}"
        got, want = without_positions(distinct(again_events[key])), without_positions(replay_events[key])
        assert got == want, f"{thread}: {first_difference(got, want)}"

    # A version of some threads, and one of the log from a time on.
    two = run_replay(new_config, "two", "--threads", "t00,t01")
    two_events = asyncio.run(events_by_memory(replace(new, version="two")))
    assert set(two_events) == {"thread:t00", "thread:t01"} and two["memories"] == 2
    for key in two_events:
        assert without_positions(two_events[key]) == without_positions(replay_events[key])
    late = run_replay(new_config, "late", "--from", before_during.isoformat())
    late_events = asyncio.run(events_by_memory(replace(new, version="late")))
    assert set(late_events) == {"thread:during"} and late["memories"] == 1
    accepted = [e for e in late_events["thread:during"] if e["type"] == "om-message-accepted"]
    assert len(accepted) == during["liveAnswers"]
    print(f"--threads t00,t01: {two['memories']} memories; --from: {len(accepted)} messages of thread 'during'")

    # The other version commands, on the versions this test made.
    listed = {row["version"]: row for row in orjson.loads(om(env.config, "versions", "--json").stdout)}
    print(f"om versions: {listed}")
    assert set(listed) == {"live", "same", "smaller", "again", "two", "late"}
    assert (listed["same"]["foldMode"], listed["same"]["modelCalls"], listed["same"]["cacheHits"]) == \
        ("follow", 0, len(live_jobs))
    assert listed["smaller"]["foldMode"] == "settled" and listed["same"]["digest"] == listed["live"]["digest"]
    assert om(env.config, "diff", "live", "same", "--thread", "t00").returncode == 0
    differ = om(env.config, "diff", "live", "smaller", "--thread", "t00")
    assert differ.returncode == 1 and "tokens" in differ.stdout
    assert om(env.config, "switch", "smaller").returncode == 0
    assert om(env.config, "drop", "smaller", "--yes").returncode == 1  # the default: refused
    server = Server(live, env.root / "web-default.log")  # no version asked: serves the default
    try:
        asyncio.run(server.ready())
        status, served = asyncio.run(server.get("/threads/t00/context"))
        asked = asyncio.run(server.get("/threads/t00/context", version="same"))
        unknown = asyncio.run(server.get("/threads/t00/context", version="nothing"))[0]
    finally:
        server.stop()
    assert status == 200 and served["observations"] == asyncio.run(observations(new, "t00"))
    assert asked[0] == 200 and asked[1]["observations"] == asyncio.run(observations(replayed, "t00"))
    assert asked[1]["observations"] != served["observations"] and unknown == 404
    assert om(env.config, "drop", "again", "--yes").returncode == 0
    assert not asyncio.run(partitions_of(live.bootstrap, [Topics.of(again).events])).get(Topics.of(again).events)
    assert "again" not in {row["version"] for row in orjson.loads(om(env.config, "versions", "--json").stdout)}


async def live_while_halfway(live, version, server, jobs: int) -> dict:
    """Talk to the live version while the replay folds, until the replay has answered about
    half of its `jobs` (a settled replay's work is its chains of model round trips: its log
    positions run ahead, held); then where the replay was when it was killed."""
    answered, watch = 0, None
    deadline = time.monotonic() + 120
    async with OmClient(live) as client:
        try:
            while True:
                position = await client.send_message(Message(
                    id=f"during-{answered}", thread_id="during", role="user", content=f"note {answered}",
                    created_at="2026-12-01T10:00:00Z"))
                context = await client.context("during", after=position, base_url=server.url)
                assert context is not None and not context["stale"]
                assert f"during-{answered}" in {m["id"] for m in context["messages"]}
                answered += 1
                if watch is None and (await partitions_of(live.bootstrap, [Topics.of(version).jobs])).get(
                        Topics.of(version).jobs):
                    watch = Watch(version)  # the replay has made its topics
                    await watch.start()
                p = await watch.positions() if watch is not None else None
                if p is not None and p.jobs_done >= jobs // 2:
                    return {"liveAnswers": answered, "jobsDone": p.jobs_done, "jobs": jobs,
                            "folded": p.folded, "total": p.total}
                assert time.monotonic() < deadline, "the replay did not get half way"
                await asyncio.sleep(0.2)
        finally:
            if watch is not None:
                await watch.stop()


def om(config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omstream.cli", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=120)


async def observations(settings, thread: str) -> str:
    from omstream.projections.feed import ProjectionFeed

    feed = ProjectionFeed(settings)
    await feed.start()
    try:
        await feed.read_to_end()
    finally:
        await feed.stop()
    return feed.projection.threads[thread].observations
