"""The topics of one namespace, created explicitly with their partition counts and configs.

Every input of the fold is a record of one topic, `<ns>.log`, keyed by the memory key, so one
partition owns a memory and the order in which the fold applies a memory's inputs is the log's.
The output topics share its partition count (events and jobs are keyed the same way).  Creating
them up front matters: a topic auto-created by a producer would get the broker's default
partition count and break that co-partitioning.

A namespace holds memory *versions* (`omstream.versions`): each has its own outputs (events,
jobs, dead letters), consumer group and state table, and all of them fold the one input log.
The live version keeps the names it always had (`<ns>.events`); another version NAME writes
`<ns>.v.NAME.events`.  Two topics are shared by every version: the model-result cache
(`<ns>.cache`, compacted by request hash) and the version registry (`<ns>.versions`), and so is
the key ring `<ns>.keys` (`omstream.crypto`: the wrapped per-memory data keys, compacted so a
shredded key is gone from the broker within `shred_window_ms`, see `keys_config`).

With a namespace key, plain producers (any language, JSON) write to `<ns>.intake` instead of
the log: the worker's relay (`omstream.worker.relay`) seals each record and appends it to the
same partition of `<ns>.log`, in order, then deletes it from the intake (`intake_config`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omstream.schemas.errors import OmError

from . import kafka
from .plural import plural
from .settings import LIVE, Settings, versioned_name

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["TopicLayoutError", "TopicSpec", "Topics", "ensure_topics", "intake_config", "keys_config",
           "memory_partition", "partitions_of", "read_until_end", "sealed"]

FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
WEEK = {"retention.ms": str(7 * 24 * 3600 * 1000)}
COMPACT = {"cleanup.policy": "compact"}


def keys_config(window_ms: int) -> dict[str, str]:
    """The key ring's configs: a tombstoned data key leaves the broker within about
    `window_ms` + `log.cleaner.backoff.ms` (15 s by default) + one cleaning pass.

    Kafka compacts only closed segments: `segment.ms` closes the tombstone's segment at the
    first write after `window_ms` (a ring that shreds writes one then, `KeyRing.tick`), and
    `max.compaction.lag.ms` makes the log cleaner compact a segment that old at its next pass
    whatever the dirty ratio (KIP-354's guarantee; the low ratio only makes earlier passes
    likely).  `min.compaction.lag.ms=0`: no grace for the older record.  The cleaned-away
    segment files are deleted from disk after `file.delete.delay.ms`.  Tombstones themselves
    (no secret in them) stay a day, so a ring that lagged still reads them."""
    window = str(window_ms)
    return {"cleanup.policy": "compact", "segment.ms": window, "max.compaction.lag.ms": window,
            "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": str(24 * 3600 * 1000), "file.delete.delay.ms": "1000"}


def intake_config(window_ms: int) -> dict[str, str]:
    """The plain producers' intake: what the relay has sealed into the log it deletes at once
    (DeleteRecords: no consumer reads it again), and these configs bound how long the bytes stay
    on the broker's disk.  A segment wholly below the deleted offset is removed at the broker's
    next retention check (`log.retention.check.interval.ms`, 5 min by default) plus
    `file.delete.delay.ms`; `segment.ms` = the window closes the active segment at the first
    append after it (the relay appends a tick then, so an idle intake forgets on time too).
    Records the relay never took (it was down) are kept a week, like jobs: losing a producer's
    input would be a silent drop.  `LogAppendTime`: the retention clock is the broker's, not a
    producer's (the relay keeps this timestamp, the fold's log time of the record)."""
    return {"retention.ms": WEEK["retention.ms"], "segment.ms": str(window_ms),
            "message.timestamp.type": "LogAppendTime", "file.delete.delay.ms": "1000"}


class TopicLayoutError(OmError, RuntimeError):
    """Existing topics that do not match this configuration (a user's fix, not a bug)."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


@dataclass(frozen=True)
class Topics:
    namespace: str
    version: str = LIVE

    @classmethod
    def of(cls, settings: Settings) -> Topics:
        return cls(settings.namespace, settings.version)

    @property
    def log(self) -> str:
        """The one ordered input log: messages, agent-loop markers, commands and model results.
        Shared by every version."""
        return f"{self.namespace}.log"

    @property
    def intake(self) -> str:
        """Plain producers' records before the relay seals them into the log (only with a
        namespace key).  Shared by every version, like the log."""
        return f"{self.namespace}.intake"

    @property
    def cache(self) -> str:
        """Model results by request hash, shared by every version (compacted)."""
        return f"{self.namespace}.cache"

    @property
    def versions(self) -> str:
        """The version registry: each version's configuration, and the one readers default to."""
        return f"{self.namespace}.versions"

    @property
    def keys(self) -> str:
        """The per-memory data keys, wrapped (omstream.crypto), shared by every version.  One
        partition: every process reads the same order, which decides a key created twice at once."""
        return f"{self.namespace}.keys"

    @property
    def _prefix(self) -> str:
        return versioned_name(self.namespace, self.version)

    @property
    def jobs(self) -> str:
        return f"{self._prefix}.jobs"

    @property
    def events(self) -> str:
        return f"{self._prefix}.events"

    @property
    def dlq(self) -> str:
        return f"{self._prefix}.dlq"

    @staticmethod
    def state_changelog(app_id: str) -> str:
        """The state table's changelog (Faust names it `<app id>-<table>-changelog`)."""
        return f"{app_id}-state-changelog"

    def specs(self, settings: Settings) -> list[TopicSpec]:
        n = settings.partitions
        return [
            # Every input of the fold, in the order it applies them; replay reads it: kept forever.
            TopicSpec(self.log, n, FOREVER),
            # What projections rebuild from, and what was refused: kept forever too.
            TopicSpec(self.events, n, FOREVER),
            TopicSpec(self.dlq, 1, FOREVER),
            TopicSpec(self.jobs, n, WEEK),
            TopicSpec(self.state_changelog(settings.app_id), n, COMPACT),
            TopicSpec(self.cache, n, COMPACT),
            TopicSpec(self.versions, 1, COMPACT),
            TopicSpec(self.keys, 1, keys_config(settings.shred_window_ms)),
            # Keyed and partitioned as the log, so the relay keeps each memory's order.
            *([TopicSpec(self.intake, n, intake_config(settings.shred_window_ms))] if sealed(settings) else []),
        ]


def sealed(settings: Settings) -> bool:
    """Whether the namespace encrypts content (a namespace key is configured)."""
    return bool(settings.namespace_key or settings.namespace_key_file)


async def ensure_topics(settings: Settings) -> list[str]:
    """Create missing topics; refuse existing ones whose partition count differs. Returns created."""
    from aiokafka.admin import NewTopic

    specs = Topics.of(settings).specs(settings)
    admin = kafka.admin(settings, request_timeout_ms=kafka.TOPICS_TIMEOUT_MS)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            response = await admin.create_topics(
                [NewTopic(s.name, s.partitions, 1, topic_configs=s.config) for s in missing]
            )
            # The broker's metadata may not list a topic created a moment ago: "already exists"
            # then means present (and checked below), any other error is the command's failure.
            existing |= _created_elsewhere(response)
            missing = [s for s in missing if s.name not in existing]
        present = [s for s in specs if s.name in existing]
        if present:
            counts = await _partition_counts(admin, [s.name for s in present])
            wrong = [f"{s.name} has {plural(counts.get(s.name) or 0, 'partition')}, expected {s.partitions}"
                     for s in present if counts.get(s.name) != s.partitions]
            if wrong:
                raise TopicLayoutError(
                    "topic partition counts do not match this configuration: " + "; ".join(wrong)
                    + ". Use another namespace, or set partitions to the existing count."
                )
        return [s.name for s in missing]
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str], *, tries: int = 50) -> dict[str, int]:
    """Partition count per topic.  A topic created a moment ago may show no partitions yet in
    the broker's metadata: ask again (up to about 5 s) rather than report a false mismatch."""
    for _ in range(tries):
        described = await admin.describe_topics(names)
        counts: dict[str, int] = {d["topic"]: len(d["partitions"]) for d in described}
        if all(counts.get(name) for name in names):
            break
        await asyncio.sleep(0.1)
    return counts


