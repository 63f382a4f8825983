"""`om replay` at bulk speed: a new settled version folded in this process, then handed over.

A settled replay through the version's worker (`omstream.replay.replay`) sends every job to
`<ns>.jobs` and waits for its answer to come back at the log's end, holding the memory's
history meanwhile.  For a new settled version this module does the same work without the
round trips:

1. **read** each partition of `<ns>.log` from the version's committed position (the start, or
   `--from`'s) up to its end offset taken at the start: once for the memories to fold exactly
   as live (a deletion or a result of this version in their history, `bulk_fold`), once to fold;
2. **fold** each record in-process (`omstream.replay.bulk_fold`: the worker's own
   `fold_record`), answering each job from the result cache when an equal request was answered
   before, else by calling the model through the model agent's code (`answer_job`,
   `run_job`, the job deadline, a settled version's untimed answer), one call at a
   time; a new answer goes to `<ns>.cache` as the model agent writes it;
3. **write**, in large batches: the events and dead letters (acknowledged), then every
   memory's state records to the version's state changelog in the worker's layout
   (`Memories.writes`, `omstream.pipeline.storage`), then the version group's committed positions at
   those end offsets, last.  Jobs are answered here, never sent.

Then the version's worker starts (`replay` does it, after this returns): it restores the
states from the changelog (Faust's table recovery) and folds from the committed positions,
the records written since the start included.  The order is what makes the hand-over safe:
no worker of the version runs during the bulk fold, every state is in the changelog before a
position is committed, and each state's position is the last record of its memory folded,
so the worker folds every later record once.  A crash before the commit leaves no position:
`om replay` then folds again through the worker (the changelog is no longer empty), whose
outputs carry the same ids.

Only a version with an empty state changelog is folded so (`bulk_ready`); a version that has
stored states resumes through its worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omstream.crypto import PLAIN, Sealer, sealer_of
from omstream.engine.fold import EngineConfig, addressed
from omstream.pipeline.cache import ResultCache, answer_from
from omstream.schemas.jobs import ModelJob, ModelResult

from .. import kafka
from ..limits import Limits
from ..pipeline.answering import AnswerCache, answer_job, count_call, log_model_call, open_job
from ..pipeline.folding import FoldContext
from ..pipeline.memories import StateWrite
from ..pipeline.sending import OutputRecord
from ..pipeline.signing import result_key
from ..settings import Settings
from ..topics import Topics, memory_partition, partitions_of
from ..versions.stats import WorkerStats, stats_path
from .bulk_fold import BulkFold, Record, folds_as_live

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

__all__ = ["BulkResult", "CachedAnswers", "bulk_ready", "bulk_replay"]

log = logging.getLogger("omstream.versions")

#: Outputs kept before they are sent; records fetched at once.
_SEND_EVERY = 5000
_FETCH_RECORDS = 5000


@dataclass(frozen=True)
class BulkResult:
    """What the bulk fold did: records read, memories, answers folded, its calls and hits."""

    records: int
    memories: int
    answers: int
    model_calls: int
    cache_hits: int
    seconds: float
    ends: dict[int, int]  # partition -> the end offset folded up to (committed)

    @property
    def records_per_s(self) -> float:
        return round(self.records / self.seconds, 1) if self.seconds else 0.0


async def bulk_ready(settings: Settings) -> bool:
    """Whether the version has stored no state yet (its state changelog is empty)."""
    topic = Topics.state_changelog(settings.app_id)
    parts = (await partitions_of(settings.bootstrap, [topic])).get(topic, [])
    if not parts:
        return True
    from aiokafka import TopicPartition

    consumer = kafka.reader(settings)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in parts]
        starts, ends = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        return all(ends[tp] == starts[tp] for tp in tps)
    finally:
        await consumer.stop()


class CachedAnswers:
    """`Answers` from the result cache, or from the model (the model agent's code, one call at a
    time); every new answer cached as the model agent caches it (sealed: opened and cached per
    memory, `open_job`)."""

    def __init__(self, settings: Settings, config: EngineConfig, cache: ResultCache,
                 send: Callable[[Sequence[OutputRecord], list[tuple[str, bytes]]], Awaitable[None]],
                 stats: WorkerStats, sealer: Sealer = PLAIN) -> None:
        self.settings, self.config, self.cache, self._send, self.stats = settings, config, cache, send, stats
        self.sealer = sealer
        self._run: Callable[[ModelJob], Awaitable[ModelResult]] | None = None

    async def answer(self, job: bytes) -> ModelResult | None:
        scope = await open_job(self.sealer, self.cache, job)
        result = scope.decided if scope.decided is not None else await answer_job(
            scope.raw, lambda j: self._recall_or_call(j, scope.cache), self.settings.job_deadline_ms / 1000)
        if not isinstance(result, ModelResult):
            # The log has it (`str`: a job naming no cycle, which the fold never makes): the
            # model agent counts it as a hit.
            self.stats.cache_hits += 1
            return None
        count_call(self.stats, result)
        if not result.cached:
            log_model_call(result)
        if result.ok and not result.cached:
            key, entry, headers = scope.cache.entry(result)
            await self._send([OutputRecord(Topics.of(self.settings).cache, key, entry)], headers)
            scope.cache.remember(key, entry)
        return result

    async def _recall_or_call(self, job: ModelJob, cache: AnswerCache) -> ModelResult | None:
        """`ModelAgent.recall_or_call` of a settled version, without equal requests in flight
        (one call at a time); `cache` as the job's memory sees it."""
        cached = cache.get(job)
        if cached is None:
            from omstream.models.calls import untimed

            return untimed(await self._model()(job), job)
        if cached.memory_key == job.memory_key and cached.cycle_id == job.cycle_id and addressed(cached, self.config):
            return None
        return answer_from(cached, job)

    def _model(self) -> Callable[[ModelJob], Awaitable[ModelResult]]:
        """The model agent's call (retries, fallbacks), set up at the first miss only:
        a warm replay never imports litellm."""
        if self._run is None:
            from omstream.models import local as local_models
            from omstream.models.calls import RetryPolicy, run_job

            local_models.configure_from(self.settings)
            for model in {self.settings.om.observer_model, self.settings.om.reflector_model}:
                if local_models.is_local(model) and local_models.is_installed(model):
                    local_models.load(model)
            policy = RetryPolicy.from_settings(self.settings)

            async def run(job: ModelJob) -> ModelResult:
                return await run_job(job, policy)

            self._run = run
        return self._run


