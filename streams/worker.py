"""The Faust worker: the fold agent and the model agents around the pure engine.

The fold agent only moves bytes.  It reads the one input log, `<ns>.log` (messages, agent-loop
markers, commands and the model agents' results, in the order the fold applies them), and for
each record it:

1. checks the input limits (`omstream.limits`: size and JSON depth on the raw bytes, parts,
   characters per part and `createdAt` against the record's log time after decoding, held
   inputs per memory) and decodes it (unreadable records go to `<ns>.dlq` with the reason and
   the original bytes; a model result without the model agents' signature too, see `signing`);
2. loads the memory's state and skips the record if the state already folded its offset
   (a redelivery after a crash);
3. calls `fold`;
4. sends the emitted events and jobs and waits until the broker has them;
5. stores the new state, with the record's offset, in the RocksDB table and waits until the
   broker has the state's changelog record.

Steps 1 to 3 and the encoding of step 4 are `fold_record`, which never raises: any exception
there, and any output larger than `MAX_OUTPUT_BYTES` (checked before anything is sent), dead-
letters the record (`fold-error`, `output-too-large`) and leaves the memory's state as it was.
A model answer that cannot be applied ends its cycle as failed instead (its `*-failed` event,
error "could not apply the model's answer: ...") and is dead-lettered too.  The model agents
answer every job (`answer_job`): an unreadable job that still names its cycle, a run that
raises and a run past `job_deadline_ms` all write a failed result, signed like any other.

Step 4 before step 5 is what makes a crash harmless: a state is never stored ahead of its
outputs, and outputs sent twice carry the same deterministic ids, so consumers drop the copy.

The end of step 5 is what keeps the committed input position behind the durable state.  Faust
commits a record's offset (every `broker_commit_every` records or `broker_commit_interval`
seconds) only once the agent has moved past it, and a table write alone only queues its
changelog record.  Waiting for the changelog ack before taking the next record means: every
record below the committed position has its state (with its offset) in the changelog, which is
what a restart (or another worker) restores from.  Records after the committed position are
redelivered; the ones the stored state already covers are skipped (their state is written
again, since the copy in the local RocksDB may be one whose changelog record the crash lost),
the rest are refolded from that state, giving the same outputs with the same ids.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, get_args

import faust
import orjson

from omstream.schemas.codec import DecodeFailure, decode_input, decode_job, encode
from omstream.schemas.control import ResourceDeleted
from omstream.schemas.jobs import JobKind, ModelJob, ModelResult
from omstream.schemas.messages import Message
from omstream.engine.fold import EngineConfig, fold, holds, memory_key, new_state
from omstream.engine.state import MemoryState
from omstream.models.calls import RetryPolicy, warm_up
from omstream.models.hooks import Hooks, run_job_with_hooks

from .limits import Limits, check_held, check_message, check_raw
from .settings import Settings
from .signing import HEADER, result_key, sign, signed
from .topics import Topics

__all__ = ["FoldContext", "Outcome", "answer_job", "build_app", "dead_letter", "fold_record", "log_model_call"]

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


def _stamped(events: tuple, offset: int) -> list:
    """The events of one input record with its log offset, the last one marked: readers wait
    for their own writes with it (same partition: `<ns>.events` and `<ns>.log` are both keyed
    by the memory key with the default partitioner and have the same partition count)."""
    last = len(events) - 1
    return [e.model_copy(update={"input_offset": offset, "input_last": True if i == last else None})
            for i, e in enumerate(events)]


def _load_state(raw: bytes | None) -> MemoryState | None:
    return MemoryState.model_validate_json(raw) if raw else None


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


@dataclass(frozen=True)
class Outcome:
    """What to do for one input record: send `records`, then store `state` under `key` (None:
    the memory's state stays as it was)."""

    records: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    key: bytes = b""
    state: bytes | None = None


class _Refused(Exception):
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
    return datetime.fromtimestamp(ms / 1000, timezone.utc) if ms is not None else None


def fold_record(ctx: FoldContext, message, stored: Callable[[bytes], bytes | None]) -> Outcome:
    """Everything the fold agent does for one record, except the I/O; never raises.

    `stored(key)` reads a memory's stored state.  Any failure to decode, check, fold or encode
    the record, and any output larger than `MAX_OUTPUT_BYTES`, dead-letters the record and
    leaves the state as it was; a model result that cannot be applied ends its cycle with the
    cycle's failed event instead (and is dead-lettered too), so no cycle waits for it forever.
    """
    try:
        return _fold_checked(ctx, message, stored)
    except _Refused as refused:
        return _dead(ctx, message, refused.code, refused.reason)
    except Exception as exc:  # noqa: BLE001 - nothing may stop the fold agent
        log.warning("fold failed", exc_info=True, extra={"topic": message.topic, "offset": message.offset})
        return _dead(ctx, message, "fold-error", f"{type(exc).__name__}: {exc}"[:2000])


def _fold_checked(ctx: FoldContext, message, stored: Callable[[bytes], bytes | None]) -> Outcome:
    violation = check_raw(message.value, ctx.limits)
    if violation is not None:
        raise _Refused(violation.code, violation.reason)
    record = decode_input(message.value)
    if isinstance(record, DecodeFailure):
        raise _Refused(record.code, record.reason)
    key = _checked_key(ctx, message, record)
    if isinstance(record, Message):
        violation = check_message(record, ctx.limits, _log_time_ms(message))
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    kbytes = key.encode()
    raw_state = stored(kbytes)
    state = _load_state(raw_state)
    if state is not None and message.offset <= state.offsets.get(message.topic, -1):
        # Folded before a crash; its outputs were sent before the state was stored.  The
        # state may be only in the local RocksDB: make it durable before moving on.
        return Outcome([], kbytes, raw_state)
    if state is None:
        resource = getattr(record, "resource_id", None)
        state = new_state(key, record.thread_id or resource, resource)
    if holds(state, record, ctx.config, log_time=_log_time(message)):
        violation = check_held(len(state.held), ctx.limits)
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    try:
        return _fold_outcome(ctx, message, kbytes, state, record)
    except Exception as exc:
        if not isinstance(record, ModelResult) or not record.ok:
            raise
        return _fail_result(ctx, message, kbytes, state, record, exc)


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


def _fold_outcome(ctx: FoldContext, message, kbytes: bytes, state: MemoryState, record) -> Outcome:
    """Fold, encode every output and check its size before anything is sent."""
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
    offsets = {**folded.state.offsets, message.topic: message.offset}
    state_bytes = folded.state.model_copy(update={"offsets": offsets}).model_dump_json().encode()
    if len(state_bytes) > MAX_OUTPUT_BYTES:
        # The state is a record too (the table's changelog): one the broker refuses would stop
        # the worker.  Refusing the input keeps the memory as it was.
        raise _Refused("output-too-large", f"folding the record makes the memory's state "
                       f"{len(state_bytes)} bytes; the limit is {MAX_OUTPUT_BYTES} (below the "
                       "broker's max.message.bytes)")
    return Outcome(records, kbytes, state_bytes)


def _fail_result(ctx: FoldContext, message, kbytes: bytes, state: MemoryState, result: ModelResult,
                 exc: Exception) -> Outcome:
    """A model answer the fold could not apply: end its cycle as failed, dead-letter the answer."""
    code = exc.code if isinstance(exc, _Refused) else "fold-error"
    reason = exc.reason if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, _Refused):
        log.warning("model result could not be applied", exc_info=True,
                    extra={"cycle": result.cycle_id, "offset": message.offset})
    failed = result.model_copy(update={
        "ok": False, "output": None, "error_code": code,
        "error": f"could not apply the model's answer: {reason}"[:2000]})
    outcome = _fold_outcome(ctx, message, kbytes, state, failed)
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
            "request_hash": text("requestHash", "unreadable"), "model": text("model", "unknown")}