def _created_elsewhere(response: Any) -> set[str]:
    """Topics the broker says exist already; raises for any other refusal."""
    from aiokafka.errors import TopicAlreadyExistsError, for_code

    already = set()
    for topic, code, *detail in response.topic_errors:
        if code == TopicAlreadyExistsError.errno:
            already.add(topic)
        elif code != 0:
            message = detail[0] if detail and detail[0] else for_code(code).__name__
            raise TopicLayoutError(f"cannot create topic {topic}: {message}")
    return already


async def partitions_of(bootstrap: str, names: list[str]) -> dict[str, list[int]]:
    """Partition numbers of existing topics, from the broker's metadata."""
    admin = kafka.admin(bootstrap, request_timeout_ms=kafka.TOPICS_TIMEOUT_MS)
    await admin.start()
    try:
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    return {d["topic"]: sorted(p["partition"] for p in d["partitions"]) for d in described}


def memory_partition(key: bytes, partitions: list[int]) -> int:
    """The partition the producer's default partitioner gives a memory key (as `OmClient`
    sends): the one partition of `<ns>.log` that holds that memory."""
    from aiokafka.partitioner import DefaultPartitioner

    return int(DefaultPartitioner()(key, partitions, None))


async def read_until_end(bootstrap: str, topic: str, partitions: list[int],
                         progress: Callable[[int, int], Any] | None = None) -> AsyncIterator[Any]:
    """The records of the partitions, from their start to the end offsets taken now, each
    partition's in order; `progress(read, total)` after each fetch."""
    from aiokafka import TopicPartition

    parts = [TopicPartition(topic, p) for p in partitions]
    consumer = kafka.reader(bootstrap)
    await consumer.start()
    try:
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        starts = await consumer.beginning_offsets(parts)
        ends = await consumer.end_offsets(parts)
        total = sum(ends[tp] - starts[tp] for tp in parts)
        while True:
            positions = {tp: min(await consumer.position(tp), ends[tp]) for tp in parts}
            if progress is not None:
                progress(sum(positions[tp] - starts[tp] for tp in parts), total)
            waiting = [tp for tp in parts if positions[tp] < ends[tp]]
            if not waiting:
                return
            batch = await consumer.getmany(*waiting, timeout_ms=1000)
            for tp, records in batch.items():
                for record in records:
                    # A fetch may reach past the end taken at the start: written since, not read.
                    if record.offset < ends[tp]:
                        yield record
    finally:
        await consumer.stop()
