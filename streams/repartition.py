"""`om repartition`: copy a namespace's input log into a new namespace with another partition count.

The memory key decides a memory's partition (`omstream.topics.memory_partition`), so partitions
cannot be added to `<ns>.log` in place: a memory's later records would land on another partition
than its earlier ones, and the fold would apply them out of order.  Instead the log is copied,
record by record, into `<target>.log` created with the new count, each record under its own key
(the memory key), so it lands on the memory's new partition:

- **Order.** All records of a memory are on one source partition; the copy reads each source
  partition in order and one idempotent producer writes each target partition in order, so each
  memory's records keep their order (the only order the fold depends on).  Records keep their
  timestamp (the fold's log time) and headers (a model result's signature), so the new
  namespace's workers refold the same memories *without calling a model*: the results are
  records of the log, and they verify under the same result-signing key (`agree_on_key`).
- **The model-result cache** `<ns>.cache` is copied too, so the jobs the new namespace's fold makes
  again are answered from it (their answers are ignored: the copied results came first).
- **Resumable, each record once.**  Every copied record carries the header `om-copied-from`
  (`<source partition>:<offset>`).  After each batch is acknowledged the copy records a marker in
  the compacted topic `<target>.repartition`: per source partition the next offset to copy, and
  per target partition the offset after its last acknowledged copy.  A copy started again reads
  the target's records written after the marker (an interrupted batch may have landed in part)
  and skips exactly those (`already_there`): a target partition holds a prefix of what was sent
  to it, so a source record is there if and only if its offset is at most the highest one seen
  from its source partition on its target partition.  A non-empty target without a marker of
  this source is refused.
- **Following.**  Once it has copied to the source's end, the copy keeps following it (records
  produced meanwhile are copied too) until stopped, or stops there when asked
  (`exit_when_caught_up`); docs/operations.md, "Growing the partition count", has the cut-over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from omstream.schemas.errors import OmError

from . import kafka
from .settings import LIVE, Settings
from .topics import COMPACT, Topics, ensure_topics, memory_partition, partitions_of

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

__all__ = ["COPIED_FROM", "MARKER_KEY", "Marker", "RepartitionProgress", "RepartitionRefused", "already_there",
           "copied_from", "marker_topic", "repartition", "target_partition", "target_settings",
           "write_marker"]

log = logging.getLogger(__name__)

COPIED_FROM = "om-copied-from"
MARKER_KEY = b"progress"
#: Acknowledge and mark at least this often (what a restart may find landed in part), and
#: before the records waiting for their acknowledgement hold too much memory.
CHECKPOINT_S = 1.0
CHECKPOINT_RECORDS = 20_000
CHECKPOINT_BYTES = 32 * 1024 * 1024


class RepartitionRefused(OmError, ValueError):
    """The copy cannot start as asked (a user's fix)."""


def target_settings(source: Settings, namespace: str, partitions: int) -> Settings:
    return replace(source, namespace=namespace, partitions=partitions, version=LIVE)


def marker_topic(target: Settings) -> str:
    return f"{target.namespace}.repartition"


def target_partition(key: bytes | None, source_partition: int, partitions: int) -> int:
    """The memory's partition among `partitions` (as `OmClient` would send it).  A record without
    a key belongs to no memory (the fold dead-letters it); it keeps a fixed place."""
    if key is None:
        return source_partition % partitions
    return memory_partition(key, list(range(partitions)))


def copied_from(headers: Iterable[tuple[str, bytes]] | None) -> tuple[int, int] | None:
    """(source partition, offset) of a copied record, None for a record the copy did not write."""
    for name, value in headers or ():
        if name == COPIED_FROM:
            partition, offset = value.split(b":")
            return int(partition), int(offset)
    return None


def already_there(seen: Mapping[int, Mapping[int, int]], target: int, source: int, offset: int) -> bool:
    """Whether the source record (`source` partition, `offset`) is on `target` already: `seen` is,
    per target partition, the highest copied offset of each source partition found after the
    marker.  A partition holds a prefix of what one idempotent producer sent it, in order."""
    return offset <= seen.get(target, {}).get(source, -1)


@dataclass(frozen=True)
class Marker:
    """How far the copy got, written only once everything before it is acknowledged."""

    source: str  # the source namespace
    partitions: int  # the target's partition count
    log: dict[int, int] = field(default_factory=dict)  # source log partition -> next offset to copy
    cache: dict[int, int] = field(default_factory=dict)  # source cache partition -> next offset
    written: dict[int, int] = field(default_factory=dict)  # target log partition -> offset after our last
    copied: int = 0  # log records copied, every run

    def to_bytes(self) -> bytes:
        return orjson.dumps({"source": self.source, "partitions": self.partitions, "log": self.log,
                             "cache": self.cache, "written": self.written, "copied": self.copied},
                            option=orjson.OPT_NON_STR_KEYS)

    @classmethod
    def from_bytes(cls, raw: bytes) -> Marker:
        d = orjson.loads(raw)
        return cls(d["source"], d["partitions"], _ints(d["log"]), _ints(d["cache"]), _ints(d["written"]),
                   d["copied"])


def _ints(positions: dict[str, int]) -> dict[int, int]:
    """JSON keys are text: partition numbers again."""
    return {int(k): int(v) for k, v in positions.items()}


@dataclass(frozen=True)
class RepartitionProgress:
    """Where the copy stands (after each fetch, at most about twice a second)."""

    source: str
    target: str
    partitions: int
    copied: int  # log records copied by this run
    skipped: int  # log records found in the target already (a resumed copy)
    cache_copied: int
    position: int  # source log records behind the copy's position
    total: int  # source log records (its end offsets, last read)
    elapsed_s: float
    records_per_s: float  # until the copy first reached the source's end (then: since it started)
    caught_up: bool = False
    caught_up_s: float | None = None  # when the copy first reached the source's end
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "partitions": self.partitions,
                "copied": self.copied, "skipped": self.skipped, "cacheCopied": self.cache_copied,
                "position": self.position, "total": self.total, "elapsedS": self.elapsed_s,
                "recordsPerS": self.records_per_s, "caughtUp": self.caught_up, "caughtUpS": self.caught_up_s,
                "resumed": self.resumed}


