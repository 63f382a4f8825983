"""What the worker's consumer lets Faust commit (`omstream.worker.faust_repairs.WorkerConsumer`):
never past a record nothing handled.  The chaos test found these holes on a real broker; here each is pinned alone."""

from __future__ import annotations

import faust
import pytest
from faust.types import TP, Message

from omstream.worker.faust_repairs import WorkerConsumer, WorkerTopic, WorkerTransport

TOPIC = "t.log"
PART = TP(TOPIC, 0)


@pytest.fixture()
def consumer():
    app = faust.App("commits-test", broker="kafka://127.0.0.1:9", web_enabled=False)
    app.topics.acks_enabled_for = lambda topic: True  # the worker's topics are acking topics
    app.flow_control.resume()
    transport = WorkerTransport(app.conf.broker_consumer, app)

    async def nothing(*_):
        return None

    return WorkerConsumer(transport, callback=nothing, on_partitions_revoked=nothing,
                     on_partitions_assigned=nothing)


def record(consumer, offset: int, generation: int | None = None) -> Message:
    generation = consumer.app.consumer_generation_id if generation is None else generation
    return Message(TOPIC, 0, offset, 0.0, 0, {}, b"k", b"v", None, generation_id=generation)


def test_a_run_is_committed_from_the_committed_position(consumer):
    consumer._committed_offset[PART] = 10
    for offset in (10, 11, 12):
        assert consumer.ack(record(consumer, offset))
    assert consumer._new_offset(PART) == 13


@pytest.mark.parametrize("missing", [[10], [10, 11]])
def test_nothing_is_committed_past_a_record_not_acked(consumer, missing):
    # Faust alone commits 13 when only offset 10 is missing (its check is `> 1`).
    consumer._committed_offset[PART] = 10
    for offset in (o for o in (10, 11, 12) if o not in missing):
        consumer.ack(record(consumer, offset))
    assert consumer._new_offset(PART) is None


def test_nothing_is_committed_while_the_committed_position_is_unknown(consumer):
    assert consumer._committed_offset[PART] is None
    consumer.ack(record(consumer, 5))
    assert consumer._new_offset(PART) is None


def test_a_record_skipped_while_the_flow_is_stopped_is_not_acked(consumer):
    consumer._committed_offset[PART] = 0
    consumer.app.flow_control.suspend()
    assert not consumer.ack(record(consumer, 0))
    consumer.app.flow_control.resume()
    assert consumer._new_offset(PART) is None
    assert consumer.ack(record(consumer, 0))  # read again after the seek, and handled
    assert consumer._new_offset(PART) == 1


def test_a_record_of_an_earlier_generation_is_not_acked(consumer):
    consumer._committed_offset[PART] = 0
    consumer.app.consumer_generation_id = 7
    assert not consumer.ack(record(consumer, 0, generation=6))
    assert consumer._new_offset(PART) is None


def test_records_buffered_before_the_flow_resumes_are_kept():
    # Faust resumes and seeks the stream partitions before it resumes the flow, and its own
    # stream buffers are emptied on resume: what was fetched in between was lost.
    app = faust.App("buffer-test", broker="kafka://127.0.0.1:9", web_enabled=False, Topic=WorkerTopic)
    app.flow_control.suspend()
    queue = app.topic(TOPIC).clone().queue
    queue.force_put_nowait("fetched while suspended")
    app.flow_control.resume()
    assert queue.qsize() == 1
    assert faust.App("plain", broker="kafka://127.0.0.1:9").topic(TOPIC).clone().queue._clear_on_resume


def test_a_fetch_that_jumps_over_records_reads_them_again_instead_of_passing_them(consumer):
    # Around a rebalance that left a worker a partition it had, a fetch could come back past
    # records never delivered: Faust notes a gap there, and commits passed them (three fold
    # workers lost messages so).  The input log has no holes: the consumer reads them again.
    import asyncio
    from types import SimpleNamespace

    handed, seeks, gaps = [], [], []

    async def tap(messages):
        handed.extend(m.offset for m in messages)

    async def seek(tp, offset):
        seeks.append(offset)
        consumer._read_offset[tp] = offset

    async def add_gap(tp, begin, end):
        gaps.append((begin, end))

    consumer.seek, consumer._add_gap = seek, add_gap
    consumer._to_message = lambda tp, r: record(consumer, r.offset)
    fetch = [SimpleNamespace(offset=o) for o in (13, 14)]
    consumer._read_offset[PART] = 10
    consumer._sought[PART] = consumer.app.consumer_generation_id
    asyncio.run(consumer._hand_over(PART, fetch, tap))
    assert (handed, seeks, gaps) == ([], [10], [])
    # Read again from 10 and still a jump: a real hole (a transactional producer's marker).
    asyncio.run(consumer._hand_over(PART, fetch, tap))
    assert (handed, seeks, gaps) == ([13, 14], [10], [(11, 13)])


