"""The pure parts of `om repartition`: where a record goes, how a copy is recognised, and how a
resumed copy tells what an interrupted batch already put in the target."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner

from omstream.cli import build_parser
from omstream.repartition import COPIED_FROM, Marker, already_there, copied_from, target_partition


def test_a_record_goes_to_its_memory_partition_as_the_client_sends_it():
    partitioner = DefaultPartitioner()
    for k in range(200):
        key = f"thread:t{k}".encode()
        assert target_partition(key, 3, 8) == partitioner(key, list(range(8)), None)
    spread = {target_partition(f"thread:t{k}".encode(), 0, 8) for k in range(200)}
    assert spread == set(range(8))
    # No key, no memory (the fold dead-letters it): a fixed place, whatever the run.
    assert target_partition(None, 11, 8) == 3


def test_copies_carry_their_source_position():
    assert copied_from([("om-signature", b"abc"), (COPIED_FROM, b"3:1207")]) == (3, 1207)
    assert copied_from([("om-signature", b"abc")]) is None and copied_from(None) is None


def test_the_marker_round_trips():
    marker = Marker("om", 8, log={0: 10, 3: 4}, cache={1: 2}, written={7: 99}, copied=14)
    assert Marker.from_bytes(marker.to_bytes()) == marker


def test_a_resumed_copy_skips_exactly_what_an_interrupted_batch_landed():
    """Source partitions 0-3 spread over 8 target partitions; a crash leaves each target
    partition with a prefix of what was sent to it.  `seen` (as `landed_after` builds it from
    the records after the marker) must tell every landed record and no other."""
    rng = random.Random(7)
    source = [(p, offset, f"thread:t{rng.randrange(40)}".encode()) for p in range(4) for offset in range(50)]
    sent: dict[int, list[tuple[int, int]]] = {}
    for p, offset, key in source:
        sent.setdefault(target_partition(key, p, 8), []).append((p, offset))
    landed = {t: records[: rng.randrange(len(records) + 1)] for t, records in sent.items()}
    seen: dict[int, dict[int, int]] = {}
    for t, records in landed.items():
        for p, offset in records:
            seen.setdefault(t, {})[p] = max(seen.get(t, {}).get(p, -1), offset)
    there = {(p, offset) for records in landed.values() for p, offset in records}
    for p, offset, key in source:
        assert already_there(seen, target_partition(key, p, 8), p, offset) == ((p, offset) in there)


def test_the_command_takes_a_namespace_and_a_partition_count():
    args = build_parser().parse_args(["repartition", "--to", "om8", "--partitions", "8", "--exit-when-caught-up"])
    assert (args.to, args.partitions, args.exit_when_caught_up) == ("om8", 8, True)
