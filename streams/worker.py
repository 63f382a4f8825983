"""The Faust worker: the fold agent and the model agents around the pure engine.

The fold agent only moves bytes.  It reads the one input log, `<ns>.log` (messages, agent-loop
markers, commands and the model agents' results, in the order the fold applies them), in
batches (`Intake.batches`: what was fetched, up to `batch_max`, at most `memory_batch_max` of
one memory, a memory holding more inputs than that in batches of its own after the others', see
`omstream.backlog`), and for each batch it:

1. for each record, in log order (a memory's records always in their order): checks the input
   limits (`omstream.limits`: size and JSON depth on the raw bytes, parts, characters per part
   and `createdAt` against the record's log time after decoding, held inputs per memory) and
   decodes it (unreadable records go to `<ns>.dlq` with the reason and the original bytes; a
   model result without the model agents' signature too, see `signing`); loads the memory's
   state, once per batch (`storage`); skips the record if the state already folded its offset
   (a redelivery after a crash); calls `fold` and checks the size of every output and state
   record it makes;
2. sends every event, job and dead letter of the batch and waits until the broker has them;
3. writes the records of each touched memory's state that changed (`storage`), with the last
   offset folded, to the table's changelog, waits until the broker has them, and only then to
   the local RocksDB (`StateStore`); then acks the batch's records.

Step 3 runs while the next batch goes through steps 1 and 2: that batch folds the memories
from what step 3 is storing (`Memories(unsaved=...)`), and from a cache of the memories last
stored (`StateCache`) instead of reading them back.  Stores stay in batch order: a batch's
store starts when the previous one has finished.

Step 1 is `fold_batch`, which never raises: any exception, and any output or state record
larger than `MAX_OUTPUT_BYTES`, dead-letters the record (`fold-error`, `output-too-large`) and
leaves the memory's state as it was.  A model answer that cannot be applied ends its cycle as
failed instead (its `*-failed` event, error "could not apply the model's answer: ...") and is
dead-lettered too.  A stored state that cannot be read is dead-lettered (`state-unreadable`)
and the memory starts again.  The model agents answer every job (`answer_job`): an unreadable
job that still names its cycle, a run that raises and a run past `job_deadline_ms` all write a
failed result, signed like any other.

Step 2 before step 3 is what makes a crash harmless: a state is never stored ahead of its
outputs, and outputs sent twice carry the same deterministic ids, so consumers drop the copy.
A record is acked, so its offset may be committed, only once its batch's states are stored,
so every record below the committed position has its state (with its offset) in the changelog,
which is what a restart (or another worker) restores from.  Records after the committed
position are redelivered; the ones the stored state already covers are skipped, the rest are
refolded from that state, giving the same outputs with the same ids.  Effectively once, not
Kafka transactions: see the README's reliability section.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any, get_args

import faust
import faust.transport.drivers.aiokafka
import orjson
import rocksdict
from faust.types import TP

from omstream.engine.extraction import import_references
from omstream.engine.fold import EngineConfig, addressed, fold, holds, memory_key, new_state
from omstream.engine.state import MemoryState
from omstream.models import local as local_models
from omstream.models.cache import ResultCache, answer_from
from omstream.models.calls import RetryPolicy, untimed, warm_up
from omstream.models.capabilities import takes_attachments
from omstream.models.hooks import Hooks, run_job_with_hooks
from omstream.schemas.codec import DecodeFailure, decode_input, decode_job, encode
from omstream.schemas.control import ResourceDeleted
from omstream.schemas.errors import OmError
from omstream.schemas.jobs import JobKind, ModelJob, ModelResult
from omstream.schemas.messages import Message

from .backlog import Backlog, Intake
from .limits import Limits, check_held, check_message, check_raw
from .settings import LIVE, Settings
from .signing import HEADER, result_key, sign, signed
from .storage import Memories, StateCache, TooLarge
from .topics import Topics
from .versions import WorkerStats, register, stats_path, version_info

__all__ = ["FoldContext", "Outcome", "answer_job", "build_app", "dead_letter", "fold_batch", "fold_record",
           "log_model_call"]

log = logging.getLogger("omstream.worker")


def dead_letter(*, code: str, reason: str, topic: str, partition: int, offset: int,
                key: bytes | None, value: bytes | None) -> bytes:
    """A `<ns>.dlq` record: why, where from, and the original bytes (base64)."""
    return orjson.dumps({
        "type": "dead-letter", "code": code, "reason": reason,
        "source": {"topic": topic, "partition": partition, "offset": offset},
        "key": key.decode("utf-8", "replace") if key is not None else None,
        "value": base64.b64encode(value or b"").decode(),
    }, option=orjson.OPT_SORT_KEYS)


async def send_all(app: faust.App, records: list[tuple[str, bytes, bytes]],
                   headers: list[tuple[str, bytes]] | None = None) -> None:
    """Send every record and wait until the broker acknowledges all of them."""
    futures = [await app.producer.send(topic, key, value, partition=None, timestamp=None, headers=headers)
               for topic, key, value in records]
    await asyncio.gather(*futures)


async def until_done(what: str, attempt: Callable[[], Awaitable[None]], *, first_delay: float = 0.1,
                     max_delay: float = 5.0) -> None:
    """Run `attempt` until it succeeds (sends to a broker that is restarting fail for a while);
    each failure is logged.  Cancellation still stops it."""
    delay = first_delay
    while True:
        try:
            await attempt()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried, and said so
            log.error("could not %s; retrying in %.1f s", what, delay,
                      extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)


def log_model_call(result: ModelResult) -> None:
    """INFO for an answer; WARNING for a failed call (after its retries and fallbacks), with its
    error code and status, since the cycle then fails and the memory keeps its messages raw."""
    fields = {"cycle": result.cycle_id, "kind": result.kind, "model": result.model, "ok": result.ok,
              "attempts": result.attempts}
    if result.ok:
        log.info("model call", extra=fields)
        return
    log.warning("model call failed: %s", result.error_code or "error", extra={
        **fields, "errorCode": result.error_code, "errorStatus": result.error_status,
        "error": (result.error or "")[:300]})


def count_call(stats: WorkerStats, result: ModelResult) -> None:
    """A result sent: a cache hit, or a model call (with its cost when litellm knew the price)."""
    if result.cached:
        stats.cache_hits += 1
        return
    stats.model_calls += 1
    cost = ((result.provider_metadata or {}).get("litellm") or {}).get("cost")
    if isinstance(cost, (int, float)):
        stats.cost_usd += cost


def _stamped(events: tuple, offset: int) -> list:
    """The events of one input record with its log offset, the last one marked: readers wait
    for their own writes with it (same partition: `<ns>.events` and `<ns>.log` are both keyed
    by the memory key with the default partitioner and have the same partition count)."""
    last = len(events) - 1
    return [e.model_copy(update={"input_offset": offset, "input_last": True if i == last else None})
            for i, e in enumerate(events)]


#: Largest output record the fold agent sends; the broker's default `max.message.bytes` is ~1 MB.
MAX_OUTPUT_BYTES = 900 * 1024


@dataclass(frozen=True)
class FoldContext:
    """What the fold agent needs besides the record and the stored state."""

    settings: Settings
    topics: Topics
    config: EngineConfig
    limits: Limits
    result_key: bytes
    threads: frozenset[str] = frozenset()  # empty: every thread


@dataclass(frozen=True)
class Outcome:
    """What one input record does: send `records`; the memory under `key` becomes `state`
    (None: it stays as it was)."""

    records: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    key: bytes = b""
    state: MemoryState | None = None


class _Refused(OmError):
    """A record the fold agent dead-letters with `code` (raised inside `fold_record` only)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def _dead(ctx: FoldContext, message, code: str, reason: str) -> Outcome:
    log.warning("dead-lettered", extra={"topic": message.topic, "offset": message.offset,
                                        "code": code, "reason": reason[:300]})
    return Outcome([(ctx.topics.dlq, message.key or b"", dead_letter(
        code=code, reason=reason, topic=message.topic, partition=message.partition,
        offset=message.offset, key=message.key, value=message.value))])