def failed_result(fields: dict[str, Any], started: datetime, code: str, error: str) -> ModelResult:
    """A failed answer to a job (`fields` as `_read_job_fields` returns them)."""
    return ModelResult(**fields, ok=False, error=error[:2000], error_code=code, attempts=0,
                       started_at=started, completed_at=datetime.now(timezone.utc))


def _job_fields(job: ModelJob) -> dict[str, Any]:
    return {"kind": job.kind, "cycle_id": job.cycle_id, "memory_key": job.memory_key,
            "thread_id": job.thread_id, "request_hash": job.request_hash, "model": job.model}


async def answer_job(raw: bytes | None, run: Callable[[ModelJob], Awaitable[ModelResult]],
                     deadline_s: float) -> ModelResult | str:
    """The answer to one `<ns>.jobs` record, always, unless it names no cycle to answer.

    A job that cannot be decoded, a run that raises and a run past `deadline_s` all answer with
    a failed result (`invalid-job`, `error`, `deadline`), so the cycle waiting for it ends.
    Returns the reason instead when the record names no memory key and cycle id.
    """
    started = datetime.now(timezone.utc)
    try:
        job = decode_job(raw or b"")
    except ValueError as exc:
        fields = _read_job_fields(raw)
        if fields is None:
            return f"invalid model job: {exc}"
        return failed_result(fields, started, "invalid-job", f"the model job could not be read: {exc}")
    try:
        return await asyncio.wait_for(run(job), deadline_s)
    except asyncio.TimeoutError:
        return failed_result(_job_fields(job), started, "deadline",
                             f"no answer within the job deadline ({deadline_s * 1000:.0f} ms)")
    except Exception as exc:  # noqa: BLE001 - every job gets an answer
        log.warning("model job failed", exc_info=True, extra={"cycle": job.cycle_id})
        return failed_result(_job_fields(job), started, "error", f"{type(exc).__name__}: {exc}")


