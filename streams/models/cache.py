"""The model-result cache: every successful answer, by the content hash of its request.

Equal requests (model, settings, provider options, fallbacks, messages, sample) get the same
answer without a second call: a replay pays only for the requests it never made, and a job run
again after a crash is not paid twice.  The cache is the compacted topic `<ns>.cache` (keyed by
request hash, so compaction keeps one answer per request) shared by every version; each worker
keeps a local copy in a RocksDB table under its data directory, with the topic offsets it has
read, so a restart reads only what is new.

An entry is a signed `model-result` record, as on the input log: an entry whose signature does
not verify was not written by a model agent and is never served.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omstream.schemas.codec import encode
from omstream.schemas.jobs import ModelJob, ModelResult

from .. import kafka
from ..signing import HEADER, sign, signed

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer
    from rocksdict import Rdict

__all__ = ["ResultCache", "answer_from"]

log = logging.getLogger(__name__)

_OFFSET = b"\x00offset:"  # local keys of the topic positions read (hashes are hex: no clash)


def answer_from(cached: ModelResult, job: ModelJob) -> ModelResult:
    """The cached answer, addressed to `job`: its cycle, memory and version, marked cached.

    It takes no time: stamped as starting and ending at the job's creation, so a version that
    settles every job decides the same whichever answers came from the cache."""
    return cached.model_copy(update={
        "kind": job.kind, "cycle_id": job.cycle_id, "memory_key": job.memory_key,
        "thread_id": job.thread_id, "version": job.version, "config_digest": job.config_digest,
        "cached": True, "attempts": 0, "started_at": job.created_at, "completed_at": job.created_at,
    })


class ResultCache:
    """A local table of `<ns>.cache`, loaded up to the topic's end by `start` and then followed."""

    def __init__(self, bootstrap: str, topic: str, path: Path, key: bytes) -> None:
        self.bootstrap, self.topic, self.path, self._key = bootstrap, topic, path, key
        self.refused = 0
        self._db: Rdict | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._follow: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the local table and read the topic up to its current end (so every answer
        recorded before this worker started is served), then follow it in the background."""
        from aiokafka import TopicPartition
        from rocksdict import Options, Rdict

        from ..topics import partitions_of

        if self._db is not None:
            return  # started before (the model agent restarted)
        self.path.mkdir(parents=True, exist_ok=True)
        self._db = db = Rdict(str(self.path), options=Options(raw_mode=True))
        partitions = (await partitions_of(self.bootstrap, [self.topic])).get(self.topic, [])
        tps = [TopicPartition(self.topic, p) for p in partitions]
        self._consumer = consumer = kafka.reader(self.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign(tps)
        for tp in tps:
            stored = db.get(_OFFSET + str(tp.partition).encode())
            if stored is not None:
                consumer.seek(tp, int(stored) + 1)
        ends = await consumer.end_offsets(tps)
        loaded = 0
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            loaded += self._take(await consumer.getmany(timeout_ms=500, max_records=5000))
        log.info("result cache loaded", extra={"entries": loaded, "refused": self.refused})
        self._follow = asyncio.create_task(self._follow_topic(consumer))

    async def _follow_topic(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            self._take(await consumer.getmany(timeout_ms=1000, max_records=5000))

    def _take(self, fetched: dict[Any, list[Any]]) -> int:
        """Keep the signed entries of a fetch (aiokafka's partitions to records) and the
        positions read."""
        assert self._db is not None, "start the cache first"
        taken = 0
        for tp, records in fetched.items():
            for record in records:
                if record.value and record.key and signed(self._key, record.value, record.headers):
                    self._db[record.key] = record.value
                    taken += 1
                elif record.value:
                    self.refused += 1
                    log.warning("unsigned cache entry ignored", extra={"partition": tp.partition,
                                                                       "offset": record.offset})
            if records:
                self._db[_OFFSET + str(tp.partition).encode()] = str(records[-1].offset).encode()
        return taken

    def get(self, job: ModelJob) -> ModelResult | None:
        """The recorded answer to an equal request, or None."""
        raw = self._db.get(job.request_hash.encode()) if self._db is not None else None
        return None if raw is None else ModelResult.model_validate_json(raw)

    def entry(self, result: ModelResult) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """The cache record of a successful answer: key, value and signature header."""
        value = encode(result.model_copy(update={"cached": None}))
        return result.request_hash.encode(), value, [(HEADER, sign(self._key, value))]

    def remember(self, key: bytes, value: bytes) -> None:
        if self._db is not None:
            self._db[key] = value

    async def stop(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
        if self._consumer is not None:
            await self._consumer.stop()
        if self._db is not None:
            self._db.close()
            self._db = None
