"""The Faust worker: the fold agent and the model agents around the pure engine.

The fold agent only moves bytes.  It reads the one input log, `<ns>.log` (messages, agent-loop
markers, commands and the model agents' results, in the order the fold applies them), and for
each record it:

1. decodes it (unreadable records go to `<ns>.dlq` with the reason and the original bytes; a
   model result without the model agents' signature too, see `signing`);
2. loads the memory's state and skips the record if the state already folded its offset
   (a redelivery after a crash);
3. calls `fold`;
4. sends the emitted events and jobs and waits until the broker has them;
5. stores the new state, with the record's offset, in the RocksDB table (changelogged).

Step 4 before step 5 is what makes a crash harmless: a state is never stored ahead of its
outputs, and outputs sent twice carry the same deterministic ids, so consumers drop the copy.
"""

from __future__ import annotations

import asyncio
import base64
import logging

import faust
import orjson

from omstream.schemas.codec import DecodeFailure, decode_input, decode_job, encode
from omstream.schemas.control import ResourceDeleted
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.engine.fold import EngineConfig, fold, memory_key, new_state
from omstream.engine.state import MemoryState
from omstream.models.calls import RetryPolicy, warm_up
from omstream.models.hooks import Hooks, run_job_with_hooks

from .settings import Settings
from .signing import HEADER, result_key, sign, signed
from .topics import Topics

__all__ = ["build_app", "dead_letter", "log_model_call"]

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


def log_model_call(job: ModelJob, result: ModelResult) -> None:
    """INFO for an answer; WARNING for a failed call (after its retries and fallbacks), with its
    error code and status, since the cycle then fails and the memory keeps its messages raw."""
    fields = {"cycle": job.cycle_id, "kind": job.kind, "model": job.model, "ok": result.ok,
              "attempts": result.attempts, "answered": result.model}
    if result.ok:
        log.info("model call", extra=fields)
        return
    log.warning("model call failed: %s", result.error_code or "error", extra={
        **fields, "errorCode": result.error_code, "errorStatus": result.error_status,
        "error": (result.error or "")[:300]})


def _load_state(raw: bytes | None) -> MemoryState | None:
    return MemoryState.model_validate_json(raw) if raw else None


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
    )
    inputs = app.topic(topics.log, key_type=bytes, value_type=bytes)
    jobs = app.topic(topics.jobs, key_type=bytes, value_type=bytes)
    state_table = app.Table(
        "state", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
        options={"block_cache_size": 16 * 1024**2, "block_cache_compressed_size": 4 * 1024**2},
    )
    policy = RetryPolicy.from_settings(settings)
    key_for_results = result_key(settings.result_key, settings.data_dir)

    async def reject(message, code: str, reason: str) -> None:
        log.warning("dead-lettered", extra={"topic": message.topic, "offset": message.offset,
                                            "code": code, "reason": reason})
        await send_all(app, [(topics.dlq, message.key or b"", dead_letter(
            code=code, reason=reason, topic=message.topic, partition=message.partition,
            offset=message.offset, key=message.key, value=message.value))])

    @app.agent(inputs, name="fold")
    async def fold_agent(stream):
        async for event in stream.events():
            message = event.message
            record = decode_input(message.value)
            if isinstance(record, DecodeFailure):
                await reject(message, record.code, record.reason)
                continue
            if isinstance(record, ModelResult):
                if not signed(key_for_results, message.value, message.headers):
                    await reject(message, "forged-result", "a model-result record without a valid "
                                 "signature: results are written by the model agents only")
                    continue
                key = record.memory_key
            elif isinstance(record, ResourceDeleted) and record.thread_id is None and settings.om.scope == "thread":
                await reject(message, "invalid", "resource-deleted needs a threadId in thread scope: "
                             "send one per thread of the resource, keyed by its memory key")
                continue
            else:
                key = memory_key(settings.om, record.thread_id, record.resource_id)
            if (message.key or b"").decode("utf-8", "replace") != key:
                await reject(message, "wrong-key",
                             f"record key must be the memory key {key!r} (it was {message.key!r}); "
                             "all inputs of one memory must share its partition")
                continue
            kbytes = key.encode()
            state = _load_state(state_table.get(kbytes))
            if state is not None and message.offset <= state.offsets.get(message.topic, -1):
                continue  # folded before a crash; its outputs were sent before the state was stored
            if state is None:
                resource = getattr(record, "resource_id", None)
                state = new_state(key, record.thread_id or resource, resource)
            folded = fold(state, record, config)
            records = [(topics.events, kbytes, encode(e)) for e in folded.events]
            records += [(topics.jobs, kbytes, encode(j)) for j in folded.jobs]
            for refused in folded.rejected:
                records.append((topics.dlq, kbytes, dead_letter(
                    code="conflict", reason=refused.reason, topic=message.topic,
                    partition=message.partition, offset=message.offset, key=message.key,
                    value=message.value)))
            await send_all(app, records)
            offsets = {**folded.state.offsets, message.topic: message.offset}
            state_table[kbytes] = folded.state.model_copy(update={"offsets": offsets}).model_dump_json().encode()

    @app.agent(jobs, name="models", concurrency=settings.model_concurrency)
    async def model_agent(stream):
        hooks = Hooks.from_config(settings.om)  # §13 lifecycle hooks; they never fail a job
        await asyncio.to_thread(warm_up)
        log.info("model agent ready")
        async for event in stream.events():
            message = event.message
            try:
                job = decode_job(message.value)
            except ValueError as exc:
                await reject(message, "invalid", f"invalid model job: {exc}")
                continue
            result = await run_job_with_hooks(job, policy, hooks)
            log_model_call(job, result)
            value = encode(result)
            await send_all(app, [(topics.log, job.memory_key.encode(), value)],
                           headers=[(HEADER, sign(key_for_results, value))])

    app.om_state_table = state_table  # type: ignore[attr-defined]
    return app
