"""Why the fold worker runs without standby replicas by default (`standby_replicas = 0`): Faust's
recovery, with its own RocksDB store and without a broker, leaves a hole in a standby's copy of
the changelog under the offset it persists.

Found by the many-workers test: a fold worker that took over a partition from its standby copy
(nothing left to read from the changelog) found a core whose observation segment it lacked.  A
repair that kept the changelog queue across the flow's resumption closed this hole but let
fetches from before the standbys' seek through (the test then found copies lacking their first
records): standby replicas stay a setting, off, until a repair holds there."""

from __future__ import annotations

import asyncio

import faust
from faust.tables import TableManager
from faust.types import TP, Message

from ...helpers import until

FIRST_FETCH, SECOND_FETCH = range(10), range(10, 15)


async def standby_copy(tmp_path, manager: type[TableManager]) -> tuple[list[int], int | None]:
    """Two fetches of a standby partition, with the flow resumed between them while the first
    is half applied (what `Recovery.on_recovery_completed` does once standbys are fetching):
    the offsets the local copy holds, and the offset it says it holds up to."""
    app = faust.App(f"standby-{manager.__name__}", broker="kafka://127.0.0.1:9", store="rocksdb://",
                    datadir=str(tmp_path), web_enabled=False, TableManager=manager)
    table = app.Table("state", default=None, key_type=bytes, value_type=bytes, partitions=1)
    tp = TP(table.changelog_topic.get_topic_name(), 0)
    recovery, queue = app.tables.recovery, app.tables.changelog_queue
    recovery.add_standby(table, tp)  # as a rebalance that assigns it does
    app.flow_control.resume()

    def fetched(offsets: range) -> None:  # as the consumer's conductor delivers a fetch
        for offset in offsets:
            message = Message(tp.topic, 0, offset, 0.0, 0, {}, b"k%d" % offset, b"v", None)
            queue.put_nowait(app.create_event(message.key, message.value, message.headers, message))

    fetched(FIRST_FETCH)
    slurp = asyncio.ensure_future(type(recovery)._slurp_changelogs(recovery))
    try:
        while (recovery.standby_offsets[tp] or -1) < 2:  # a step at a time: part of the fetch is taken
            await asyncio.sleep(0)
        assert queue.qsize() > 0, "the whole fetch was taken before the resumption"
        app.flow_control.resume()
        fetched(SECOND_FETCH)
        await until(lambda: recovery.standby_offsets[tp] == SECOND_FETCH[-1])
        recovery.flush_buffers()
    finally:
        slurp.cancel()
    db = table.data._db_for_partition(0)
    return [o for o in range(SECOND_FETCH[-1] + 1) if db.get(b"k%d" % o) is not None], table.data.persisted_offset(tp)


async def test_faust_alone_leaves_a_hole_under_the_persisted_offset(tmp_path):
    held, persisted = await standby_copy(tmp_path, TableManager)
    missing = sorted(set(range(SECOND_FETCH[-1] + 1)) - set(held))
    print(f"Faust alone: persisted offset {persisted}, missing offsets {missing}")
    assert persisted == SECOND_FETCH[-1] and missing  # no recovery reads them again
