"""The model agent: every record of `<ns>.jobs` answered, once, on the input log.

A job is answered from the model-result cache when an equal request (same `requestHash`) was
answered before, or by running it (`run_job_with_hooks`, with its retries and fallbacks); equal
requests in flight at once are run once (twenty threads may ask the same at once).  The
answer goes to `<ns>.log` as a `model-result` signed with the result key (`omstream.signing`),
so the fold can tell it from a forged one, and a new answer then goes to the cache.

Every job gets an answer (`answer_job`): an unreadable job that still names its cycle, a run
that raises and a run past `job_deadline_ms` all write a failed result, signed like any other,
so no cycle waits forever.  A job that names no cycle is dead-lettered (`invalid`).

Jobs run up to `model_concurrency` at a time and are acked in log order (`InOrderAcks`):
Faust's own `concurrency` acks each actor's jobs as they finish, and Faust commits the first
run of acked offsets even when an earlier job is still running if the consumer has not
committed yet (its gap check is skipped for a committed offset of None): after a restart that
lost jobs, whose cycles then never ended (the chaos run found it).

Sealed (a namespace key configured, `sealer`): a job arrives with its `messages` sealed under its
memory's data key; it is opened before it is decoded (`ModelAgent.scope_of`), its answer's
`output` is sealed under the same key before the result is signed (the fold verifies the
signature over the sealed bytes), and the cache is the memory's own (`AnswerCache.under`).  A job
whose key was shredded is answered with a failed result without text (`shredded`): in thread
scope nobody waits for it (the memory is gone and the fold ignores it), but in resource scope a
thread deletion rolls the resource's key while the resource lives on, and its cycle must end
rather than wait for its deadline.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, Protocol, TypeVar, get_args

import orjson

from omstream.crypto import PLAIN, DataKey, KeyNotLoaded, Sealer, Shredded, sealed_key_ids
from omstream.crypto.sealing import is_marked
from omstream.engine.fold import EngineConfig, addressed
from omstream.models.admission import job_deadline
from omstream.models.cache import answer_from
from omstream.models.calls import untimed, warm_up
from omstream.schemas.codec import decode_job, encode
from omstream.schemas.jobs import JobKind, ModelJob, ModelResult

from ..settings import LIVE
from ..signing import HEADER, sign
from ..topics import Topics
from ..versions import WorkerStats
from .folding import Consumed, refuse
from .sending import Headers, OutputRecord, Sender, until_done

__all__ = ["AnswerCache", "InOrderAcks", "JobFields", "JobScope", "ModelAgent", "answer_job", "count_call",
           "failed_result", "job_key", "log_model_call", "open_job", "warm_up_quietly"]

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


async def warm_up_quietly() -> None:
    """Import litellm before the first job, without the garbage collector.

    litellm's import (seconds, in a thread) leaves a large heap of long-lived objects.  The
    collector's full passes over it stopped the whole process for 100-240 ms each, several
    times during the import and now and then later (a burst's others waited behind them).  No
    collection during the import, and the heap it leaves is frozen out of later ones (measured
    after: 16-22 ms each)."""
    gc.disable()
    try:
        await asyncio.to_thread(warm_up)
    finally:
        gc.enable()
    gc.freeze()


class AnswerCache(Protocol):
    """The model-result cache as the model agent uses it (`omstream.models.cache.ResultCache`)."""

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


class JobEvent(Protocol):
    """A job as the agent's stream delivers it (Faust's `Event`)."""

    @property
    def message(self) -> Consumed: ...


E = TypeVar("E", bound=JobEvent)


class InOrderAcks(Generic[E]):
    """Acks of jobs that run concurrently, in log order: a job is acked only once it and every
    job before it are done, so no offset is committed past a job still running."""

    def __init__(self, ack: Callable[[E], Awaitable[object]]) -> None:
        self._ack = ack
        self._running: deque[tuple[E, asyncio.Task[None]]] = deque()
        self._acking = asyncio.Lock()
        self._pending: set[asyncio.Future[None]] = set()  # the loop keeps only weak references to tasks

    def track(self, event: E, task: asyncio.Task[None]) -> None:
        """`task` runs `event`'s job; jobs are tracked in log order."""
        self._running.append((event, task))
        # Once it is done (a task is not done inside its own body): ack the finished prefix.
        task.add_done_callback(lambda _: self._keep(asyncio.ensure_future(self._ack_finished())))

    def _keep(self, future: asyncio.Future[None]) -> None:
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    async def _ack_finished(self) -> None:
        async with self._acking:
            while self._running and self._running[0][1].done():
                await self._ack(self._running.popleft()[0])