def _log_time_ms(message) -> int | None:
    """The record's Kafka timestamp in ms (the log's time), or None when the broker gave none."""
    stamp = getattr(message, "timestamp", None)
    return round(stamp * 1000) if stamp else None


def _log_time(message) -> datetime | None:
    ms = _log_time_ms(message)
    return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None


def fold_record(ctx: FoldContext, message, memories: Memories) -> Outcome:
    """Everything the fold agent does for one record, except the I/O; never raises.

    `memories` holds the states of the batch the record belongs to.  Any failure to decode,
    check, fold or encode the record, and any output or state record larger than
    `MAX_OUTPUT_BYTES`, dead-letters the record and leaves the memory's state as it was; a model
    result that cannot be applied ends its cycle with the cycle's failed event instead (and is
    dead-lettered too), so no cycle waits for it forever.
    """
    try:
        return _fold_checked(ctx, message, memories)
    except _Refused as refused:
        return _dead(ctx, message, refused.code, refused.reason)
    except Exception as exc:  # noqa: BLE001 - nothing may stop the fold agent
        log.warning("fold failed", exc_info=True, extra={"topic": message.topic, "offset": message.offset})
        return _dead(ctx, message, "fold-error", f"{type(exc).__name__}: {exc}"[:2000])


def fold_batch(ctx: FoldContext, messages: Iterable, memories: Memories) -> list[tuple[str, bytes, bytes]]:
    """Fold a batch of records in log order: the records to send; the memories' new states stay
    in `memories` (`memories.writes()` is what to store).  Never raises."""
    records: list[tuple[str, bytes, bytes]] = []
    for message in messages:
        outcome = fold_record(ctx, message, memories)
        records += outcome.records
        if outcome.state is not None:
            memories.put(outcome.key, outcome.state)
    for key, partition, reason, raw in memories.unreadable:
        log.error("stored state unreadable; the memory starts again", extra={"key": key.decode(errors="replace")})
        records.append((ctx.topics.dlq, key, dead_letter(
            code="state-unreadable", reason=f"the memory's stored state could not be read and was "
            f"replaced by an empty one (its bytes are here): {reason}", topic=ctx.topics.state_changelog(
                ctx.settings.app_id), partition=partition, offset=-1, key=key, value=raw)))
    return records


