"""Answering one model job, Faust-free: what the model agent (`omstream.worker.model_agent`) and
the bulk replay (`omstream.replay.bulk`) both do with a record of `<ns>.jobs`.

A job is answered from the model-result cache when an equal request (same `requestHash`) was
answered before, or by running it (`run_job`, with its retries and fallbacks).  The
answer goes to `<ns>.log` as a `model-result` signed with the result key
(`omstream.pipeline.signing`), so the fold can tell it from a forged one, and a new answer then
goes to the cache.

Every job gets an answer (`answer_job`): an unreadable job that still names its cycle, a run
that raises and a run past `job_deadline_ms` all write a failed result, signed like any other,
so no cycle waits forever.  A job that names no cycle is dead-lettered (`invalid`).

Sealed (a namespace key configured, `sealer`): a job arrives with its `messages` sealed under its
memory's data key; it is opened before it is decoded (`open_job`), its answer's `output` is sealed
under the same key before the result is signed (the fold verifies the signature over the sealed
bytes), and the cache is the memory's own (`AnswerCache.under`).  A job whose key was shredded is
answered with a failed result without text (`shredded`): in thread scope nobody waits for it (the
memory is gone and the fold ignores it), but in resource scope a thread deletion rolls the
resource's key while the resource lives on, and its cycle must end rather than wait for its
deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, get_args

import orjson

from omstream.crypto import DataKey, KeyNotLoaded, Sealer, Shredded, sealed_key_ids
from omstream.crypto.sealing import is_marked
from omstream.models.admission import job_deadline
from omstream.schemas.codec import decode_job
from omstream.schemas.jobs import JobKind, ModelJob, ModelResult

from ..settings import LIVE
from ..versions import WorkerStats
from .sending import Headers

__all__ = ["SHREDDED", "AnswerCache", "JobFields", "JobScope", "answer_job", "count_call", "failed_result", "job_key",
           "log_model_call", "open_job"]

# The worker's logger: log readers filter on it, and the bulk replay answers jobs as the worker does.
log = logging.getLogger("omstream.worker")

_KINDS: dict[str, JobKind] = {kind: kind for kind in get_args(JobKind)}
#: The error code of a job whose memory was deleted (its key shredded) before it was answered.
SHREDDED = "shredded"


@dataclass(frozen=True)
class JobFields:
    """What a failed result needs of the job it answers (`failed_result`)."""

    kind: JobKind
    cycle_id: str
    memory_key: str
    thread_id: str
    request_hash: str
    model: str
    version: str | None
    config_digest: str | None

    @classmethod
    def of(cls, job: ModelJob) -> JobFields:
        return cls(job.kind, job.cycle_id, job.memory_key, job.thread_id, job.request_hash, job.model,
                   job.version, job.config_digest)

    @classmethod
    def read(cls, raw: bytes | None) -> JobFields | None:
        """The fields of an undecodable job, or None without a memory key and a cycle id (then
        nobody waits for an answer we could address: dead-letter it)."""
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
        return cls(kind=_KINDS.get(kind, "observe") if isinstance(kind, str) else "observe", cycle_id=cycle,
                   memory_key=key,
                   thread_id=text("threadId", key.split(":", 1)[-1]),
                   request_hash=text("requestHash", "unreadable"), model=text("model", "unknown"),
                   version=text("version", LIVE), config_digest=data.get("configDigest") or None)


def failed_result(fields: JobFields, started: datetime, code: str, error: str) -> ModelResult:
    """A failed answer to a job."""
    return ModelResult(kind=fields.kind, cycle_id=fields.cycle_id, memory_key=fields.memory_key,
                       thread_id=fields.thread_id, request_hash=fields.request_hash, model=fields.model,
                       version=fields.version, config_digest=fields.config_digest,
                       ok=False, error=error[:2000], error_code=code, attempts=0,
                       started_at=started, completed_at=datetime.now(UTC))


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
        fields = JobFields.read(raw)
        if fields is None:
            return f"invalid model job: {exc}"
        return failed_result(fields, started, "invalid-job", f"the model job could not be read: {exc}")
    try:
        async with job_deadline(deadline_s):
            return await run(job)
    except TimeoutError:
        return failed_result(JobFields.of(job), started, "deadline",
                             f"no answer within the job deadline ({deadline_s * 1000:.0f} ms)")
    except Exception as exc:  # noqa: BLE001 - every job gets an answer
        log.warning("model job failed", exc_info=True, extra={"cycle": job.cycle_id})
        return failed_result(JobFields.of(job), started, "error", f"{type(exc).__name__}: {exc}")


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




class AnswerCache(Protocol):
    """The model-result cache as the model agent uses it (`omstream.pipeline.cache.ResultCache`)."""

    def get(self, job: ModelJob) -> ModelResult | None: ...

    def entry(self, result: ModelResult) -> tuple[bytes, bytes, Headers]: ...

    def remember(self, key: bytes, value: bytes) -> None: ...

    def under(self, key: DataKey) -> AnswerCache:
        """The cache as the memory of data `key` sees it (called only when sealing)."""
        ...


@dataclass
class JobScope:
    """One job as its memory sees it: its bytes (opened), the data key of the memory (None: not
    sealing), the cache under that key, and a result already decided (a shredded job)."""

    raw: bytes | None
    cache: AnswerCache
    key: DataKey | None = None
    decided: ModelResult | None = None
    runs: str | None = field(default=None)  # the request hash this job asks the model for
    adopted: bool = field(default=False)  # its answer is another memory's, in flight: cache it for this one


async def open_job(sealer: Sealer, cache: AnswerCache, raw: bytes | None) -> JobScope:
    """The job opened with its memory's key, with the cache as its memory sees it (unchanged
    when not sealing, or when it names no memory: `answer_job` says why).  A job whose key was
    shredded is decided: answered failed without text (see the module docstring)."""
    fields = JobFields.read(raw) if sealer.enabled else None
    if fields is None or raw is None:
        return JobScope(raw, cache)
    started = datetime.now(UTC)
    try:
        await sealer.prepare([raw])
        opened = sealer.open(raw, fields.memory_key)
        key = await job_key(sealer, raw, fields.memory_key)
    except (Shredded, KeyNotLoaded):  # after `prepare`, a key not loaded was compacted away: shredded
        log.info("model job of a deleted memory: answered failed, without text", extra={"cycle": fields.cycle_id})
        return JobScope(raw, cache, decided=failed_result(
            fields, started, SHREDDED, "the memory was deleted: its job can no longer be read"))
    except ValueError as exc:  # Tampered, or bytes that are not JSON (the message names no content)
        return JobScope(raw, cache, decided=failed_result(
            fields, started, "invalid-job", f"the model job could not be opened: {exc}"))
    return JobScope(opened, cache.under(key), key)


async def job_key(sealer: Sealer, raw: bytes, memory_key: str) -> DataKey:
    """The data key to seal a job's answer with: the one that sealed the job (so an answer never
    outlives the key of its question: a memory shredded and used again since gets a new key), or
    for a plain job the memory's current key.  `Shredded` when that key is gone."""
    ids = sealed_key_ids(orjson.loads(raw)) if is_marked(raw) else set()
    if len(ids) == 1 and sealer.ring is not None:
        return sealer.ring.key(ids.pop())
    return await sealer.key_of(memory_key)