async def read_marker(target: Settings) -> Marker | None:
    from .topics import read_until_end

    topic = marker_topic(target)
    if not (await partitions_of(target.bootstrap, [topic])).get(topic):
        return None
    found = None
    async for record in read_until_end(target.bootstrap, topic, [0]):
        if record.key == MARKER_KEY:
            found = Marker.from_bytes(record.value) if record.value else None
    return found


async def _ensure_marker_topic(target: Settings) -> None:
    from aiokafka.admin import NewTopic

    admin = kafka.admin(target, request_timeout_ms=kafka.TOPICS_TIMEOUT_MS)
    await admin.start()
    try:
        if marker_topic(target) not in set(await admin.list_topics()):
            await admin.create_topics([NewTopic(marker_topic(target), 1, 1, topic_configs=COMPACT)])
    finally:
        await admin.close()


async def agree_on_key(source: Settings, target: Settings) -> None:
    """The target records the source's result-key fingerprint, so its workers must sign and
    check with the key the copied results were signed with (a worker with another key refuses
    to start, naming the setting, instead of refusing every copied result as forged)."""
    from .versions.registry import read_registry, set_result_key

    theirs = (await read_registry(source)).result_key
    mine = (await read_registry(target)).result_key
    if theirs is None or mine == theirs:
        return
    if mine is not None:
        raise RepartitionRefused(
            f"namespace {target.namespace!r} checks model results with another key (fingerprint {mine[:12]}) "
            f"than {source.namespace!r} signed them with ({theirs[:12]}): the copied results would be "
            "refused as forged; copy into a new namespace")
    await set_result_key(target, theirs)


async def _start(source: Settings, target: Settings) -> tuple[Marker, bool]:
    """Check the source, create the target's topics; the marker to start from, and whether it
    was there before (a copy resumed)."""
    if target.namespace == source.namespace:
        raise RepartitionRefused("the target namespace must differ from the source")
    src = Topics(source.namespace)
    if not (await partitions_of(source.bootstrap, [src.log])).get(src.log):
        raise RepartitionRefused(f"namespace {source.namespace!r} has no input log {src.log} on "
                                 f"{source.bootstrap}")
    await ensure_topics(target)
    await _ensure_marker_topic(target)
    marker = await read_marker(target)
    if marker is None:
        if await _records_in(target, Topics(target.namespace).log):
            raise RepartitionRefused(
                f"{target.namespace}.log has records that om repartition did not copy from "
                f"{source.namespace!r}: copy into a new (empty) namespace")
        # Marked before the first record is sent: a first run interrupted before its first
        # checkpoint resumes (scanning the target from its start) instead of being refused.
        fresh = Marker(source.namespace, target.partitions)
        await write_marker(target, fresh)
        await agree_on_key(source, target)
        return fresh, False
    if marker.source != source.namespace:
        raise RepartitionRefused(f"namespace {target.namespace!r} is a copy of {marker.source!r}, "
                                 f"not of {source.namespace!r}")
    await agree_on_key(source, target)
    return marker, True