class BatchWriter:
    """Records sent in batches of a partition (aiokafka's `create_batch`), acknowledged by
    `wait`; a partition's records stay in the order added (an idempotent producer)."""

    def __init__(self, producer: AIOKafkaProducer, counts: dict[str, int]) -> None:
        self.producer, self.counts = producer, counts
        self._batches: dict[tuple[str, int], Any] = {}
        self._sent: list[asyncio.Future[Any]] = []
        self._partition: dict[tuple[bytes, int], int] = {}

    async def add(self, topic: str, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        if partition is None:
            n = self.counts[topic]
            partition = self._partition.get((key, n))
            if partition is None:  # the default partitioner's, as the worker's sends get
                partition = self._partition[(key, n)] = memory_partition(key, list(range(n)))
        where = (topic, partition)
        batch = self._batches.get(where)
        if batch is None:
            batch = self._batches[where] = self.producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            await self._send(where)
            batch = self._batches[where] = self.producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise ValueError(f"a {topic} record of {len(value or b'')} bytes does not fit a batch")

    async def _send(self, where: tuple[str, int]) -> None:
        batch = self._batches.pop(where)
        self._sent.append(await self.producer.send_batch(batch, where[0], partition=where[1]))

    async def wait(self) -> None:
        """Send what is left and wait until the broker has every record."""
        for where in list(self._batches):
            await self._send(where)
        sent, self._sent = self._sent, []
        await asyncio.gather(*sent)


async def bulk_replay(settings: Settings, *, progress: Callable[[int, int], Any] | None = None) -> BulkResult:
    """Fold the new settled version `settings.version` in this process and write its outputs,
    states and committed positions (see the module docstring).  `progress(read, total)` about
    twice a second."""
    from aiokafka import TopicPartition

    started = time.monotonic()
    topics = Topics.of(settings)
    changelog = Topics.state_changelog(settings.app_id)
    counts = {t: len(p) for t, p in (await partitions_of(
        settings.bootstrap, [topics.log, topics.events, topics.dlq, changelog])).items()}
    key = result_key(settings.result_key, settings.data_dir)
    from omstream.models.capabilities import takes_attachments

    config = EngineConfig(settings.om, settings.version, settled=True, takes_attachments=takes_attachments)
    ctx = FoldContext(settings, topics, config, Limits.from_settings(settings), key, settings.thread_filter,
                      settings.resource_filter)
    stats_file = stats_path(settings)
    stats = WorkerStats.load(stats_file)
    sealer = sealer_of(settings)
    cache = ResultCache(settings.bootstrap, topics.cache,
                        settings.data_dir / "worker" / settings.worker_group / "result-cache", key, sealer)
    producer = kafka.producer(settings, acks="all", enable_idempotence=True, linger_ms=5,
                              max_batch_size=512 * 1024, max_request_size=4 * 1024 * 1024)
    consumer = kafka.group_reader(settings, settings.app_id, max_poll_records=_FETCH_RECORDS,
                                  max_partition_fetch_bytes=4 * 1024 * 1024, fetch_max_bytes=16 * 1024 * 1024)
    await producer.start()
    try:
        writer = BatchWriter(producer, counts)

        async def send(records: Sequence[OutputRecord], headers: list[tuple[str, bytes]]) -> None:
            await asyncio.gather(*[await producer.send(r.topic, r.value, key=r.key, headers=headers)
                                   for r in records])

        answers = CachedAnswers(settings, config, cache, send, stats, sealer)
        await sealer.start()
        await cache.start()
        await consumer.start()
        tps = [TopicPartition(topics.log, p) for p in range(counts[topics.log])]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await _positions(consumer, tps)
        deferred = await _deferred(consumer, tps, starts, ends, settings.version)
        folds = {tp.partition: BulkFold(ctx, tp.partition, answers, deferred[tp.partition], sealer) for tp in tps}
        total = sum(ends[tp] - starts[tp] for tp in tps)
        read = await _fold_all(consumer, tps, ends, folds, writer, total, progress)
        for fold in folds.values():
            await fold.finish()
            await _write(writer, fold.take_outputs(), [])
        await writer.wait()  # every event before any state: a state is never ahead of its outputs
        memories = 0
        for fold in folds.values():
            await _write(writer, [], fold.writes(), changelog)
            for memory, loaded in fold.memories.stored().items():
                stats.memories[memory.decode()] = [loaded.state.observation_tokens, loaded.state.generation]
                memories += 1
        await writer.wait()
        await consumer.commit({tp: ends[tp] for tp in tps})  # last: the worker takes over from here
        await asyncio.to_thread(stats.save, stats_file)
    finally:
        await consumer.stop()
        await producer.stop()
        await cache.stop()
        await sealer.stop()
    result = BulkResult(records=read, memories=memories, answers=sum(f.answered for f in folds.values()),
                        model_calls=stats.model_calls, cache_hits=stats.cache_hits,
                        seconds=round(time.monotonic() - started, 2), ends={tp.partition: ends[tp] for tp in tps})
    log.info("bulk replay done", extra={"version": settings.version, "records": read, "memories": memories,
                                        "seconds": result.seconds})
    return result


async def _positions(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Where the version starts: its committed position (`--from` sets one), else the start."""
    firsts = await consumer.beginning_offsets(tps)
    positions = {}
    for tp in tps:
        committed = await consumer.committed(tp)
        positions[tp] = committed if committed is not None else firsts[tp]
        consumer.seek(tp, positions[tp])
    return positions


async def _deferred(consumer: AIOKafkaConsumer, tps: list[TopicPartition], starts: dict[TopicPartition, int],
                    ends: dict[TopicPartition, int], version: str) -> dict[int, set[bytes]]:
    """Per partition, the memories whose history has a record the fold applies while a cycle is
    in flight (`bulk_fold.folds_as_live`); then back to `starts`."""
    found: dict[int, set[bytes]] = {tp.partition: set() for tp in tps}
    waiting = [tp for tp in tps if starts[tp] < ends[tp]]
    while waiting:
        fetched = await consumer.getmany(*waiting, timeout_ms=500, max_records=_FETCH_RECORDS)
        for tp, records in fetched.items():
            for r in records:
                if r.offset < ends[tp] and folds_as_live(r.value, version):
                    found[tp.partition].add(r.key or b"")
        waiting = [tp for tp in waiting if await consumer.position(tp) < ends[tp]]
    for tp in tps:
        consumer.seek(tp, starts[tp])
    return found


async def _fold_all(consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: dict[TopicPartition, int],
                    folds: dict[int, BulkFold], writer: BatchWriter, total: int,
                    progress: Callable[[int, int], Any] | None) -> int:
    """Feed every record up to `ends` to its partition's fold; the records read."""
    read, shown = 0, 0.0
    waiting = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
    while waiting:
        fetched = await consumer.getmany(*waiting, timeout_ms=500, max_records=_FETCH_RECORDS)
        for tp, records in fetched.items():
            fold = folds[tp.partition]
            for r in records:
                if r.offset >= ends[tp]:
                    break  # written since the start: the worker folds it
                await fold.feed(Record(r.topic, r.partition, r.offset, r.key, r.value, r.headers,
                                       r.timestamp / 1000 if r.timestamp is not None else None))
                read += 1
            if len(fold.outputs) >= _SEND_EVERY:
                await _write(writer, fold.take_outputs(), [])
        waiting = [tp for tp in waiting if await consumer.position(tp) < ends[tp]]
        if progress is not None and time.monotonic() - shown > 0.5:
            shown = time.monotonic()
            progress(read, total)
    if progress is not None:
        progress(read, total)
    return read


async def _write(writer: BatchWriter, outputs: list[OutputRecord], states: list[StateWrite],
                 changelog: str = "") -> None:
    for out in outputs:
        await writer.add(out.topic, out.key, out.value)
    for write in states:
        await writer.add(changelog, write.key, write.value, write.partition)
