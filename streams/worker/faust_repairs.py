"""Faust's app, topic and consumer, repaired where they could lose or skip a record.

The chaos test (SIGKILLs of the worker, a broker restart) found records lost at every worker
start and offsets committed past records nothing handled, and the many-workers test a standby
copy of the state table with a hole; each repair below says what Faust does and why it is wrong
for the worker.  `tests/unit/worker/test_consumer_commits.py` and `test_standby_recovery.py` pin
them against plain Faust.  The consumer also hands the input log over a fetch at a time
(`WorkerApp.taps`, `omstream.worker.backlog.Intake`), which is what lets the fold agent read ahead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from itertools import chain
from time import monotonic
from typing import Any, cast

import aiokafka
import faust
import faust.transport.drivers.aiokafka
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP, Message
from mode import Service
from mode.utils.queues import ThrowableQueue

__all__ = ["FETCH_MAX_WAIT_MS", "RECOVERY_STUCK_SECS", "Tap", "WorkerApp", "WorkerConsumer", "WorkerConsumerThread",
           "WorkerRecovery", "WorkerTableManager", "WorkerTopic", "WorkerTransport"]

log = logging.getLogger("omstream.worker")

#: How long a fetch waits on the broker for records when there are none.
FETCH_MAX_WAIT_MS = 20

#: Seconds a changelog partition being restored may receive nothing before it is read again.
RECOVERY_STUCK_SECS = 10.0

#: What receives a tapped topic's records, a fetch at a time (waits while it has no room).
Tap = Callable[[list[Any]], Awaitable[None]]


class WorkerConsumer(faust.transport.drivers.aiokafka.Consumer):
    """Faust's consumer, with a short fetch wait, the input log handed over a fetch at a time
    (`_wait_next_records`), and three repairs to what it commits.

    - Its driver hard-codes `fetch_max_wait_ms` to 1500, so a model result written while a
      fetch was waiting sat up to 1.5 s behind it.
    - A stream that takes a record while the flow is stopped (a rebalance, or the recovery at
      start-up) or from an earlier generation skips it *and acks it*, so its offset could be
      committed although nothing handled it.  Those acks are refused: every rebalance ends
      with a seek to the committed offsets, which reads the record again.
    - It commits the first run of acked offsets even when one record before the run was never
      acked (its check is `min(acked) - committed > 1`), and any run when it does not know the
      committed offset (none yet, or 0).  Here a run is committed only from the committed
      position, which is learnt from the consumer when the group has none.

    Found while chasing the chaos run's lost records (their cause was the one `WorkerTopic`
    fixes): whatever drops a record, its offset is never committed past, so a restart reads it
    again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holding: dict[TP, int] = {}  # the committed offset a hole was last logged at
        self._reread: dict[TP, int] = {}  # the offset a jump was last read again from
        self._sought: dict[TP, int] = {}  # the generation a partition was last sought to its committed offset in
        self._dropped: dict[TP, int] = {}  # partitions a fetch was dropped of before their seek: its first offset

    async def _wait_next_records(self, timeout: float) -> tuple[Mapping[TP, list[Any]] | None, set[TP] | None]:
        """A fetch, with the records of a tapped topic (`WorkerApp.taps`) taken out and handed
        over whole.  Faust delivers a record through its conductor, the topic's queue and a
        stream, about 180 us of CPU each: the intake ran at about 1,500 records/s beside the
        fold, so a burst of 2,000 records on one memory held every record behind it for more
        than a second, whatever the fold agent's fairness.  The rest of the fetch goes on as
        before."""
        records, active = await super()._wait_next_records(timeout)
        taps = cast(WorkerApp, self.app).taps
        if records and taps and self.flow_active and not self.should_stop:
            rest = {tp: fetched for tp, fetched in records.items() if tp.topic not in taps}
            for tp, fetched in records.items():
                if tp.topic in taps and (active is None or tp in active or tp in self._buffered_partitions):
                    await self._hand_over(tp, fetched, taps[tp.topic])
            records = rest
        return records, active

    async def _hand_over(self, tp: TP, fetched: list[Any], tap: Tap) -> None:
        """What Faust's fetch loop does for each record (skip what was read already), for a
        whole fetch at once; but a jump in the offsets is read again, not passed.

        Faust notes a jump as a gap that commits pass (compacted topics and transaction markers
        leave holes).  A tapped topic is the input log, which has none: a jump means records
        were fetched and never delivered (around a rebalance that left this worker a partition
        it had, a fetch while the partition was paused is dropped).  Three fold workers lost
        records that way, the commit passing them.  So the consumer goes back to the last
        record it read (read twice, it is skipped by the fold as stored) and reads on; only a
        jump still there when read again is a hole (a transactional producer's marker).

        A fetch of a partition not yet sought to its committed offset in this generation is
        dropped: Faust's recovery resumes a newly assigned partition before it seeks it, and the
        fetch in between starts wherever the client's reset put it (the log's end).  Handed
        over, those later records were folded before the ones from the committed offset, whose
        memories' states then skipped them as folded: a fold worker that took over a partition
        lost the model results and messages of that stretch, and its cycles never ended."""
        if self._sought.get(tp) != self.app.consumer_generation_id:
            if fetched:
                log.info("records fetched before the seek to the committed offset: read again after it",
                         extra={"topic": tp.topic, "partition": tp.partition, "fetched": fetched[0].offset})
                self._dropped.setdefault(tp, fetched[0].offset)
            return
        read = self._read_offset[tp]
        messages: list[Any] = []
        for record in fetched:
            if read is not None and record.offset < read:
                continue
            if read and record.offset - read > 1 and self.app.topics.acks_enabled_for(tp.topic):
                if self._reread.get(tp) == read:  # read again and still a jump: a real hole
                    await self._add_gap(tp, read + 1, record.offset)  # (a transactional producer's marker)
                else:
                    log.warning("records were fetched and not delivered: reading them again", extra={
                        "topic": tp.topic, "partition": tp.partition, "from": read, "fetched": record.offset})
                    self._reread[tp] = read
                    if messages:
                        await tap(messages)
                    await self.seek(tp, read)
                    return
            message = self._to_message(tp, record)
            self.track_message(message)
            messages.append(message)
            read = record.offset
        if messages:
            await tap(messages)
            self._read_offset[tp] = read

    def _new_consumer_thread(self) -> WorkerConsumerThread:
        return WorkerConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Message) -> bool:
        app = self.app
        if not app.flow_control.is_active() or message.generation_id != app.consumer_generation_id:
            log.info("ack refused: the record was not handled (flow stopped or old generation)",
                     extra={"topic": message.topic, "partition": message.partition, "offset": message.offset})
            return False
        return super().ack(message)

    def _new_offset(self, tp: TP) -> int | None:
        committed, acked = self._committed_offset[tp], self._acked[tp]
        if not acked or committed is None:
            return None
        first = min(chain(acked, (gap.begin for gap in self._gap[tp])))
        if first > committed:  # a record at the committed position was not handled yet
            if self._holding.get(tp) != committed:
                self._holding[tp] = committed
                log.info("not committing past an unhandled record", extra={
                    "topic": tp.topic, "partition": tp.partition, "offset": committed, "ackedFrom": first})
            return None
        return super()._new_offset(tp)

    async def perform_seek(self) -> None:
        generation = self.app.consumer_generation_id  # a rebalance meanwhile seeks again
        await super().perform_seek()
        if self.app.consumer_generation_id != generation:
            # Begun before a rebalance and ended after it: Faust's fetcher seeks back while the
            # flow is stopped, beside the recovery's seek of the new generation, and ending last
            # this one marked the new assignment as sought in the old generation.  Every later
            # fetch of it was then dropped as early, for good: a fold worker's partitions stopped
            # while it lived (five memories of the many-workers test, folded only once the worker
            # was stopped and another took them over).  What this seek passed over (`_dropped`)
            # stays for the new generation's own seek, which marks its partitions.
            log.info("a seek of an earlier generation ended after a rebalance: not marking the partitions",
                     extra={"generation": generation, "current": self.app.consumer_generation_id})
            return
        self._sought.update(dict.fromkeys(self.assignment(), generation))
        # A dropped fetch moved the client's position past its records, and the fetch may have
        # come after the partition's seek (a round trip to the consumer's thread), before the
        # others' had ended: nothing would read them again, the partition stalled (a bulk
        # replay's worker taking over).  Sought again after the seek, not at the drop, which
        # could land after the seek from a stale position and pass records.  A partition with no
        # committed offset is not sought by Faust: it goes back to where its first dropped fetch
        # began, its reset position (the chaos test lost a partition's first stretch without it).
        dropped, self._dropped = self._dropped, {}
        for tp, first in dropped.items():
            if tp in self.assignment():
                committed = self._committed_offset[tp]
                await self.seek(tp, committed if committed is not None else first)
        for tp in self.assignment():  # not the changelogs: nothing acks or commits them
            if self._committed_offset[tp] is None and self.app.topics.acks_enabled_for(tp.topic):
                self._committed_offset[tp] = await self.position(tp)