def test_a_fetch_before_the_seek_to_the_committed_offset_is_read_again_after_it(consumer):
    # Faust's recovery resumes a newly assigned partition, then seeks it to its committed
    # offset: a fetch in between came back from the log's end, and handed over, its records
    # were folded before the earlier ones, which the memories then skipped as folded (a fold
    # worker that took over a partition lost a stretch of it).  They are dropped until the seek.
    import asyncio
    from types import SimpleNamespace

    handed = []

    async def tap(messages):
        handed.extend(m.offset for m in messages)

    async def committed():
        return {PART: 90}

    sought = []

    async def seek(tp, offset):
        sought.append((tp, offset))

    consumer._to_message = lambda tp, r: record(consumer, r.offset)
    consumer.seek_to_committed = committed
    consumer.seek = seek
    consumer.assignment = lambda: {PART}
    consumer.app.consumer_generation_id = 3
    consumer._read_offset[PART] = None
    asyncio.run(consumer._hand_over(PART, [SimpleNamespace(offset=o) for o in (135, 136)], tap))
    assert (handed, sought) == ([], [])  # not handed over, not sought back from a stale position
    asyncio.run(consumer.perform_seek())
    assert sought == [(PART, 90)]  # sought there again: harmless
    asyncio.run(consumer._hand_over(PART, [SimpleNamespace(offset=o) for o in (90, 91)], tap))
    assert handed == [90, 91]
    # The next rebalance: nothing again until that generation's seek.
    consumer.app.consumer_generation_id = 4
    asyncio.run(consumer._hand_over(PART, [SimpleNamespace(offset=92)], tap))
    assert handed == [90, 91]


def test_a_fetch_dropped_while_the_partitions_are_sought_is_read_again(consumer):
    # The fetch from the committed offset can come after the partition's seek and before the
    # seek of the others has ended: dropped, and the client's position past it, the partition
    # stalled (a bulk replay's worker taking over while records kept arriving).
    import asyncio
    from types import SimpleNamespace

    handed, sought = [], []

    async def tap(messages):
        handed.extend(m.offset for m in messages)

    async def committed():
        await consumer._hand_over(PART, [SimpleNamespace(offset=o) for o in (90, 91)], tap)
        return {PART: 90}

    async def seek(tp, offset):
        sought.append((tp, offset))

    consumer._to_message = lambda tp, r: record(consumer, r.offset)
    consumer.seek_to_committed = committed
    consumer.seek = seek
    consumer.assignment = lambda: {PART}
    consumer.app.consumer_generation_id = 3
    asyncio.run(consumer.perform_seek())
    assert handed == [] and sought == [(PART, 90)]
    asyncio.run(consumer.perform_seek())  # nothing dropped since: no seek again
    assert sought == [(PART, 90)]


def test_a_fetch_dropped_of_a_partition_with_no_committed_offset_is_read_from_its_first_offset(consumer):
    # Faust does not seek a partition without a committed offset: the dropped fetch had moved
    # the position past the partition's first records (the chaos test lost them after a restart).
    import asyncio
    from types import SimpleNamespace

    sought = []

    async def tap(messages):
        raise AssertionError("nothing is handed over before the seek")

    async def committed():
        return {}

    async def seek(tp, offset):
        sought.append((tp, offset))

    async def position(tp):
        return 0

    consumer._to_message = lambda tp, r: record(consumer, r.offset)
    consumer.seek_to_committed, consumer.seek, consumer.position = committed, seek, position
    consumer.assignment = lambda: {PART}
    consumer.app.consumer_generation_id = 3
    asyncio.run(consumer._hand_over(PART, [SimpleNamespace(offset=o) for o in (0, 1, 2)], tap))
    asyncio.run(consumer.perform_seek())
    assert sought == [(PART, 0)]


def test_a_seek_that_ends_after_a_rebalance_does_not_stall_the_new_generation(consumer):
    # Faust's fetcher seeks back to the committed offsets while the flow is stopped (a
    # rebalance), beside the recovery's seek of the new generation.  The older seek, ending
    # last, marked the new assignment as sought in its own generation: every later fetch was
    # dropped as "before the seek", for good (in the many-workers test a fold worker's two
    # partitions stopped while it lived; another worker folded them once it was stopped).
    import asyncio
    from types import SimpleNamespace

    handed: list[int] = []

    async def tap(messages):
        handed.extend(m.offset for m in messages)

    async def seek(tp, offset):
        return None

    async def scenario() -> None:
        held = asyncio.Event()
        calls = 0

        async def committed():
            nonlocal calls
            calls += 1
            if calls == 1:  # the older seek, held up in the consumer's thread by the rebalance
                await held.wait()
            return {PART: 90}

        consumer.seek_to_committed = committed
        consumer.app.consumer_generation_id = 3
        older = asyncio.ensure_future(consumer.perform_seek())
        await asyncio.sleep(0)  # it has begun
        consumer.app.consumer_generation_id = 4  # the rebalance
        await consumer.perform_seek()  # the recovery's seek of generation 4
        held.set()
        await older  # ends last
        await consumer._hand_over(PART, [SimpleNamespace(offset=o) for o in (90, 91)], tap)

    consumer._to_message = lambda tp, r: record(consumer, r.offset)
    consumer.seek = seek
    consumer.assignment = lambda: {PART}
    asyncio.run(scenario())
    assert handed == [90, 91]