async def write_marker(target: Settings, marker: Marker) -> None:
    producer = kafka.acked_producer(target)
    await producer.start()
    try:
        await producer.send_and_wait(marker_topic(target), marker.to_bytes(), key=MARKER_KEY, partition=0)
    finally:
        await producer.stop()


async def _records_in(settings: Settings, topic: str) -> int:
    from aiokafka import TopicPartition

    parts = [TopicPartition(topic, p) for p in (await partitions_of(settings.bootstrap, [topic]))[topic]]
    consumer = kafka.reader(settings)
    await consumer.start()
    try:
        starts, ends = await consumer.beginning_offsets(parts), await consumer.end_offsets(parts)
        return sum(ends[tp] - starts[tp] for tp in parts)
    finally:
        await consumer.stop()


async def landed_after(target: Settings, marker: Marker) -> dict[int, dict[int, int]]:
    """Per target partition, the highest copied offset of each source partition found after the
    marker's `written` offsets: what an interrupted batch put there (see `already_there`)."""
    from aiokafka import TopicPartition

    topic = Topics(target.namespace).log
    parts = [TopicPartition(topic, p) for p in range(target.partitions)]
    consumer = kafka.reader(target)
    await consumer.start()
    seen: dict[int, dict[int, int]] = {}
    try:
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, marker.written.get(tp.partition, 0))
        while waiting := [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
            for tp, records in (await consumer.getmany(*waiting, timeout_ms=1000)).items():
                for record in records:
                    origin = copied_from(record.headers)
                    if origin is not None and record.offset < ends[tp]:
                        mine = seen.setdefault(tp.partition, {})
                        mine[origin[0]] = max(mine.get(origin[0], -1), origin[1])
    finally:
        await consumer.stop()
    return seen


class _Copy:
    """One run of the copy: a consumer of the source's log and cache, a producer to the target."""

    def __init__(self, source: Settings, target: Settings, marker: Marker, seen: dict[int, dict[int, int]],
                 consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        self.target, self.marker, self.seen = target, marker, seen
        self.consumer, self.producer = consumer, producer
        self.src, self.dst = Topics(source.namespace), Topics(target.namespace)
        self.pending: list[tuple[int, asyncio.Future[Any]]] = []  # (target partition or -1, ack)
        self.written = dict(marker.written)
        self.copied = self.skipped = self.cache_copied = 0
        self.pending_bytes = 0
        self.marked = 0  # of `copied`, what the marker counts already
        self.last_mark = time.monotonic()

    async def take(self, fetched: dict[Any, list[Any]]) -> None:
        """Send a fetch's records to the target (the log's re-keyed, the cache's as they are)."""
        for tp, records in fetched.items():
            for r in records:
                self.pending_bytes += len(r.value or b"")
                if tp.topic == self.src.cache:
                    self.pending.append((-1, await self.producer.send(
                        self.dst.cache, r.value, key=r.key, headers=list(r.headers or ()), timestamp_ms=r.timestamp)))
                    self.cache_copied += 1
                    continue
                where = target_partition(r.key, tp.partition, self.target.partitions)
                if already_there(self.seen, where, tp.partition, r.offset):
                    self.skipped += 1
                    continue
                headers = [*(r.headers or ()), (COPIED_FROM, f"{tp.partition}:{r.offset}".encode())]
                self.pending.append((where, await self.producer.send(
                    self.dst.log, r.value, key=r.key, partition=where, headers=headers, timestamp_ms=r.timestamp)))
                self.copied += 1

    def due(self) -> bool:
        return (len(self.pending) >= CHECKPOINT_RECORDS or self.pending_bytes >= CHECKPOINT_BYTES
                or time.monotonic() - self.last_mark >= CHECKPOINT_S)

    async def checkpoint(self) -> None:
        """Wait for every send's acknowledgement, then record the positions (the marker)."""
        from aiokafka import TopicPartition

        for where, ack in self.pending:
            # Shielded: a Ctrl-C that cancels the copy must not cancel the acknowledgement the
            # last checkpoint (in `repartition`'s finally) waits for.
            meta = await asyncio.shield(ack)
            if where >= 0:
                self.written[where] = max(self.written.get(where, 0), meta.offset + 1)
        self.pending.clear()
        self.pending_bytes = 0
        positions = {}
        for tp in self.consumer.assignment():
            positions[(tp.topic, tp.partition)] = await self.consumer.position(TopicPartition(tp.topic, tp.partition))
        self.marker = replace(
            self.marker, copied=self.marker.copied + self.copied - self.marked,
            log={p: o for (t, p), o in positions.items() if t == self.src.log},
            cache={p: o for (t, p), o in positions.items() if t == self.src.cache}, written=dict(self.written))
        self.marked = self.copied
        await self.producer.send_and_wait(marker_topic(self.target), self.marker.to_bytes(), key=MARKER_KEY,
                                          partition=0)
        self.last_mark = time.monotonic()
        log.debug("repartition checkpoint", extra={"copied": self.marker.copied, "log": self.marker.log})

    async def place(self, parts: list[Any]) -> None:
        """Assign the source's partitions, each at the marker's position (or its beginning)."""
        self.consumer.assign(parts)
        for tp in parts:
            start = (self.marker.log if tp.topic == self.src.log else self.marker.cache).get(tp.partition)
            if start is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, start)


async def repartition(source: Settings, namespace: str, partitions: int, *, exit_when_caught_up: bool = False,
                      progress: Callable[[RepartitionProgress], Any] | None = None,
                      stop: asyncio.Event | None = None) -> RepartitionProgress:
    """Copy `source`'s log and cache into `namespace` with `partitions` partitions, then follow
    the source until `stop` is set (or, `exit_when_caught_up`, stop at its end); the last figures.
    A stopped, or cancelled, copy acknowledges what it sent and marks it first, so it resumes
    exactly.  `stop` is how a caller ends the following: it is looked at between fetches (200 ms at
    most), so ending does not depend on a cancellation finding its way out of the Kafka client
    (once, under a loaded suite, a copy cancelled by Ctrl-C was still running 30 s later)."""
    from aiokafka import TopicPartition

    target = target_settings(source, namespace, partitions)
    marker, resumed = await _start(source, target)  # (a target of another count is refused there)
    seen = await landed_after(target, marker) if resumed else {}
    src = Topics(source.namespace)
    layout = await partitions_of(source.bootstrap, [src.log, src.cache])
    parts = [TopicPartition(t, p) for t in (src.log, src.cache) for p in layout.get(t, [])]
    consumer = kafka.reader(source, auto_offset_reset="earliest", max_partition_fetch_bytes=4 * 1024 * 1024)
    producer = kafka.producer(target, acks="all", enable_idempotence=True, linger_ms=20,
                              max_batch_size=1024 * 1024, max_request_size=4 * 1024 * 1024)
    await consumer.start()
    await producer.start()
    log.info("repartition started", extra={"source": source.namespace, "target": namespace, "partitions": partitions,
                                           "resumed": resumed, "copiedBefore": marker.copied})
    copy = _Copy(source, target, marker, seen, consumer, producer)
    started = time.monotonic()
    caught: float | None = None
    bulk = 0  # records copied when it first caught up
    try:
        await copy.place(parts)
        log_parts = [tp for tp in parts if tp.topic == src.log]
        last_shown = 0.0
        while True:
            fetched = await consumer.getmany(timeout_ms=200, max_records=5000)
            await copy.take(fetched)
            if copy.due():
                await copy.checkpoint()
            now = time.monotonic()
            stopping = stop is not None and stop.is_set()
            if fetched and now - last_shown < 0.5 and not stopping:
                continue
            last_shown = now
            ends = await consumer.end_offsets(parts)
            positions = {tp: await consumer.position(tp) for tp in parts}
            at_end = all(positions[tp] >= ends[tp] for tp in parts)
            if at_end and caught is None:
                await copy.checkpoint()
                caught, bulk = round(time.monotonic() - started, 2), copy.copied
                log.info("repartition caught up", extra={"copied": copy.copied, "seconds": caught})
            elapsed = max(time.monotonic() - started, 1e-6)
            rate = bulk / caught if caught else copy.copied / elapsed
            figures = RepartitionProgress(
                source.namespace, namespace, partitions, copy.copied, copy.skipped, copy.cache_copied,
                position=sum(positions[tp] for tp in log_parts), total=sum(ends[tp] for tp in log_parts),
                elapsed_s=round(elapsed, 2), records_per_s=round(rate, 1),
                caught_up=at_end, caught_up_s=caught, resumed=resumed)
            if progress is not None:
                progress(figures)
            if (at_end and exit_when_caught_up) or stopping:
                await copy.checkpoint()
                return figures
    finally:
        try:
            if copy.pending:
                await copy.checkpoint()
        finally:
            await consumer.stop()
            await producer.stop()
            log.info("repartition stopped", extra={"copied": copy.copied, "skipped": copy.skipped,
                                                   "cacheCopied": copy.cache_copied,
                                                   "marked": copy.marker.copied})
