"""`om worker`'s Faust app: the fold agent and the model agent, wired to their topics.

What each agent does is in `omstream.worker.fold_loop` and `omstream.worker.model_agent`; this
module only builds the app (with `omstream.worker.faust_repairs`), its topics and state table,
and hands them to the agents of the worker's role (`[omstream] role`, `om worker --role`):

- `all`: both agents in one process, one consumer group (what one machine runs);
- `fold`: the fold agent alone, in the version's group (`Settings.app_id`) with the state
  table.  It never imports litellm and never loads a local model: the fold's event loop does
  nothing but fold, send and store (`observeAttachments = "auto"` asks a child process,
  `omstream.worker.capability`);
- `models`: the model agent alone, in a group of its own (`Settings.worker_group`), so model
  agents come and go without stopping the fold workers for a rebalance; no state table, and
  the input log is not consumed.

A namespace runs either `all` workers or `fold` and `models` workers, not both: an `all` worker
beside `models` workers would answer every job a second time, and beside `fold` workers it would
share their group with another subscription.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import cast

import faust
from faust.types import Message, StreamT

from omstream.engine.fold import EngineConfig
from omstream.engine.rules.extraction import import_references
from omstream.models.capabilities import takes_attachments
from omstream.schemas.jobs import ModelJob, ModelResult

from ..crypto.sealing import Sealer, sealer_of
from ..limits import Limits
from ..models.hooks import Hooks
from ..pipeline.folding import FoldContext
from ..pipeline.memories import StateCache
from ..pipeline.sending import Headers, OutputRecord, until_done
from ..pipeline.signing import result_key
from ..settings import LIVE, Settings
from ..topics import Topics, partitions_of, sealed
from ..versions import WorkerStats, register, stats_path, version_info
from .backlog import Backlog, Intake
from .capability import takes_attachments_apart
from .faust_repairs import WorkerApp, WorkerTableManager, WorkerTopic
from .fold_loop import FoldLoop
from .relay import IntakeRelay, PlainWatch, relay_group
from .table import StateStore, TableChangelog, TableFiles

__all__ = ["BACKLOG_BYTES", "BACKLOG_RECORDS", "MAX_FETCH_BYTES", "STREAM_BUFFER", "ProducerSender", "build_app"]

log = logging.getLogger("omstream.worker")

#: Records a stream (the model agents') buffers before Faust stops fetching the partition.
STREAM_BUFFER = 500
#: Bytes one fetch brings from a partition (a larger record still comes, alone).
MAX_FETCH_BYTES = 1024 * 1024
#: Records (and their bytes) the fold agent reads ahead of its batches (`omstream.worker.backlog`).
BACKLOG_RECORDS = 5000
BACKLOG_BYTES = 32 * 1024**2
#: How old the consumer's view of the topics may grow before it is read again (see build_app).
METADATA_MAX_AGE_MS = 10_000


class ProducerSender:
    """`Sender` (`omstream.pipeline.sending`) through a Faust app's producer, looked up at each send:
    the app makes it when it is first used, after `build_app` has returned."""

    def __init__(self, app: faust.App) -> None:
        self.app = app

    async def send_all(self, records: Sequence[OutputRecord], headers: Headers | None = None) -> None:
        """Send every record and wait until the broker acknowledges all of them."""
        futures = [await self.app.producer.send(topic, key, value, partition=None, timestamp=None, headers=headers)
                   for topic, key, value in records]
        await asyncio.gather(*futures)


def _faust_app(settings: Settings) -> WorkerApp:
    return WorkerApp(
        settings.worker_group,
        broker=f"kafka://{settings.bootstrap}",
        store="rocksdb://",
        # Per app: table files (and their changelog offsets) belong to one namespace.
        datadir=str(settings.data_dir / "worker" / settings.worker_group),
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
        # A group leader that assigns while the broker does not yet report the topics (just
        # after a broker restart) assigns nothing, and rejoins only when its metadata shows the
        # topics' partitions, at the next refresh: by default 5 minutes in which no memory is
        # folded (the chaos test saw a worker sit idle so).  A refresh every 10 s bounds that.
        consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
        consumer_group_instance_id=settings.instance_id or None,
        table_standby_replicas=settings.standby_replicas,
        Topic=WorkerTopic,
        TableManager=WorkerTableManager,
        # The input log is handed to the fold agent's backlog a fetch at a time (`WorkerApp.taps`),
        # and fairness between memories is the backlog's (`Intake.batches`).  A fetch is large
        # so that a busy partition is read quickly: the records behind it (other memories')
        # come only with the next fetch.
        stream_buffer_maxsize=STREAM_BUFFER,
        consumer_max_fetch_size=MAX_FETCH_BYTES,
    )


def _load_local_models(settings: Settings) -> None:
    from omstream.models import local as local_models

    local_models.configure_from(settings)
    for model in {settings.om.observer_model, settings.om.reflector_model}:
        if local_models.is_local(model) and local_models.is_installed(model):
            local_models.load(model)  # a missing one fails its jobs, saying how to install it


def build_app(settings: Settings) -> faust.App:
    """The worker of `settings.role` (see the module docstring)."""
    # A `models` worker folds nothing, but says the same; a `fold` worker keeps litellm out.
    capability = takes_attachments if settings.role == "all" else takes_attachments_apart
    config = EngineConfig(settings.om, settings.version, settled=settings.fold_mode == "settled",
                          takes_attachments=capability)
    (settings.data_dir / "worker").mkdir(parents=True, exist_ok=True)  # faust makes only the last level
    if settings.role != "fold":
        _load_local_models(settings)
    app = _faust_app(settings)
    key_for_results = result_key(settings.result_key, settings.data_dir)
    stats_file = stats_path(settings)
    stats = WorkerStats.load(stats_file)
    sender = ProducerSender(app)
    import_references(settings.om)  # extractor code: a missing module stops the start
    # One key ring for the process (PLAIN without a namespace key), repairing (a worker's).
    sealer = sealer_of(settings)
    if settings.role in ("all", "fold"):
        _add_fold_agent(app, settings, config, key_for_results, sender, stats, sealer)
        _add_intake_relay(app, settings, sealer)
    if settings.role in ("all", "models"):
        _add_model_agent(app, settings, config, key_for_results, sender, stats, sealer)

    @app.timer(1.0)  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def save_stats() -> None:
        await asyncio.to_thread(stats.save, stats_file)

    return app


def _add_fold_agent(app: WorkerApp, settings: Settings, config: EngineConfig, key_for_results: bytes,
                    sender: ProducerSender, stats: WorkerStats, sealer: Sealer) -> None:
    topics = Topics.of(settings)
    inputs = app.topic(topics.log, key_type=bytes, value_type=bytes)
    state_table = app.Table(
        "state", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
        options={"block_cache_size": 16 * 1024**2, "block_cache_compressed_size": 4 * 1024**2},
    )
    intake = Intake(Backlog(BACKLOG_RECORDS, BACKLOG_BYTES))
    # With a namespace key, a producer writing the log unsealed is warned about (once a memory).
    app.taps[topics.log] = PlainWatch().tap(intake.put) if sealed(settings) else intake.put
    folds = FoldLoop(
        FoldContext(settings, topics, config, Limits.from_settings(settings), key_for_results, settings.thread_filter,
                    settings.resource_filter),
        sender, StateStore(TableChangelog(app, state_table), TableFiles(state_table)),
        StateCache(settings.state_cache), lambda message: app.consumer.ack(cast(Message, message)),
        stats=stats, busy=intake.busy, sealer=sealer,
        # §13 lifecycle hooks, per cycle, for the live memory only: a replay's cycles re-run
        # old conversations (their answers mostly cached) and would report them again.
        hooks=Hooks.from_config(settings.om) if settings.version == LIVE else None)

    app.settle = folds.settle  # what a revocation waits for (`WorkerApp`)

    async def flowing(batches: AsyncIterator[list[Message]]) -> AsyncIterator[list[Message]]:
        """No batch starts while a rebalance has stopped the flow; after it, only the records
        of the new generation are taken (the others are read again by their partitions' owner)."""
        async for batch in batches:
            if not app.flow_control.is_active():
                await app.flow_control.acquire()
                batch = [m for m in batch if m.generation_id == app.consumer_generation_id]
            if batch:
                yield batch

    # Its records come from `intake`, not from its stream: the agent subscribes the consumer
    # to the input log.
    @app.agent(inputs, name="fold")
    async def fold_agent(stream: StreamT[bytes]) -> None:
        if settings.role == "fold":  # an `all` worker registers once its model agent is ready
            await until_done("register the version", lambda: register(settings, version_info(settings)))
            log.info("fold agent ready", extra={"version": settings.version, "foldMode": settings.fold_mode})
        await until_done("start the key ring", sealer.start)
        try:
            await folds.run(flowing(intake.batches(settings.batch_max, settings.memory_batch_max,
                                                   settings.batch_wait_ms / 1000, lambda: app.consumer_generation_id)),
                            lambda: app.consumer_generation_id)
        finally:
            await sealer.stop()


def _add_intake_relay(app: WorkerApp, settings: Settings, sealer: Sealer) -> None:
    """Plain producers' records from `<ns>.intake`, sealed, into the log (`omstream.worker.relay`).
    Without a namespace key there is no intake; one left from a time with a key is still relayed
    (unsealed), so what a producer wrote there is never stranded."""
    topics = Topics.of(settings)

    @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def intake_relay() -> None:
        if not sealed(settings):
            found: dict[str, list[int]] = {}

            async def look() -> None:
                found.update(await partitions_of(settings.bootstrap, [topics.intake]))

            await until_done("look for an intake topic", look)
            if not found.get(topics.intake):
                return
        log.info("intake relay started", extra={"intake": topics.intake})
        # A relay that fails (a broker restarting) starts again, fresh: it finds its place anew.
        await until_done("relay the intake", lambda: IntakeRelay(
            settings.bootstrap, topics.intake, topics.log, relay_group(settings.namespace), sealer,
            tick_after_ms=settings.shred_window_ms).run())


def _add_model_agent(app: WorkerApp, settings: Settings, config: EngineConfig, key_for_results: bytes,
                     sender: ProducerSender, stats: WorkerStats, sealer: Sealer) -> None:
    from omstream.models.admission import ModelGate, parse_model_limits
    from omstream.models.calls import RetryPolicy, run_job
    from omstream.pipeline.cache import ResultCache

    from .model_agent import ModelAgent, warm_up_quietly

    topics = Topics.of(settings)
    jobs = app.topic(topics.jobs, key_type=bytes, value_type=bytes)
    answers = ResultCache(settings.bootstrap, topics.cache,
                          settings.data_dir / "worker" / settings.worker_group / "result-cache", key_for_results,
                          sealer)
    policy = RetryPolicy.from_settings(settings)
    gate = ModelGate(settings.model_concurrency, parse_model_limits(settings.model_limits))

    async def run(job: ModelJob) -> ModelResult:
        return await run_job(job, policy, gate=gate)

    models = ModelAgent(run=run, cache=answers, sender=sender, topics=topics, config=config,
                        result_key=key_for_results, deadline_s=settings.job_deadline_ms / 1000,
                        concurrency=settings.model_concurrency, stats=stats, sealer=sealer)

    @app.agent(jobs, name="models")
    async def model_agent(stream: StreamT[bytes]) -> None:
        await warm_up_quietly()
        await sealer.start()  # the keys before the first job: a sealed job is opened with them
        try:
            await answers.start()
            await until_done("register the version", lambda: register(settings, version_info(settings)))
            log.info("model agent ready", extra={"version": settings.version, "foldMode": settings.fold_mode})
            jobs_stream = cast(faust.Stream[bytes], stream)  # `StreamT` declares no `noack`
            await models.consume(jobs_stream.noack().events(), jobs_stream.ack)
        finally:
            await sealer.stop()  # a restarted agent starts it again (the ring stops with its last user)