def _fold_checked(ctx: FoldContext, message, memories: Memories) -> Outcome:
    violation = check_raw(message.value, ctx.limits)
    if violation is not None:
        raise _Refused(violation.code, violation.reason)
    record = decode_input(message.value)
    if isinstance(record, DecodeFailure):
        raise _Refused(record.code, record.reason)
    key = _checked_key(ctx, message, record)
    if isinstance(record, ModelResult) and not addressed(record, ctx.config):
        return Outcome()  # another version's: not even its position is part of this memory
    if ctx.threads and getattr(record, "thread_id", None) not in ctx.threads:
        return Outcome()  # a version of some threads only (`om replay --threads`)
    if isinstance(record, Message):
        violation = check_message(record, ctx.limits, _log_time_ms(message))
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    kbytes = key.encode()
    state = memories.get(kbytes, message.partition)
    if state is not None and message.offset <= state.offsets.get(message.topic, -1):
        # Folded before a crash: its outputs were sent before its state was stored, and the
        # local store is written only after the changelog has it, so there is nothing to redo.
        return Outcome()
    if state is None:
        resource = getattr(record, "resource_id", None)
        state = new_state(key, record.thread_id or resource, resource)
        seq = memories.salvaged_seq(kbytes)
        if seq:
            state = state.model_copy(update={"seq": seq})
    # A settled version holds a memory's inputs until its own result comes back, and that
    # result is written at the log's end: a replay reading history holds a memory's whole
    # remaining history at first.  Refusing any of it would make the replay depend on how far
    # ahead it read, so `max_held` bounds the versions that follow the log only.
    if not ctx.config.settled and holds(state, record, ctx.config, log_time=_log_time(message)):
        violation = check_held(len(state.held), ctx.limits)
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    try:
        return _fold_outcome(ctx, message, kbytes, state, record, memories)
    except Exception as exc:
        if not isinstance(record, ModelResult) or not record.ok:
            raise
        return _fail_result(ctx, message, kbytes, state, record, exc, memories)


def _checked_key(ctx: FoldContext, message, record) -> str:
    """The record's memory key, after the checks that need no state (signature, scope, key)."""
    if isinstance(record, ModelResult):
        if not signed(ctx.result_key, message.value, message.headers):
            raise _Refused("forged-result", "a model-result record without a valid signature: "
                           "results are written by the model agents only")
        key = record.memory_key
    elif (isinstance(record, ResourceDeleted) and record.thread_id is None
          and ctx.settings.om.scope == "thread"):
        raise _Refused("invalid", "resource-deleted needs a threadId in thread scope: send one per "
                       "thread of the resource, keyed by its memory key")
    else:
        key = memory_key(ctx.settings.om, record.thread_id, record.resource_id)
    if (message.key or b"").decode("utf-8", "replace") != key:
        raise _Refused("wrong-key", f"record key must be the memory key {key!r} (it was "
                       f"{message.key!r}); all inputs of one memory must share its partition")
    return key