class WorkerConsumerThread(faust.transport.drivers.aiokafka.AIOKafkaConsumerThread):
    """The driver's consumer thread, with a fetch that waits `FETCH_MAX_WAIT_MS` at most."""

    def _create_worker_consumer(self, transport: faust.transport.drivers.aiokafka.Transport
                                ) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by start(), which comes later
        return consumer


class WorkerTransport(faust.transport.drivers.aiokafka.Transport):
    Consumer = WorkerConsumer


class WorkerTopic(faust.Topic):
    """A topic whose stream buffer is not emptied when the flow resumes.

    Faust empties every stream's buffer when a rebalance (or the recovery at start-up) ends,
    but it resumes the stream partitions and seeks them to the committed offsets *before*
    that: records fetched in between are dropped silently, and the next ones, fetched after
    them, are handled.  The chaos test saw each restarted worker lose the first dozen records
    of a partition that way (model results never folded, jobs never answered, later records
    of the same memory folded before them).  Kept, they are handled in order; what an earlier
    generation left in the buffer is still skipped by the stream (and not acked,
    `WorkerConsumer`).
    """

    @property
    def queue(self) -> ThrowableQueue[Any]:
        if self._queue is None:
            maxsize = self.app.conf.stream_buffer_maxsize if self.maxsize is None else self.maxsize
            self._queue = self.app.FlowControlQueue(maxsize=maxsize, clear_on_resume=False)
        return self._queue


