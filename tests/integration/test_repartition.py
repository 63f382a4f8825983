"""`om repartition`: a namespace of 4 partitions grown to 8 without losing a memory (issue 26,
acceptance 3).

Ten threads talk through a worker on 4 partitions, with async buffering and reflection.  Half
way through, `om repartition --to NEW --partitions 8` starts and keeps following the log while
the second half is produced (the cut-over: nothing produced during the copy is lost), then is
stopped with Ctrl-C and run again with `--exit-when-caught-up` (it resumes where it was: nothing
copied twice), and once more from a marker of half way, as after a crash between a batch's
landing and its marker (it finds what landed and copies nothing twice).  A worker on the new namespace, given the same result-signing key, refolds it.
Then:

- every source record is in the new log exactly once, each memory's records in their order, and
  each memory on its own partition of 8 (the memories spread over all 8);
- every memory is equal: its events (log positions aside), its final state and its context window;
- the new worker calls no model: the copied results verify and are folded where the log has
  them, and the jobs it makes again are answered from the copied cache (their answers ignored).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest

from omstream import kafka
from omstream.client import OmClient
from omstream.conversations.files import read_conversation
from omstream.projections.feed import ProjectionFeed
from omstream.repartition import Marker, copied_from, write_marker
from omstream.replay.watch import Watch
from omstream.schemas.messages import Message
from omstream.topics import Topics, memory_partition, partitions_of
from omstream.versions import WorkerStats, stats_path
from tests.integration.conftest import Worker
from tests.integration.options import om_options
from tests.integration.support import Server, final_states, read_all
from tests.integration.test_recovery import comparable
from tests.integration.test_replay import events_by_memory, wait_caught_up, without_positions
from tests.scenarios.test_long_thread import SCENARIO

pytestmark = pytest.mark.integration

OPTIONS = om_options(observation={"messageTokens": 1200}, reflection={"observationTokens": 900})
PER_THREAD, FIRST_HALF = 30, 15
KEY = "the-namespace-result-key"  # test value, not a secret
NOW = datetime(2030, 1, 1, tzinfo=UTC)  # the context windows are compared at one moment


def thread_names() -> list[str]:
    """Ten threads, at least one on each of the 8 new partitions (the memory key decides the
    partition, so the test picks keys that must spread) and two pairs sharing one."""
    names, per = [], Counter[int]()
    for k in range(1000):
        where = memory_partition(f"thread:r{k:03d}".encode(), list(range(8)))
        if per[where] < (2 if where < 2 else 1):
            names.append(f"r{k:03d}")
            per[where] += 1
    assert len(names) == 10
    return names


THREADS = thread_names()


def conversation(thread: str) -> list[Message]:
    base = read_conversation(SCENARIO / "conversation.jsonl")[:PER_THREAD]
    return [m.model_copy(update={"thread_id": thread, "id": f"{thread}-{i}"}) for i, m in enumerate(base)]


async def produce(settings, lo: int, hi: int) -> None:
    async with OmClient(settings) as client:
        await asyncio.gather(*(client.play(conversation(t)[lo:hi]) for t in THREADS))


def om(config, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "omstream.cli", "--config", str(config), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **popen)


async def log_records(settings) -> list:
    return await read_all(settings, Topics(settings.namespace).log, idle=0.3)


async def wait_copied(source, target, timeout: float = 60.0) -> float:
    """Until the target log holds as many copies as the source log has records (evidence:
    end offsets); the seconds it took."""
    started = time.monotonic()
    src, dst = Watch(source), Watch(target)
    await src.start()
    await dst.start()
    try:
        while (await dst.positions()).total < (await src.positions()).total:
            assert time.monotonic() - started < timeout, "the copy did not catch up"
            await asyncio.sleep(0.1)
    finally:
        await src.stop()
        await dst.stop()
    return time.monotonic() - started


def in_order(records) -> dict[bytes, list[bytes]]:
    """Each memory's record values in the order its partition holds them."""
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key].append(r.value)
    return out


async def wait_settled(settings, timeout: float = 60.0) -> None:
    """Until the fold workers have committed the whole log and the model agents apart every job
    (twice in a row: an answer appends to the log)."""
    from aiokafka import TopicPartition

    topics = Topics(settings.namespace)
    tps = [TopicPartition(t, p) for t in (topics.log, topics.jobs) for p in range(settings.partitions)]
    admin, reader = kafka.admin(settings), kafka.reader(settings)
    await admin.start()
    await reader.start()
    try:
        deadline, streak = time.monotonic() + timeout, 0
        while streak < 2:
            assert time.monotonic() < deadline, "the new namespace did not settle"
            ends = await reader.end_offsets(tps)
            fold = await admin.list_consumer_group_offsets(settings.app_id)
            models = await admin.list_consumer_group_offsets(replace(settings, role="models").worker_group)
            done = all((fold if tp.topic == topics.log else models).get(tp) is not None
                       and (fold if tp.topic == topics.log else models)[tp].offset >= ends[tp] for tp in tps)
            streak = streak + 1 if done else 0
            await asyncio.sleep(0.3)
    finally:
        await reader.stop()
        await admin.close()