def _fold_outcome(ctx: FoldContext, message, kbytes: bytes, state: MemoryState, record,
                  memories: Memories) -> Outcome:
    """Fold, encode every output and check its size (and the state's) before anything is sent."""
    folded = fold(state, record, ctx.config, log_time=_log_time(message))
    topics = ctx.topics
    records = [(topics.events, kbytes, encode(e)) for e in _stamped(folded.events, message.offset)]
    records += [(topics.jobs, kbytes, encode(j)) for j in folded.jobs]
    for refused in folded.rejected:
        records.append((topics.dlq, kbytes, dead_letter(
            code="conflict", reason=refused.reason, topic=message.topic,
            partition=message.partition, offset=message.offset, key=message.key,
            value=message.value)))
    for topic, _, value in records:
        if len(value) > MAX_OUTPUT_BYTES:
            raise _Refused("output-too-large", f"folding the record makes a {topic} record of "
                           f"{len(value)} bytes; the limit is {MAX_OUTPUT_BYTES} (below the broker's "
                           "max.message.bytes)")
    after = folded.state.model_copy(update={"offsets": {**folded.state.offsets, message.topic: message.offset}})
    try:
        # The state's records go to the table's changelog: one the broker refuses would stop
        # the worker.  Refusing the input keeps the memory as it was.
        memories.check(kbytes, state, after)
    except TooLarge as exc:
        raise _Refused("output-too-large", str(exc)) from None
    return Outcome(records, kbytes, after)


def _fail_result(ctx: FoldContext, message, kbytes: bytes, state: MemoryState, result: ModelResult,
                 exc: Exception, memories: Memories) -> Outcome:
    """A model answer the fold could not apply: end its cycle as failed, dead-letter the answer."""
    code = exc.code if isinstance(exc, _Refused) else "fold-error"
    reason = exc.reason if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, _Refused):
        log.warning("model result could not be applied", exc_info=True,
                    extra={"cycle": result.cycle_id, "offset": message.offset})
    failed = result.model_copy(update={
        "ok": False, "output": None, "error_code": code,
        "error": f"could not apply the model's answer: {reason}"[:2000]})
    outcome = _fold_outcome(ctx, message, kbytes, state, failed, memories)
    dead = _dead(ctx, message, code, f"model result not applied ({reason})"[:2000])
    return Outcome(dead.records + outcome.records, outcome.key, outcome.state)


def _read_job_fields(raw: bytes | None) -> dict[str, Any] | None:
    """The fields of an undecodable job a failed result needs, or None without a memory key
    and a cycle id (then nobody waits for an answer we could address: dead-letter it)."""
    try:
        data = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    key, cycle = data.get("memoryKey"), data.get("cycleId")
    if not (isinstance(key, str) and key and isinstance(cycle, str) and cycle):
        return None

    def text(name: str, default: str) -> str:
        value = data.get(name)
        return value if isinstance(value, str) and value else default

    kind = data.get("kind")
    return {"kind": kind if kind in get_args(JobKind) else "observe", "cycle_id": cycle,
            "memory_key": key, "thread_id": text("threadId", key.split(":", 1)[-1]),
            "request_hash": text("requestHash", "unreadable"), "model": text("model", "unknown"),
            "version": text("version", LIVE), "config_digest": data.get("configDigest") or None}


def failed_result(fields: dict[str, Any], started: datetime, code: str, error: str) -> ModelResult:
    """A failed answer to a job (`fields` as `_read_job_fields` returns them)."""
    return ModelResult(**fields, ok=False, error=error[:2000], error_code=code, attempts=0,
                       started_at=started, completed_at=datetime.now(UTC))


def _job_fields(job: ModelJob) -> dict[str, Any]:
    return {"kind": job.kind, "cycle_id": job.cycle_id, "memory_key": job.memory_key,
            "thread_id": job.thread_id, "request_hash": job.request_hash, "model": job.model,
            "version": job.version, "config_digest": job.config_digest}