class WorkerApp(faust.App):
    """Faust's app with `WorkerTransport`, and topics it hands over a fetch at a time.

    When partitions are revoked (another worker joined or left), Faust stops the flow and then
    waits until every record delivered so far is acked (`stream_wait_empty`).  Acks are refused
    while the flow is stopped (`WorkerConsumer.ack`), and the fold agent's backlog holds records
    it has not taken: the wait could only end with the group's rebalance timeout (a minute,
    measured with three fold workers), every worker of the group idle meanwhile.  What the
    revocation must wait for is narrower: the batch being folded and the state being stored,
    so that no state of a partition is written after its next owner has read it back
    (`settle`, the fold agent's).  What was delivered and not handled is read again from the
    committed offsets by whoever owns the partition next, as after a crash.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: topic -> what receives its records a fetch at a time, instead of a stream
        self.taps: dict[str, Tap] = {}
        #: Returns once the fold agent has no batch in flight (None: no fold agent).
        self.settle: Callable[[], Awaitable[None]] | None = None

    async def _consumer_wait_empty(self, consumer: Any, logger: Any) -> None:
        if self.settle is not None:
            logger.info("Wait for the fold agent's batch in flight...")
            await self.settle()
        await consumer.commit_and_end_transactions()

    def _new_transport(self) -> WorkerTransport:
        return WorkerTransport(self.conf.broker_consumer, self)


class WorkerRecovery(Recovery):
    """Faust's table recovery, reading again a changelog partition that receives nothing.

    Found by the many-workers test on a loaded machine (twice in about twenty runs): a fold
    worker that took a killed worker's partition over restored its state for ever, Faust logging
    "No event received for active tp" every 5 s, the memories of the partition stopped and the
    run stalled.  Its changelog records were never applied although the broker had them: Faust
    drops the records of a fetch in flight when the flow stops, the generation changes or the
    partition is paused meanwhile, and the client's position has moved past them, so nothing
    fetches them again (the input log has the same hole, repaired in `WorkerConsumer`).  Here
    a changelog partition still short of its highwater that has received nothing for
    `RECOVERY_STUCK_SECS` is sought back to the record after the last one applied (a record
    read twice is skipped by the recovery) and resumed, with a warning that names its position.
    """

    @Service.task
    async def _reread_stuck_changelogs(self) -> None:
        async for _ in self.itertimer(self.stats_interval, name="Recovery.reread"):
            if self.in_recovery:
                await self.reread_stuck(monotonic())

    async def reread_stuck(self, now: float) -> list[TP]:
        """Seek back every active changelog partition stuck at `now`; returns them."""
        started = self._recovery_started_at
        if started is None:
            return []
        consumer = self.app.consumer
        stuck = [tp for tp, remaining in self.active_remaining().items()
                 if remaining > 0 and now - self._active_events_received_at.get(tp, started) >= RECOVERY_STUCK_SECS]
        for tp in stuck:
            applied = self.active_offsets.get(tp)
            start = 0 if applied is None or applied < 0 else applied + 1
            try:  # for the warning only; the client answers once it knows the position, which may be never
                position = await asyncio.wait_for(consumer.position(tp), timeout=2.0)
            except TimeoutError:
                position = None
            log.warning("a changelog partition being restored received nothing: reading it again", extra={
                "topic": tp.topic, "partition": tp.partition, "from": start, "position": position,
                "highwater": self.active_highwaters.get(tp)})
            await consumer.seek(tp, start)
            consumer.resume_partitions({tp})
            self._active_events_received_at[tp] = now  # give the new fetch its time
        return stuck


class WorkerTableManager(TableManager):
    """Faust's table manager, with `WorkerRecovery`."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = WorkerRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery
