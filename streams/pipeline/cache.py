"""The model-result cache: every successful answer, by the content hash of its request.

Equal requests (model, settings, provider options, fallbacks, messages, sample) get the same
answer without a second call: a replay pays only for the requests it never made, and a job run
again after a crash is not paid twice.  The cache is the compacted topic `<ns>.cache` (keyed by
request hash, so compaction keeps one answer per request) shared by every version; each worker
keeps a local copy in a RocksDB table under its data directory, with the topic offsets it has
read, so a restart reads only what is new.

An entry is a signed `model-result` record, as on the input log: an entry whose signature does
not verify was not written by a model agent and is never served.

Sealed (a namespace key configured): the cache is per memory, seen through `under(data key)`
(`SealedAnswers`).  An entry is the whole record sealed as one blob under the memory's data key
(its answer, and the request hash it carries, are unreadable once the memory is shredded), signed
over the sealed bytes (so loading verifies without keys), and filed under an HMAC of the request
hash keyed by that data key: a deleted memory's entries cannot even be found, the topic's keys
reveal nothing of the prompts, and an entry that no longer opens is a miss.  Every version folds
a memory with the same data key (the first of its epoch), so a replay still hits the answers of
every memory that was not deleted; what it loses is sharing between memories (twenty threads
asking the same thing call the model once while in flight together, `ModelAgent`, but each keeps
its own entry), and a resource whose epoch rolled (a thread of it deleted) starts afresh, as it
must: its earlier answers hold the deleted thread's text.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omstream.schemas.codec import encode
from omstream.schemas.jobs import ModelJob, ModelResult

from .. import kafka
from ..crypto import PLAIN, DataKey, KeyNotLoaded, Sealer, Shredded, Tampered
from .signing import HEADER, sign, signed

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer
    from rocksdict import Rdict

__all__ = ["ResultCache", "SealedAnswers", "answer_from", "sealed_lookup"]

log = logging.getLogger(__name__)

_OFFSET = b"\x00offset:"  # local keys of the topic positions read (hashes are hex: no clash)
_LOOKUP_LABEL = b"omstream cache lookup v1"


def sealed_lookup(key: DataKey, request_hash: str) -> bytes:
    """The cache key of a request in a sealed namespace: an HMAC of its hash under a subkey of
    the memory's data key (hex, like a plain hash).  Gone with the key: unreachable, and no
    prompt can be confirmed from it."""
    subkey = hmac.new(key.material, _LOOKUP_LABEL, hashlib.sha256).digest()  # the data key used once, here
    return hmac.new(subkey, request_hash.encode(), hashlib.sha256).hexdigest().encode()


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

    def __init__(self, bootstrap: str, topic: str, path: Path, key: bytes, sealer: Sealer = PLAIN) -> None:
        self.bootstrap, self.topic, self.path, self._key = bootstrap, topic, path, key
        self.sealer = sealer
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
        raw = self.raw(job.request_hash.encode())
        return None if raw is None else ModelResult.model_validate_json(raw)

    def raw(self, key: bytes) -> bytes | None:
        """The entry's bytes as stored."""
        return self._db.get(key) if self._db is not None else None

    def under(self, key: DataKey) -> SealedAnswers:
        """The cache of the memory whose data key is `key` (a sealed namespace)."""
        return SealedAnswers(self, self.sealer, key)

    def signature(self, value: bytes) -> list[tuple[str, bytes]]:
        return [(HEADER, sign(self._key, value))]

    def entry(self, result: ModelResult) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """The cache record of a successful answer: key, value and signature header."""
        value = encode(result.model_copy(update={"cached": None}))
        return result.request_hash.encode(), value, self.signature(value)

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


class SealedAnswers:
    """One memory's view of a sealed cache: entries found by `sealed_lookup`, sealed whole under
    the memory's data key `key` (see the module docstring)."""

    def __init__(self, cache: ResultCache, sealer: Sealer, key: DataKey) -> None:
        self.cache, self.sealer, self.key = cache, sealer, key

    def lookup(self, request_hash: str) -> bytes:
        return sealed_lookup(self.key, request_hash)

    def get(self, job: ModelJob) -> ModelResult | None:
        """The memory's recorded answer to an equal request; None also when it no longer opens."""
        raw = self.cache.raw(self.lookup(job.request_hash))
        if raw is None:
            return None
        try:
            opened = self.sealer.open_blob(raw, self.key.memory_key)
        except (Shredded, KeyNotLoaded):
            return None  # shredded between the lookup and now: deleted, a miss
        except Tampered:
            log.warning("cache entry does not authenticate: a miss", extra={"memoryKey": self.key.memory_key})
            return None
        return ModelResult.model_validate_json(opened)

    def entry(self, result: ModelResult) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """Key, sealed value and signature (over the sealed bytes) of a successful answer."""
        value = self.sealer.seal_blob(encode(result.model_copy(update={"cached": None})), self.key)
        return self.lookup(result.request_hash), value, self.cache.signature(value)

    def remember(self, key: bytes, value: bytes) -> None:
        self.cache.remember(key, value)

    def under(self, key: DataKey) -> SealedAnswers:
        return SealedAnswers(self.cache, self.sealer, key)
