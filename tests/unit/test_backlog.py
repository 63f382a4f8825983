"""The fold agent's read-ahead (`omstream.backlog`): per-memory order, fair shares, bounds."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.backlog import Backlog

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
