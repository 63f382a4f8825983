"""The model agent: every record of `<ns>.jobs` answered, once, on the input log.

How one job is answered (the cache or the model, the signed result, a failed result for every
job that names its cycle, sealed jobs) is `omstream.pipeline.answering`, which the bulk replay
shares; this is the Faust agent around it.  Equal requests in flight at once are run once
(twenty threads may ask the same at once).

Jobs run up to `model_concurrency` at a time and are acked in log order (`InOrderAcks`):
Faust's own `concurrency` acks each actor's jobs as they finish, and Faust commits the first
run of acked offsets even when an earlier job is still running if the consumer has not
committed yet (its gap check is skipped for a committed offset of None): after a restart that
lost jobs, whose cycles then never ended (the chaos run found it).

Sealed (a namespace key configured, `sealer`): a job is opened before it is decoded
(`ModelAgent.scope_of`, with `answering.open_job`), and its answer's `output` is sealed under the
job's key before the result is signed (the fold verifies the signature over the sealed bytes).
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from omstream.crypto import PLAIN, Sealer
from omstream.engine.fold import EngineConfig, addressed
from omstream.models.calls import untimed, warm_up
from omstream.pipeline.answering import (
    SHREDDED,
    AnswerCache,
    JobScope,
    answer_job,
    count_call,
    log_model_call,
    open_job,
)
from omstream.pipeline.cache import answer_from
from omstream.pipeline.folding import Consumed, refuse
from omstream.pipeline.sending import OutputRecord, Sender, until_done
from omstream.pipeline.signing import HEADER, sign
from omstream.schemas.codec import encode
from omstream.schemas.jobs import ModelJob, ModelResult

from ..topics import Topics
from ..versions import WorkerStats

__all__ = ["InOrderAcks", "ModelAgent", "warm_up_quietly"]

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

    `run` calls the model (with its retries and fallbacks); `cache` holds earlier
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
