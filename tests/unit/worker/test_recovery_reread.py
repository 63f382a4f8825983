"""`WorkerRecovery` (omstream.worker.faust_repairs): a changelog partition being restored that
receives nothing for `RECOVERY_STUCK_SECS` is sought back to the record after the last one
applied, and only such a partition.  Faust's own recovery with a consumer that records what it
is asked (no broker: the fetch that lost the records is what the many-workers test met)."""

from __future__ import annotations

import asyncio
from time import monotonic

import faust
from faust.types import TP

from omstream.worker.faust_repairs import RECOVERY_STUCK_SECS, WorkerRecovery, WorkerTableManager


class Consumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[TP, int]] = []
        self.resumed: list[TP] = []

    async def position(self, tp: TP) -> int:
        return 243  # past the records it never delivered

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))

    def resume_partitions(self, tps) -> None:
        self.resumed += sorted(tps)


def recovering(name: str, consumer: Consumer, partitions: int) -> tuple[WorkerRecovery, list[TP]]:
    """The worker's recovery of a table of `partitions` changelog partitions, started, reading
    through `consumer`."""
    app = faust.App(name, broker="kafka://127.0.0.1:9", store="memory://", web_enabled=False,
                    TableManager=WorkerTableManager)
    table = app.Table("state", default=None, partitions=partitions)
    recovery = app.tables.recovery
    assert isinstance(recovery, WorkerRecovery)
    app.consumer = consumer  # type: ignore[assignment]
    recovery._set_recovery_started()
    return recovery, [TP(table.changelog_topic.get_topic_name(), p) for p in range(partitions)]


async def test_a_changelog_partition_that_receives_nothing_is_read_again_from_the_last_applied():
    consumer = Consumer()
    recovery, (stuck, fine) = recovering("reread", consumer, 2)
    start = monotonic()
    recovery.active_highwaters.update({stuck: 242, fine: 90})
    recovery.active_offsets.update({stuck: -1, fine: 90})  # `fine` has everything already

    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS / 2) == []  # not for long enough yet
    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS) == [stuck]
    assert consumer.seeks == [(stuck, 0)] and consumer.resumed == [stuck]
    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS * 1.5) == []  # the new fetch gets its time

    # Records arrived up to offset 100, then nothing again: read again from 101.
    recovery.active_offsets[stuck] = 100
    recovery._active_events_received_at[stuck] = start + RECOVERY_STUCK_SECS * 2
    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS * 2.5) == []
    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS * 3) == [stuck]
    assert consumer.seeks[-1] == (stuck, 101)

    recovery.active_offsets[stuck] = 242  # restored: nothing left to read
    assert await recovery.reread_stuck(start + RECOVERY_STUCK_SECS * 10) == []


async def test_a_client_that_does_not_know_the_position_does_not_hold_the_reread():
    class Unpositioned(Consumer):
        async def position(self, tp: TP) -> int:
            await asyncio.Event().wait()  # awaiting a reset that never comes
            return 0

    consumer = Unpositioned()
    recovery, (tp,) = recovering("reread-unpositioned", consumer, 1)
    recovery.active_highwaters[tp], recovery.active_offsets[tp] = 242, 17
    assert await recovery.reread_stuck(monotonic() + RECOVERY_STUCK_SECS) == [tp]
    assert consumer.seeks == [(tp, 18)]