class StateTable(faust.Table):
    """The state table; `changelog_sent` is the broker's ack of the latest write's changelog
    record (Faust queues it and does not wait)."""

    changelog_sent: asyncio.Future | None = None

    def send_changelog(self, *args, **kwargs):
        fut = super().send_changelog(*args, **kwargs)
        self.changelog_sent = fut
        return fut


def build_app(settings: Settings) -> faust.App:
    topics = Topics(settings.namespace)
    config = EngineConfig(settings.om)
    (settings.data_dir / "worker").mkdir(parents=True, exist_ok=True)  # faust makes only the last level
    app = faust.App(
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
        Table=StateTable,
    )
    inputs = app.topic(topics.log, key_type=bytes, value_type=bytes)
    jobs = app.topic(topics.jobs, key_type=bytes, value_type=bytes)
    state_table = app.Table(
        "state", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
        options={"block_cache_size": 16 * 1024**2, "block_cache_compressed_size": 4 * 1024**2},
    )
    policy = RetryPolicy.from_settings(settings)

    async def store(key: bytes, value: bytes) -> None:
        """Write a state and wait until its changelog record is on the broker (see the module
        docstring: the committed input position must not run ahead of the durable state)."""
        state_table[key] = value
        await state_table.changelog_sent

    key_for_results = result_key(settings.result_key, settings.data_dir)
    context = FoldContext(settings, topics, config, Limits.from_settings(settings), key_for_results)

    @app.agent(inputs, name="fold")
    async def fold_agent(stream):
        async for event in stream.events():
            # fold_record never raises: a bad record becomes a dead letter, not a restart.
            outcome = fold_record(context, event.message, state_table.get)
            await send_all(app, outcome.records)
            if outcome.state is not None:
                await store(outcome.key, outcome.state)

    @app.agent(jobs, name="models", concurrency=settings.model_concurrency)
    async def model_agent(stream):
        hooks = Hooks.from_config(settings.om)  # §13 lifecycle hooks; they never fail a job
        await asyncio.to_thread(warm_up)
        log.info("model agent ready")
        async for event in stream.events():
            message = event.message
            result = await answer_job(message.value, lambda job: run_job_with_hooks(job, policy, hooks),
                                      settings.job_deadline_ms / 1000)
            if isinstance(result, str):
                await send_all(app, _dead(context, message, "invalid", result).records)
                continue
            log_model_call(result)
            value = encode(result)
            await send_all(app, [(topics.log, result.memory_key.encode(), value)],
                           headers=[(HEADER, sign(key_for_results, value))])

    app.om_state_table = state_table  # type: ignore[attr-defined]
    return app