async def answer_job(raw: bytes | None, run: Callable[[ModelJob], Awaitable[ModelResult | None]],
                     deadline_s: float) -> ModelResult | str | None:
    """The answer to one `<ns>.jobs` record, always, unless it names no cycle to answer.

    A job that cannot be decoded, a run that raises and a run past `deadline_s` all answer with
    a failed result (`invalid-job`, `error`, `deadline`), so the cycle waiting for it ends.
    Returns the reason instead when the record names no memory key and cycle id, and None when
    `run` does (the answer is in the log already).
    """
    started = datetime.now(UTC)
    try:
        job = decode_job(raw or b"")
    except ValueError as exc:
        fields = _read_job_fields(raw)
        if fields is None:
            return f"invalid model job: {exc}"
        return failed_result(fields, started, "invalid-job", f"the model job could not be read: {exc}")
    try:
        return await asyncio.wait_for(run(job), deadline_s)
    except TimeoutError:
        return failed_result(_job_fields(job), started, "deadline",
                             f"no answer within the job deadline ({deadline_s * 1000:.0f} ms)")
    except Exception as exc:  # noqa: BLE001 - every job gets an answer
        log.warning("model job failed", exc_info=True, extra={"cycle": job.cycle_id})
        return failed_result(_job_fields(job), started, "error", f"{type(exc).__name__}: {exc}")


class _Consumer(faust.transport.drivers.aiokafka.Consumer):
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

    Found while chasing the chaos run's lost records (their cause was the one `_Topic` fixes):
    whatever drops a record, its offset is never committed past, so a restart reads it again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holding: dict[TP, int] = {}  # the committed offset a hole was last logged at

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        """A fetch, with the records of a tapped topic (`_App.taps`) taken out and handed over
        whole.  Faust delivers a record through its conductor, the topic's queue and a stream,
        about 180 us of CPU each: the intake ran at about 1,500 records/s beside the fold, so
        a burst of 2,000 records on one memory held every record behind it for more than a
        second, whatever the fold agent's fairness.  The rest of the fetch goes on as before."""
        records, active = await super()._wait_next_records(timeout)
        taps = self.app.taps
        if records and taps and self.flow_active and not self.should_stop:
            for tp in [tp for tp in records if tp.topic in taps]:
                fetched = records.pop(tp)
                if active is None or tp in active or tp in self._buffered_partitions:
                    await self._hand_over(tp, fetched, taps[tp.topic])
        return records, active

    async def _hand_over(self, tp: TP, fetched: list, tap: Callable[[list], Awaitable[None]]) -> None:
        """What Faust's fetch loop does for each record (skip what was read already, note a gap
        in the offsets so commits pass it), for a whole fetch at once."""
        read = self._read_offset[tp]
        messages = []
        for record in fetched:
            if read is not None and record.offset < read:
                continue
            if read and record.offset - read > 1 and self.app.topics.acks_enabled_for(tp.topic):
                await self._add_gap(tp, read + 1, record.offset)
            message = self._to_message(tp, record)
            self.track_message(message)
            messages.append(message)
            read = record.offset
        if messages:
            await tap(messages)
            self._read_offset[tp] = read

    def _new_consumer_thread(self):
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message) -> bool:
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
        await super().perform_seek()
        for tp in self.assignment():  # not the changelogs: nothing acks or commits them
            if self._committed_offset[tp] is None and self.app.topics.acks_enabled_for(tp.topic):
                self._committed_offset[tp] = await self.position(tp)


class _ConsumerThread(faust.transport.drivers.aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by start(), which comes later
        return consumer


class _Transport(faust.transport.drivers.aiokafka.Transport):
    Consumer = _Consumer


class _Topic(faust.Topic):
    """A topic whose stream buffer is not emptied when the flow resumes.

    Faust empties every stream's buffer when a rebalance (or the recovery at start-up) ends,
    but it resumes the stream partitions and seeks them to the committed offsets *before*
    that: records fetched in between are dropped silently, and the next ones, fetched after
    them, are handled.  The chaos test saw each restarted worker lose the first dozen records
    of a partition that way (model results never folded, jobs never answered, later records
    of the same memory folded before them).  Kept, they are handled in order; what an earlier
    generation left in the buffer is still skipped by the stream (and not acked, `_Consumer`).
    """

    @property
    def queue(self):
        if self._queue is None:
            maxsize = self.app.conf.stream_buffer_maxsize if self.maxsize is None else self.maxsize
            self._queue = self.app.FlowControlQueue(maxsize=maxsize, clear_on_resume=False)
        return self._queue


class _App(faust.App):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: topic -> what receives its records a fetch at a time, instead of a stream
        self.taps: dict[str, Callable[[list], Awaitable[None]]] = {}

    def _new_transport(self):
        return _Transport(self.conf.broker_consumer, self)


#: How long a fetch waits on the broker for records when there are none.
FETCH_MAX_WAIT_MS = 20
#: Records a stream (the model agents') buffers before Faust stops fetching the partition.
STREAM_BUFFER = 500
#: Bytes one fetch brings from a partition (a larger record still comes, alone).
MAX_FETCH_BYTES = 1024 * 1024
#: Records (and their bytes) the fold agent reads ahead of its batches (`omstream.backlog`).
BACKLOG_RECORDS = 5000
BACKLOG_BYTES = 32 * 1024**2


class StateStore:
    """The state table's local RocksDB, written only after the broker has the changelog.

    Faust writes a table's local store at once and its changelog in the background, so after a
    crash the local store could hold a state the changelog never got.  Here a batch's records
    go to the changelog first; once the broker acknowledges them (acks=all) they are written
    to the local store together with the changelog offset they reached.  The local store is
    then never ahead of the changelog: a crash before the local write is repaired by Faust's
    recovery, which replays the changelog from that offset.
    """

    def __init__(self, app: faust.App, table: faust.Table) -> None:
        self.app, self.table = app, table

    def _db(self, partition: int):
        return self.table.data._db_for_partition(partition)

    def read(self, partition: int, key: bytes) -> bytes | None:
        return self._db(partition).get(key)

    def scan(self, partition: int, prefix: bytes) -> list[bytes]:
        keys = []
        for key in self._db(partition).keys(from_key=prefix):
            if not key.startswith(prefix):
                break
            keys.append(key)
        return keys

    async def write(self, writes: list[tuple[int, bytes, bytes | None]]) -> None:
        """Write `Memories.writes` to the changelog, in order, then all of them to the local
        store once the broker has every record.

        One round trip, not one per phase: a memory's records all go to its partition, and the
        producer keeps a partition's records in the order sent (one request in flight per
        broker, a failed batch retried ahead of the later ones), so the changelog holds them
        phase by phase as if each phase had been acknowledged first.  Measured in the burst
        test: the fold agent's wait for the previous batch's store went from 7 to 2 ms (p50)."""
        topic = self.table.changelog_topic.get_topic_name()
        futures = [await self.app.producer.send(topic, key, value, partition=partition,
                                                timestamp=None, headers=None)
                   for partition, key, value in writes]
        reached: dict[int, int] = {}
        for (partition, _, _), meta in zip(writes, await asyncio.gather(*futures)):
            reached[partition] = max(reached.get(partition, -1), meta.offset)
        batches: dict[int, rocksdict.WriteBatch] = defaultdict(lambda: rocksdict.WriteBatch(raw_mode=True))
        for partition, key, value in writes:
            if value is None:
                batches[partition].delete(key)
            else:
                batches[partition].put(key, value)
        for partition, batch in batches.items():
            self._db(partition).write(batch)
            self.table.data.set_persisted_offset(TP(topic, partition), reached[partition])


def build_app(settings: Settings) -> faust.App:
    topics = Topics.of(settings)
    config = EngineConfig(settings.om, settings.version, settled=settings.fold_mode == "settled",
                          takes_attachments=takes_attachments)
    (settings.data_dir / "worker").mkdir(parents=True, exist_ok=True)  # faust makes only the last level
    local_models.configure_from(settings)
    for model in {settings.om.observer_model, settings.om.reflector_model}:
        if local_models.is_local(model) and local_models.is_installed(model):
            local_models.load(model)  # a missing one fails its jobs, saying how to install it
    app = _App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        store="rocksdb://",
        # Per app: table files (and their changelog offsets) belong to one namespace.
        datadir=str(settings.data_dir / "worker" / settings.app_id),
        topic_partitions=settings.partitions,
        topic_allow_declare=False,
        topic_disable_leader=True,
        web_enabled=False,
        key_serializer="raw",
        value_serializer="raw",
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=100,
        broker_commit_interval=1.0,
        # A killed worker's partitions move on once its session times out (Faust's default is
        # 60 s, so a restart waited a minute for the group to rebalance).
        broker_session_timeout=10.0,
        consumer_group_instance_id=settings.instance_id or None,
        Topic=_Topic,
        # The input log is handed to the fold agent's backlog a fetch at a time (`_App.taps`),
        # and fairness between memories is the backlog's (`Intake.batches`).  A fetch is large
        # so that a busy partition is read quickly: the records behind it (other memories')
        # come only with the next fetch.
        stream_buffer_maxsize=STREAM_BUFFER,
        consumer_max_fetch_size=MAX_FETCH_BYTES,
    )
    inputs = app.topic(topics.log, key_type=bytes, value_type=bytes)
    jobs = app.topic(topics.jobs, key_type=bytes, value_type=bytes)
    state_table = app.Table(
        "state", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
        options={"block_cache_size": 16 * 1024**2, "block_cache_compressed_size": 4 * 1024**2},
    )
    policy = RetryPolicy.from_settings(settings)

    store = StateStore(app, state_table)
    cache = StateCache(settings.state_cache)

    key_for_results = result_key(settings.result_key, settings.data_dir)
    context = FoldContext(settings, topics, config, Limits.from_settings(settings), key_for_results,
                          settings.thread_filter)

    async def store_and_ack(batch: list, writes: list, stored: dict) -> None:
        """Store a batch's states, then ack its records (their offsets may be committed)."""
        # Retried until done, never raised: the batch's records are acked only after it.
        await until_done("store a batch's states", lambda: store.write(writes))
        cache.keep(stored)  # after a rebalance, the fold agent clears it before its next fold
        for message in batch:
            app.consumer.ack(message)

    stats_file = stats_path(settings)
    stats = WorkerStats.load(stats_file)
    intake = Intake(Backlog(BACKLOG_RECORDS, BACKLOG_BYTES))
    app.taps[topics.log] = intake.put

    # One actor for all partitions, not one per partition (`isolated_partitions`): Faust stops a
    # partition's actor when the partition is revoked, batch in flight or not.  Its records come
    # from `intake`, not from its stream: the agent subscribes the consumer to the input log.
    @app.agent(inputs, name="fold")
    async def fold_agent(stream):
        cached_generation = None  # the consumer generation `cache` and `unsaved` belong to
        storing: asyncio.Future | None = None  # the previous batch's store_and_ack
        unsaved: dict = {}  # the memories it is storing, as they will be stored
        try:
            async for batch in intake.batches(settings.batch_max, settings.memory_batch_max,
                                              settings.batch_wait_ms / 1000, lambda: app.consumer_generation_id):
                # Never raises: a bad record becomes a dead letter, not a restart.  Outputs first,
                # then the states (see the module docstring).
                started = time.perf_counter()
                generation = app.consumer_generation_id
                if generation != cached_generation:
                    # A rebalance: partitions may have moved and come back, and the recovery may
                    # have rewritten the store.  Read memories from the store again, once the
                    # previous batch is in it.
                    if storing is not None:
                        await storing
                    cache.clear()
                    unsaved, cached_generation = {}, generation
                memories = Memories(store.read, store.scan, MAX_OUTPUT_BYTES, cache, unsaved)
                # Inline, not in a thread: measured, a thread made each batch's fold several times
                # slower (it fights the event loop for the GIL), and `batch_max` bounds the stall.
                records = fold_batch(context, batch, memories)
                folded = time.perf_counter()
                await until_done("send a batch's outputs", lambda records=records: send_all(app, records))
                sent = time.perf_counter()
                writes, unsaved = memories.writes(), memories.stored()
                # The next batch is folded and sent (from `unsaved`) while this one is stored;
                # the stores themselves stay in batch order.
                if storing is not None:
                    await storing
                storing = asyncio.ensure_future(store_and_ack(batch, writes, unsaved))
                for key, loaded in unsaved.items():
                    stats.memories[key.decode()] = [loaded.state.observation_tokens, loaded.state.generation]
                    # Busy: a long queue of inputs behind its cycles (`backlog.lanes`).
                    if len(loaded.state.held) > settings.memory_batch_max:
                        intake.busy.add(key)
                    else:
                        intake.busy.discard(key)
                log.debug("batch", extra={"records": len(batch), "outputs": len(records),
                                          "writes": len(writes),
                                          "foldMs": round((folded - started) * 1000, 1),
                                          "sendMs": round((sent - folded) * 1000, 1),
                                          "waitMs": round((time.perf_counter() - sent) * 1000, 1)})
        finally:
            if storing is not None and not storing.done():
                storing.cancel()  # its records stay unacked: they are read again

    answers = ResultCache(settings.bootstrap, topics.cache,
                          settings.data_dir / "worker" / settings.app_id / "result-cache", key_for_results)

    answering: dict[str, asyncio.Event] = {}  # request hash -> set once its answer is cached

    async def call_or_recall(job: ModelJob) -> ModelResult | None:
        """The answer to a job: from the cache when an equal request was answered before, else
        from the model.  None when the cached answer is in the log already for this very
        cycle, in a form this version applies (the job ran before a crash): nothing to send."""
        cached = answers.get(job)
        if cached is None and job.request_hash in answering:
            # An equal request is being answered (twenty threads may ask the same at once):
            # its answer, once cached, is this one's.  If it failed, this one asks again.
            await answering[job.request_hash].wait()
            cached = answers.get(job)
        if cached is None:
            answering.setdefault(job.request_hash, asyncio.Event())
            result = await run_job_with_hooks(job, policy, hooks)
            return untimed(result, job) if config.settled else result
        if cached.memory_key == job.memory_key and cached.cycle_id == job.cycle_id and addressed(cached, config):
            return None
        return answer_from(cached, job)

    async def answer(message) -> None:
        """Answer one job record: its signed result on the log (or a dead letter), and a new
        answer in the cache."""
        result = None
        try:
            result = await answer_job(message.value, call_or_recall, settings.job_deadline_ms / 1000)
            await publish(message, result)
        finally:
            if isinstance(result, ModelResult) and not result.cached and result.request_hash in answering:
                answering.pop(result.request_hash).set()

    async def publish(message, result: ModelResult | str | None) -> None:
        if result is None:
            stats.cache_hits += 1
            return
        if isinstance(result, str):
            await until_done("dead-letter a job", lambda: send_all(
                app, _dead(context, message, "invalid", result).records))
            return
        log_model_call(result)
        count_call(stats, result)
        value = encode(result)
        await until_done("send a model result", lambda: send_all(
            app, [(topics.log, result.memory_key.encode(), value)],
            headers=[(HEADER, sign(key_for_results, value))]))
        if result.ok and not result.cached:
            # After the log has it: an entry in the cache means the answer is in the log.
            key, entry, headers = answers.entry(result)
            await until_done("cache a model result", lambda: send_all(app, [(topics.cache, key, entry)],
                                                                      headers=headers))
            answers.remember(key, entry)

    hooks = Hooks.from_config(settings.om)  # §13 lifecycle hooks; they never fail a job
    import_references(settings.om)  # extractor code: a missing module stops the start

    # One actor that runs up to `model_concurrency` jobs at a time and acks them in log order.
    # Faust's own `concurrency` acks each actor's jobs as they finish, and Faust commits the
    # first run of acked offsets even when an earlier job is still running if the consumer has
    # not committed yet (its gap check is skipped for a committed offset of None): after a
    # restart that lost jobs, whose cycles then never ended (the chaos run found it).
    @app.agent(jobs, name="models")
    async def model_agent(stream):
        # litellm's import (seconds, in a thread) leaves a large heap of long-lived objects.  The
        # collector's full passes over it stopped the whole process for 100-240 ms each, several
        # times during the import and now and then later (a burst's others waited behind them).
        # No collection during the import, and the heap it leaves is frozen out of later ones
        # (measured after: 16-22 ms each).
        gc.disable()
        try:
            await asyncio.to_thread(warm_up)
        finally:
            gc.enable()
        gc.freeze()
        await answers.start()
        await until_done("register the version", lambda: register(settings, version_info(settings)))
        log.info("model agent ready", extra={"version": settings.version, "foldMode": settings.fold_mode})
        slots = asyncio.Semaphore(settings.model_concurrency)
        running: deque[tuple[Any, asyncio.Task]] = deque()
        acking = asyncio.Lock()
        pending: set[asyncio.Future] = set()  # the loop keeps only weak references to tasks

        def _keep(future: asyncio.Future) -> None:
            pending.add(future)
            future.add_done_callback(pending.discard)

        async def ack_finished() -> None:
            async with acking:
                while running and running[0][1].done():
                    await stream.ack(running.popleft()[0])

        async def run(event) -> None:
            try:
                await answer(event.message)
            finally:
                slots.release()

        async for event in stream.noack().events():
            await slots.acquire()
            task = asyncio.create_task(run(event))
            running.append((event, task))
            # Once it is done (a task is not done inside its own body): ack the finished prefix.
            task.add_done_callback(lambda _: _keep(asyncio.ensure_future(ack_finished())))

    @app.timer(1.0)
    async def save_stats() -> None:
        await asyncio.to_thread(stats.save, stats_file)

    app.om_state_table = state_table  # type: ignore[attr-defined]
    return app
