"""The fold agent's read-ahead (`omstream.worker.backlog`): per-memory order, fair shares, bounds."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.worker.backlog import Backlog, Intake, lanes

# (key, size) of each record in arrival order; the record itself is its arrival index.
arrivals = st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 50)), max_size=200)


def filled(items, max_items=10_000, max_bytes=10**9) -> Backlog:
    backlog: Backlog = Backlog(max_items, max_bytes)
    for index, (key, size) in enumerate(items):
        backlog.add(key, size, index)
    return backlog


@settings(max_examples=200, deadline=None)
@given(arrivals, st.integers(1, 40), st.integers(1, 10))
def test_every_record_taken_once_each_memory_in_order_within_the_caps(items, total, per_memory):
    backlog = filled(items)
    key_of = {index: key for index, (key, _) in enumerate(items)}
    taken: list[int] = []
    while backlog:
        batch = backlog.take(total, per_memory)
        assert 0 < len(batch) <= total
        per_key: dict[str, int] = defaultdict(int)
        for index in batch:
            per_key[key_of[index]] += 1
        assert max(per_key.values()) <= per_memory
        taken += batch
    assert sorted(taken) == list(range(len(items)))
    for key in set(key_of.values()):
        mine = [index for index in taken if key_of[index] == key]
        assert mine == sorted(mine), key


def test_a_busy_memory_gets_its_share_and_the_others_are_not_behind_it():
    backlog = filled([("busy", 1)] * 1000 + [("quiet", 1), ("other", 1)])
    first = backlog.take(500, 32)
    assert first.count(1000) == 1 and first.count(1001) == 1  # the quiet ones, in the first batch
    assert len(first) == 34 and len(backlog) == 968


def test_a_batch_cut_short_serves_the_skipped_memories_first_next_time():
    backlog = filled([(key, 1) for key in "abc" for _ in range(5)])
    assert backlog.take(6, 3) == [0, 1, 2, 5, 6, 7]  # "a" and "b"; "c" skipped
    assert backlog.take(3, 3) == [10, 11, 12]  # "c" first


@given(arrivals)
def test_full_counts_records_and_bytes(items):
    backlog = filled(items, max_items=50, max_bytes=500)
    assert backlog.full == (len(items) >= 50 or sum(size for _, size in items) >= 500)
    while backlog:
        backlog.take(7, 3)
    assert not backlog.full and len(backlog) == 0


@given(arrivals, st.sets(st.integers(0, 199)))
def test_drop_forgets_exactly_the_stale_records_and_keeps_the_order_of_the_rest(items, stale):
    backlog = filled(items)
    dropped = backlog.drop(lambda index: index in stale)
    assert dropped == len([i for i in range(len(items)) if i in stale])
    rest: list[int] = []
    while backlog:
        rest += backlog.take(1000, 1000)
    assert sorted(rest) == [i for i in range(len(items)) if i not in stale]
    assert backlog.full is False and len(backlog) == 0


@dataclass
class Record:
    """What `Intake` reads of a consumer message."""

    key: bytes
    offset: int
    partition: int = 0
    value: bytes = b"x"
    generation_id: int = 1


def test_intake_hands_over_fair_batches_in_log_order():
    async def scenario() -> list[list[int]]:
        intake = Intake(Backlog(100, 10**6))
        await intake.put([Record(b"busy", offset) for offset in range(10)] + [Record(b"quiet", 10)])
        batches = intake.batches(100, 4, 0.0, lambda: 1)
        return [[r.offset for r in await anext(batches)] for _ in range(3)]

    assert asyncio.run(scenario()) == [[0, 1, 2, 3, 10], [4, 5, 6, 7], [8, 9]]


def test_intake_put_waits_while_full_until_a_batch_is_taken():
    async def scenario() -> tuple[bool, bool]:
        intake = Intake(Backlog(3, 10**6))
        put = asyncio.create_task(intake.put([Record(b"a", offset) for offset in range(5)]))
        await asyncio.sleep(0.01)
        waited = not put.done()
        await anext(intake.batches(2, 2, 0.0, lambda: 1))  # 3 left: still full
        await asyncio.sleep(0.01)
        still = not put.done()
        await anext(intake.batches(2, 2, 0.0, lambda: 1))  # 1 left
        await asyncio.wait_for(put, 1)
        return waited, still

    assert asyncio.run(scenario()) == (True, True)


def test_intake_drops_what_was_read_before_a_rebalance():
    async def scenario() -> list[int]:
        generation = [1]
        intake = Intake(Backlog(100, 10**6))
        first = asyncio.ensure_future(anext(intake.batches(100, 100, 0.0, lambda: generation[0])))
        await asyncio.sleep(0)  # the fold agent waits for records of generation 1
        await intake.put([Record(b"a", 0), Record(b"b", 1)])
        generation[0] = 2  # a rebalance: read again from the committed offsets
        await intake.put([Record(b"a", 0, generation_id=2)])
        return [r.offset for r in await first]

    assert asyncio.run(scenario()) == [0]


def test_lanes_put_the_busy_memories_after_the_others_each_memory_whole():
    batch = [Record(b"busy", 0), Record(b"a", 1), Record(b"busy", 2), Record(b"b", 3)]
    assert [[r.offset for r in part] for part in lanes(batch, {b"busy"})] == [[1, 3], [0, 2]]
    assert lanes(batch, set()) == [batch]
    assert lanes([Record(b"busy", 0)], {b"busy"}) == [[Record(b"busy", 0)]]
    assert lanes([], {b"busy"}) == []


def test_a_busy_memory_waits_out_its_share_while_others_have_records_and_not_otherwise():
    async def scenario() -> tuple[list[list[bytes]], float]:
        loop = asyncio.get_running_loop()
        intake = Intake(Backlog(10_000, 10**9))
        intake.busy.add(b"busy")
        await intake.put([Record(b"busy", i) for i in range(100)])
        batches = intake.batches(500, 4, 0, lambda: 1)
        seen = [[r.key for r in await batches.__anext__()]]
        await asyncio.sleep(0.05)  # the busy fold took 50 ms: it waits 3x that while others wait
        for offset in (100, 101, 102):  # others' records keep coming within that window
            await intake.put([Record(b"quiet", offset)])
            seen.append([r.key for r in await batches.__anext__()])
        started = loop.time()  # none waits now: the busy memory is taken at once
        seen.append([r.key for r in await batches.__anext__()])
        return seen, loop.time() - started

    seen, took = asyncio.run(scenario())
    assert seen == [[b"busy"] * 4, [b"quiet"], [b"quiet"], [b"quiet"], [b"busy"] * 4]
    assert took < 0.05
