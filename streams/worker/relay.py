"""The intake relay: a plain producer's records, sealed, into the one ordered log.

With a namespace key, `OmClient` seals before it writes `<ns>.log`; a producer that writes JSON
itself (any language) writes `<ns>.intake` instead, keyed and partitioned as the log.  The fold
workers relay it: each intake partition is read in order by one relay (a consumer group of the
namespace, shared by every version, since they share the log), and each record is

1. sealed under its owner's data key (`omstream.crypto.sealing.content_owner`: the memory's, or a
   resource memory's message under its thread's); a record that cannot be parsed or routed is
   forwarded as it is, so the fold dead-letters it with its reason, as today;
2. appended to the SAME partition of `<ns>.log` by an idempotent producer, keeping its timestamp
   and headers, with the header `om-intake-from: <partition>:<offset>`; acknowledged by every
   in-sync replica before
3. the intake position is committed (with, as metadata, the log's offset after the batch), and
4. the relayed records are deleted from the intake (DeleteRecords), so no consumer can read
   their plaintext again; `omstream.topics.intake_config` bounds how long their bytes stay on
   the broker's disk, and the relay appends a tick to an idle partition once `segment.ms` has
   passed, so its last segment closes and is removed too.

**Order.** One partition of the intake holds a memory's plain records in the producer's order;
the relay appends them to the memory's partition of the log in that order, so a plain producer's
command still comes after its message, and the log stays the one order the fold applies (a refold
reads the sealed records already written, so it gives the same memory).

**Each record once.** A crash (or a lost group membership) between steps 2 and 3 would append a
batch again: the sealed copy has a new nonce, so the fold could not tell it from a new record (a
message would be taken once more after a deletion that followed it).  So a relay that takes a
partition first reads the log from the offset committed as metadata to its end and skips every
intake offset of its topic it finds there in the header (`already_relayed`): the log partition holds, in
order, a prefix of what the relays sent it.  A partition taken for the first time gets a commit
first (its start, and the log's end), so there is always a bounded place to read from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from omstream.crypto.fields import content_paths
from omstream.crypto.sealing import MARK, Sealer, raw_owner

from .. import kafka

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["INTAKE_FROM", "TICK", "IntakeRelay", "PlainWatch", "already_relayed", "intake_from", "intake_header",
           "owner_of",
           "relay_group", "seal_record"]

log = logging.getLogger(__name__)

#: The header a relayed record carries on the log: `<intake topic>:<partition>:<offset>`.
INTAKE_FROM = "om-intake-from"
#: The header of a tick the relay appends to an idle intake partition (never relayed).
TICK = "om-intake-tick"
#: Records one fetch of the relay brings, and how long it waits at the broker for them: the
#: plaintext window is about one fetch wait plus a produce, a commit and a DeleteRecords.
MAX_RECORDS = 500
FETCH_WAIT_MS = 50

#: The record types a producer writes that carry content (`omstream.crypto.fields.CONTENT_FIELDS`).
PRODUCERS_CONTENT = frozenset({"message", "reflect-requested", "thread-patched"})

Headers = Sequence[tuple[str, bytes]]


def relay_group(namespace: str) -> str:
    """The consumer group of the relays of a namespace (one, whatever the version)."""
    return f"{namespace}.intake-relay"


def intake_header(topic: str, partition: int, offset: int) -> tuple[str, bytes]:
    """The header a record relayed from `topic` carries.  It names the intake topic: a log copied
    into another namespace (`om repartition` keeps headers) holds headers of the old intake, which
    the new namespace's relay must not take for its own."""
    return INTAKE_FROM, f"{topic}:{partition}:{offset}".encode()


def intake_from(headers: Iterable[tuple[str, bytes]] | None, topic: str) -> tuple[int, int] | None:
    """(partition, offset) in intake `topic` of a relayed log record, None for any other."""
    for name, value in headers or ():
        if name == INTAKE_FROM:
            source, partition, offset = value.decode(errors="replace").rsplit(":", 2)
            return (int(partition), int(offset)) if source == topic else None
    return None