class ModelAgent:
    """Answers jobs (see the module docstring): `consume` runs the agent's stream of jobs.

    `run` calls the model (with the lifecycle hooks and retries); `cache` holds earlier
    answers; `sender` writes results, cache entries and dead letters."""

    def __init__(self, *, run: Callable[[ModelJob], Awaitable[ModelResult]], cache: AnswerCache, sender: Sender,
                 topics: Topics, config: EngineConfig, result_key: bytes, deadline_s: float, concurrency: int,
                 stats: WorkerStats, sealer: Sealer = PLAIN) -> None:
        self._run, self.cache, self.sender, self.topics = run, cache, sender, topics
        self.config, self._result_key, self.deadline_s = config, result_key, deadline_s
        self.concurrency, self.stats, self.sealer = concurrency, stats, sealer
        self.shredded = 0  # jobs of deleted memories, answered failed without text
        # request hash -> its answer (None: failed) once it is in the log and the cache
        self._answering: dict[str, asyncio.Future[ModelResult | None]] = {}

    async def consume(self, events: AsyncIterable[E], ack: Callable[[E], Awaitable[object]]) -> None:
        """Answer every job of `events`, up to `concurrency` at a time, acking them in order."""
        slots = asyncio.Semaphore(self.concurrency)
        acks = InOrderAcks(ack)

        async def run(event: E) -> None:
            try:
                await self.answer(event.message)
            finally:
                slots.release()

        async for event in events:
            await slots.acquire()
            acks.track(event, asyncio.create_task(run(event)))

    async def answer(self, message: Consumed) -> None:
        """Answer one job record: its signed result on the log (or a dead letter), and a new
        answer in the cache."""
        result: ModelResult | str | None = None
        scope = await self.scope_of(message.value)
        try:
            result = scope.decided if scope.decided is not None else await answer_job(
                scope.raw, lambda job: self.recall_or_call(job, scope), self.deadline_s)
            await self.publish(message, result, scope)
        finally:
            # Also when cancelled: the equal requests waiting then ask the model themselves.
            running = self._answering.pop(scope.runs, None) if scope.runs is not None else None
            if running is not None and not running.done():
                running.set_result(result if isinstance(result, ModelResult) and result.ok else None)

    async def scope_of(self, raw: bytes | None) -> JobScope:
        """`open_job` with this agent's sealer and cache; counts the shredded jobs."""
        scope = await open_job(self.sealer, self.cache, raw)
        if scope.decided is not None and scope.decided.error_code == SHREDDED:
            self.shredded += 1
        return scope

    async def recall_or_call(self, job: ModelJob, scope: JobScope | None = None) -> ModelResult | None:
        """The answer to a job: from the cache when an equal request was answered before, else
        from the model.  None when the cached answer is in the log already for this very
        cycle, in a form this version applies (the job ran before a crash): nothing to send."""
        scope = scope or JobScope(None, self.cache)
        cached = scope.cache.get(job)
        if cached is None and job.request_hash in self._answering:
            # An equal request is being answered: its answer is this one's (shielded: a deadline
            # here must not cancel it for the others).  If it failed, this one asks again.
            fresh = await asyncio.shield(self._answering[job.request_hash])
            cached = fresh if fresh is not None else scope.cache.get(job)
            # Sealed, each memory has its own entries: one adopted from another memory is kept.
            scope.adopted = scope.key is not None and fresh is not None and fresh.memory_key != job.memory_key
        if cached is None:
            if job.request_hash not in self._answering:
                self._answering[job.request_hash] = asyncio.get_running_loop().create_future()
                scope.runs = job.request_hash
            result = await self._run(job)
            return untimed(result, job) if self.config.settled else result
        if cached.memory_key == job.memory_key and cached.cycle_id == job.cycle_id and addressed(cached, self.config):
            return None
        return answer_from(cached, job)

    async def publish(self, message: Consumed, result: ModelResult | str | None, scope: JobScope | None = None) -> None:
        """Send what `answer_job` gave: a signed result, then its cache entry; or a dead letter."""
        if result is None:
            self.stats.cache_hits += 1
            return
        if isinstance(result, str):
            letter = refuse(self.topics.dlq, message, "invalid", result).records
            await until_done("dead-letter a job", lambda: self.sender.send_all(letter))
            return
        log_model_call(result)
        count_call(self.stats, result)
        scope = scope or JobScope(None, self.cache)
        # Sealed before it is signed: the fold verifies the signature over the bytes it reads.
        value = self.sealer.seal_with(encode(result), scope.key)
        signature = sign(self._result_key, value)
        await until_done("send a model result", lambda: self.sender.send_all(
            [OutputRecord(self.topics.log, result.memory_key.encode(), value)], headers=[(HEADER, signature)]))
        if result.ok and (not result.cached or scope.adopted):
            # After the log has it: an entry in the cache means the answer is in the log.
            key, entry, headers = scope.cache.entry(result)
            await until_done("cache a model result", lambda: self.sender.send_all(
                [OutputRecord(self.topics.cache, key, entry)], headers=headers))
            scope.cache.remember(key, entry)