async def windows(settings) -> dict[str, dict]:
    feed = ProjectionFeed(settings)
    await feed.start()
    try:
        await feed.read_to_end()
    finally:
        await feed.stop()
    return {t: feed.projection.threads[t].snapshot(now=NOW) for t in THREADS}


def test_repartition_4_to_8_keeps_every_memory(new_env):
    started = time.monotonic()
    env = new_env(options=OPTIONS, partitions=4)
    env.start_worker(env={"OM_RESULT_KEY": KEY})  # as a deployment on several machines sets it
    source = env.settings
    target = replace(source, namespace=source.namespace + "-8", partitions=8, data_dir=env.root / "data-8")
    asyncio.run(produce(source, 0, FIRST_HALF))
    new_worker = {"OM_PARTITIONS": "8", "OM_RESULT_KEY": KEY}

    # The cut-over of docs/operations.md.  The copy follows the source, and a fold worker of the new namespace
    # folds the copy as it comes (the copied results end its cycles; no model agent of its own
    # yet), while the second half is produced through the old namespace.
    copy = om(env.config, "repartition", "--to", target.namespace, "--partitions", "8")
    env.workers.append(Worker(replace(target, role="fold"), env.root / "fold-8.log", new_worker))
    asyncio.run(produce(source, FIRST_HALF, PER_THREAD))
    asyncio.run(wait_caught_up(source))
    followed_s = asyncio.run(wait_copied(source, target))
    # Writes have stopped: the copy is stopped and run to the source's end (it resumes).
    copy.send_signal(signal.SIGINT)
    out, err = copy.communicate(timeout=30)
    assert copy.returncode == 130, err[-3000:]
    first = orjson.loads(out[: out.rindex("}") + 1])
    again = om(env.config, "repartition", "--to", target.namespace, "--partitions", "8", "--exit-when-caught-up")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err[-3000:]
    resumed = orjson.loads(out)
    print(f"\nfirst run (followed, Ctrl-C): {first}\nresumed: {resumed}")
    assert resumed["resumed"] and resumed["copied"] == 0 and resumed["skipped"] == 0

    # A copy interrupted after its last batches landed but before it marked them resumes
    # exactly: from a marker of half way, it finds the second halves there and copies nothing.
    old, new = asyncio.run(log_records(source)), asyncio.run(log_records(target))
    ends = {p: 1 + max(r.offset for r in old if r.partition == p) for p in range(4)}
    asyncio.run(write_marker(target, Marker(source.namespace, 8, log={p: end // 2 for p, end in ends.items()})))
    again = om(env.config, "repartition", "--to", target.namespace, "--partitions", "8", "--exit-when-caught-up")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err[-3000:]
    half = orjson.loads(out)
    print(f"resumed from half way: {half}")
    assert (half["copied"], half["skipped"]) == (0, sum(end - end // 2 for end in ends.values()))
    assert len(asyncio.run(log_records(target))) == len(new)
    # Refused, with one line each: a target with records the copy did not make, another count.
    for source_ns, to, count, reason in ((target.namespace, source.namespace, "4", "did not copy"),
                                         (source.namespace, target.namespace, "6", "partitions")):
        refused = om(env.config, "repartition", "--to", to, "--partitions", count, "--exit-when-caught-up",
                     env={**os.environ, "OM_NAMESPACE": source_ns})
        out, err = refused.communicate(timeout=60)
        assert refused.returncode == 1 and err.startswith("om repartition: ") and reason in err, err

    # Every record once, unchanged, in its memory's order, on its memory's new partition.
    origins = Counter(copied_from(r.headers) for r in new)
    assert len(new) == len(old) == first["copied"] == first["total"] and None not in origins
    assert set(origins) == {(r.partition, r.offset) for r in old} and max(origins.values()) == 1
    by_origin = {(r.partition, r.offset): r for r in old}
    for r in new:
        was = by_origin[copied_from(r.headers)]
        assert (r.key, r.value, r.timestamp) == (was.key, was.value, was.timestamp)
        assert r.partition == memory_partition(r.key, list(range(8)))
    assert in_order(new) == in_order(old)
    assert {r.partition for r in new} == set(range(8))
    results = sum(b'"model-result"' in r.value for r in old)

    # The switch: the new namespace's model agents start (they answer its jobs from the copied
    # cache, answers the fold ignores: the copied ones came first).  And the new namespace refuses
    # a worker whose key would refuse the copied results.
    switched = time.monotonic()
    env.workers.append(Worker(replace(target, role="models"), env.root / "models-8.log", new_worker))
    wrong = Worker(replace(target, role="fold", data_dir=env.root / "data-wrong"), env.root / "wrong.log",
                   {**new_worker, "OM_RESULT_KEY": "another-key"})
    asyncio.run(wait_settled(target))
    settled_s = time.monotonic() - switched
    assert wrong.proc.wait(timeout=60) != 0 and "OM_RESULT_KEY" in wrong.tail()

    live_events, new_events = asyncio.run(events_by_memory(source)), asyncio.run(events_by_memory(target))
    assert set(new_events) == {f"thread:{t}" for t in THREADS}
    for memory, events in live_events.items():
        assert without_positions(new_events[memory]) == without_positions(events), memory
    accepted = Counter(e["data"]["message"]["id"] for evs in new_events.values() for e in evs
                       if e["type"] == "om-message-accepted")
    assert len(accepted) == len(THREADS) * PER_THREAD and max(accepted.values()) == 1
    kinds = Counter(e["type"] for evs in new_events.values() for e in evs)
    assert kinds["data-om-activation"] and kinds["data-om-buffering-end"], kinds
    assert any(e["type"] == "data-om-observation-end" and e["data"]["operationType"] == "reflection"
               for evs in new_events.values() for e in evs), "reflection must occur"
    states_old, states_new = asyncio.run(final_states(source)), asyncio.run(final_states(target))
    assert set(states_new) == set(states_old)
    for memory in states_old:
        assert comparable(states_new[memory]) == comparable(states_old[memory]), memory
    before = asyncio.run(windows(source))
    assert asyncio.run(windows(target)) == before
    events_8 = asyncio.run(read_all(target, Topics(target.namespace).events, idle=0.3))
    assert {r.partition for r in events_8} == set(range(8))
    stats = WorkerStats.load(stats_path(replace(target, role="models"))).summary()
    assert stats.model_calls == 0 and stats.cache_hits > 0, stats

    # The read side of the new namespace serves the same context windows.
    server = Server(target, env.root / "web-8.log")
    try:
        asyncio.run(server.ready())
        for thread in THREADS:
            status, served = asyncio.run(server.get(f"/threads/{thread}/context"))
            assert status == 200 and served["observations"] == before[thread]["observations"], thread
            assert [m["id"] for m in served["messages"]] == [m["id"] for m in before[thread]["messages"]]
    finally:
        server.stop()

    print(f"4 -> 8 partitions: {len(old)} records copied ({results} model results), "
          f"{first['cacheCopied']} cache entries; copy {first['recordsPerS']} records/s, caught up with "
          f"the source {followed_s:.1f} s after its last record was folded; after the switch the new "
          f"namespace settled in {settled_s:.1f} s with {stats.model_calls} model calls ({stats.cache_hits} "
          f"cache hits); {len(THREADS)} memories equal (events {sum(kinds.values())}: {dict(kinds)}); "
          f"{time.monotonic() - started:.0f} s in all")


async def produce_raw(settings, records: int, keys: int) -> None:
    """Records straight to the input log (the copy moves bytes: no worker needs to read them)."""
    producer = kafka.producer(settings, linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    try:
        sent = [await producer.send(Topics(settings.namespace).log, b"%d:%d" % (i % keys, i),
                                    key=b"thread:k%d" % (i % keys)) for i in range(records)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def wait_records(settings, at_least: int, timeout: float = 60.0) -> int:
    """Until the namespace's log (made by the copy: it may not exist yet) holds `at_least`."""
    from aiokafka import TopicPartition

    log = Topics(settings.namespace).log
    reader = kafka.reader(settings)
    await reader.start()
    try:
        deadline, total = time.monotonic() + timeout, 0
        while total < at_least:
            assert time.monotonic() < deadline, f"{total} records after {timeout} s"
            parts = (await partitions_of(settings.bootstrap, [log])).get(log, [])
            ends = await reader.end_offsets([TopicPartition(log, p) for p in parts]) if parts else {}
            total = sum(ends.values())
            await asyncio.sleep(0.02)
        return total
    finally:
        await reader.stop()


def test_a_copy_killed_mid_way_resumes_with_each_record_once(new_env):
    """SIGKILL of the copy's process while batches are in flight, then the same command: every
    record once, each memory's in order."""
    env = new_env(partitions=4)
    source = env.settings
    target = replace(source, namespace=source.namespace + "-8", partitions=8)
    asyncio.run(produce_raw(source, 80_000, 500))
    copy = om(env.config, "repartition", "--to", target.namespace, "--partitions", "8", "--exit-when-caught-up")
    at_kill = asyncio.run(wait_records(target, 30_000))  # past the first marker (20,000 sent)
    os.killpg(copy.pid, signal.SIGKILL)
    copy.wait()
    again = om(env.config, "repartition", "--to", target.namespace, "--partitions", "8", "--exit-when-caught-up")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-3000:]
    resumed = orjson.loads(out)
    old, new = asyncio.run(log_records(source)), asyncio.run(log_records(target))
    print(f"\nkilled with {at_kill} of {len(old)} records in the target; resumed: {resumed}")
    assert resumed["resumed"] and 0 < resumed["copied"] < len(old)
    assert len(new) == len(old) and Counter(copied_from(r.headers) for r in new).most_common(1)[0][1] == 1
    assert in_order(new) == in_order(old)