def already_relayed(log_headers: Iterable[Headers | None], topic: str, partition: int) -> int:
    """The highest offset of intake `partition` found among the log records' headers (-1: none)."""
    last = -1
    for headers in log_headers:
        origin = intake_from(headers, topic)
        if origin is not None and origin[0] == partition:
            last = max(last, origin[1])
    return last


def owner_of(key: bytes | None, value: bytes | None) -> str | None:
    """Whose data key seals the record, or None when it cannot be sealed (no memory key, not a
    JSON object): forwarded as it is, the fold dead-letters it with its reason."""
    if not key or not value:
        return None
    try:
        return raw_owner(key.decode(), value)
    except UnicodeDecodeError:
        return None


async def seal_record(sealer: Sealer, key: bytes | None, value: bytes | None) -> bytes | None:
    """The record's bytes with its content sealed, or as they were (nothing to seal, or nothing
    the fold would accept: it dead-letters them with the reason it always gives)."""
    owner = owner_of(key, value)
    if owner is None or value is None or not sealer.enabled:
        return value
    try:
        return await sealer.seal(value, owner)
    except (ValueError, TypeError) as exc:  # a content field the cipher cannot take as JSON
        log.info("an intake record of %s is forwarded unsealed: %s", owner, type(exc).__name__)
        return value


def _headers_of(record: Any) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in (record.headers or ()) if k not in (INTAKE_FROM, TICK)]


@dataclass
class _Partition:
    """What the relay knows of one intake partition it holds."""

    skip_through: int = -1  # intake offsets up to this one are on the log already
    last_relay: float = 0.0  # monotonic time of the last relayed record (0: none)
    ticked: bool = True  # no tick owed (nothing relayed since the last one)


@dataclass
class RelayStats:
    relayed: int = 0
    skipped: int = 0  # found on the log already (a batch relayed before a crash)
    deleted_to: dict[int, int] = field(default_factory=dict)  # intake partition -> its start offset


class IntakeRelay:
    """Relays `intake` into `log`, partition for partition (see the module docstring)."""

    def __init__(self, bootstrap: str, intake: str, log_topic: str, group: str, sealer: Sealer, *,
                 tick_after_ms: int | None = None) -> None:
        """`sealer` may be shared (the worker's): the relay's `start`/`stop` of it are counted."""
        self.bootstrap, self.intake, self.log, self.group, self.sealer = bootstrap, intake, log_topic, group, sealer
        self.tick_after_s = None if tick_after_ms is None else tick_after_ms / 1000 + 1
        self.stats = RelayStats()
        self._held: dict[int, _Partition] = {}
        self._lock = asyncio.Lock()  # a batch is relayed whole before its partition is given up
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._ready = asyncio.Event()
        self._owed: dict[TopicPartition, int] = {}  # deletions that failed, tried again each pass

    async def run(self) -> None:
        """Relay until cancelled."""
        from aiokafka import ConsumerRebalanceListener

        relay = self

        class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
            async def on_partitions_revoked(self, revoked: Any) -> None:
                async with relay._lock:
                    for tp in revoked:
                        relay._held.pop(tp.partition, None)
                        relay._owed.pop(tp, None)  # its next relay deletes what was committed

            async def on_partitions_assigned(self, assigned: Any) -> None:
                async with relay._lock:
                    await relay._take(list(assigned))

        await self.sealer.start()
        self._producer = kafka.idempotent_producer(self.bootstrap)
        self._admin = kafka.admin(self.bootstrap)
        self._consumer = kafka.group_reader(self.bootstrap, self.group, auto_offset_reset="earliest",
                                            fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=MAX_RECORDS)
        try:
            await self._producer.start()
            await self._admin.start()
            await self._consumer.start()
            self._consumer.subscribe([self.intake], listener=_Listener())
            while True:
                batch = await self._consumer.getmany(timeout_ms=200)
                async with self._lock:
                    for tp, records in batch.items():
                        if tp.partition in self._held:  # not revoked while fetched
                            await self._relay(tp, records)
                    for tp, before in list(self._owed.items()):
                        await self._delete(tp, before)
                    await self._tick_idle()
                self._ready.set()
        finally:
            for stop in (self._consumer.stop, self._producer.stop, self._admin.close, self.sealer.stop):
                with contextlib.suppress(Exception):
                    await stop()

    async def ready(self) -> None:
        """Until the relay holds its partitions and has made one pass (for tests)."""
        await self._ready.wait()

    # --- taking a partition ---------------------------------------------------------------------
    async def _take(self, tps: list[TopicPartition]) -> None:
        """Place each new partition after what is on the log already (see "Each record once")."""
        from aiokafka import TopicPartition
        from aiokafka.structs import OffsetAndMetadata

        assert self._consumer is not None and self._admin is not None
        if not tps:
            return
        committed = await self._admin.list_consumer_group_offsets(self.group, partitions=tps)
        starts = await self._consumer.beginning_offsets(tps)
        log_ends = await self._consumer.end_offsets([TopicPartition(self.log, tp.partition) for tp in tps])
        first: dict[Any, Any] = {}
        for tp in tps:
            log_end = log_ends[TopicPartition(self.log, tp.partition)]
            mark = committed.get(tp)
            read_from = _int(mark.metadata) if mark is not None and mark.offset >= 0 else None
            state = self._held[tp.partition] = _Partition()
            if read_from is None:  # never committed (or without a place): nothing in flight
                at = mark.offset if mark is not None and mark.offset >= 0 else starts[tp]
                first[tp] = OffsetAndMetadata(at, str(log_end))
                continue
            state.skip_through = await self._relayed_since(tp.partition, read_from, log_end)
            # A relay that stopped between a commit and its DeleteRecords left them readable.
            if mark is not None and mark.offset > starts[tp]:
                self._owed[tp] = mark.offset
        if first:
            await self._consumer.commit(first)

    async def _relayed_since(self, partition: int, start: int, end: int) -> int:
        """The highest intake offset of `partition` on the log between `start` and `end`."""
        from aiokafka import TopicPartition

        if start >= end:
            return -1
        tp = TopicPartition(self.log, partition)
        reader = kafka.reader(self.bootstrap)
        await reader.start()
        try:
            reader.assign([tp])
            reader.seek(tp, start)
            headers: list[Headers | None] = []
            while await reader.position(tp) < end:
                fetched = await reader.getmany(tp, timeout_ms=1000)
                headers += [r.headers for r in fetched.get(tp, []) if r.offset < end]
        finally:
            await reader.stop()
        return already_relayed(headers, self.intake, partition)

    # --- relaying -------------------------------------------------------------------------------
    async def _relay(self, tp: TopicPartition, records: list[Any]) -> None:
        """Steps 1-4 of the module docstring for one fetched batch of one partition."""
        from aiokafka.errors import CommitFailedError, IllegalStateError
        from aiokafka.structs import OffsetAndMetadata

        assert self._producer is not None and self._consumer is not None
        state = self._held[tp.partition]
        sends = []
        for record in records:
            if record.offset <= state.skip_through:
                self.stats.skipped += 1
                continue
            if any(name == TICK for name, _ in record.headers or ()):
                continue  # our own: only there to close a segment
            value = await seal_record(self.sealer, record.key, record.value)
            sends.append(await self._producer.send(
                self.log, value, key=record.key, partition=tp.partition, timestamp_ms=record.timestamp,
                headers=[*_headers_of(record), intake_header(self.intake, tp.partition, record.offset)]))
        acked = [await sent for sent in sends]
        self.stats.relayed += len(acked)
        if acked:
            state.last_relay, state.ticked = time.monotonic(), False
        upto = records[-1].offset + 1
        log_end = (acked[-1].offset + 1) if acked else None
        # The metadata: where a relay taking this partition reads the log from; without a send
        # in this batch the last place still holds (nothing of ours after it but what it covers).
        metadata = str(log_end) if log_end is not None else await self._last_mark(tp)
        try:
            await self._consumer.commit({tp: OffsetAndMetadata(upto, metadata)})
        except (CommitFailedError, IllegalStateError) as exc:
            # The partition moved on: its next relay finds this batch on the log and skips it.
            log.info("intake partition %d moved before its commit (%s)", tp.partition, type(exc).__name__)
            self._held.pop(tp.partition, None)
            return
        await self._delete(tp, upto)

    async def _last_mark(self, tp: TopicPartition) -> str:
        from aiokafka import TopicPartition

        assert self._consumer is not None
        end = (await self._consumer.end_offsets([TopicPartition(self.log, tp.partition)]))
        return str(next(iter(end.values())))

    async def _delete(self, tp: TopicPartition, before: int) -> None:
        """Make the relayed records unreadable; a failure is only delay (the next batch retries)."""
        from aiokafka.admin import RecordsToDelete

        assert self._admin is not None
        try:
            done = await self._admin.delete_records({tp: RecordsToDelete(before_offset=before)})
            self.stats.deleted_to[tp.partition] = int(done.get(tp, before))
            self._owed.pop(tp, None)
        except Exception as exc:  # a moved leader, a timeout: relayed, so only later; tried each pass
            self._owed[tp] = before
            log.warning("could not delete relayed intake records of partition %d yet: %s", tp.partition, exc)

    async def _tick_idle(self) -> None:
        """A tick on each partition idle since `segment.ms`, so its last segment closes."""
        if self.tick_after_s is None or self._producer is None:
            return
        now = time.monotonic()
        for partition, state in self._held.items():
            if not state.ticked and now - state.last_relay > self.tick_after_s:
                state.ticked = True
                await self._producer.send_and_wait(self.intake, b"{}", key=None, partition=partition,
                                                   headers=[(TICK, b"1")])


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


class PlainWatch:
    """Warns once per memory when the log holds a record with content that was not sealed and
    did not come through the relay: a producer writing `<ns>.log` directly while a namespace key
    is configured.  Its record still folds (as before encryption), but its text is outside the
    forgetting guarantee: it stays readable in the log."""

    def __init__(self, limit: int = 100_000) -> None:
        self.warned: set[bytes] = set()
        self.limit = limit

    def note(self, key: bytes | None, value: bytes | None, headers: Headers | Mapping[str, bytes] | None) -> bool:
        """Whether this record is such a plain one (warned about once per memory key)."""
        if not value or MARK.encode() in value or key is None:
            return False
        items = headers.items() if isinstance(headers, Mapping) else (headers or ())
        if any(name == INTAKE_FROM for name, _ in items):
            return False  # relayed: sealed, or nothing the fold accepts
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(data, dict) or str(data.get("type", "message")) not in PRODUCERS_CONTENT:
            return False  # results and outputs are the workers' own, sealed by them
        if not any(_present(data, path) for path in content_paths(data)):
            return False
        if key not in self.warned and len(self.warned) < self.limit:
            self.warned.add(key)
            log.warning("a record of %s with content was written to the log unsealed: it stays readable "
                        "after a deletion. Plain producers write to the intake topic when a namespace key is "
                        "set (docs/forgetting.md)", key.decode(errors="replace"))
        return True

    def tap(self, inner: Callable[[list[Any]], Awaitable[None]]) -> Callable[[list[Any]], Awaitable[None]]:
        """`inner` (the fold's tap of the log) with each record noted first."""
        async def watched(messages: list[Any]) -> None:
            for message in messages:
                self.note(message.key, message.value, message.headers)
            await inner(messages)
        return watched


def _present(data: dict[str, Any], path: str) -> bool:
    holder: Any = data
    for part in path.split("."):
        if not isinstance(holder, dict):
            return False
        holder = holder.get(part)
    return holder is not None
