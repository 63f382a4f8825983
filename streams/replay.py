"""`om replay`: fold the retained input log into a new memory version, beside the live one.

A replay is a worker of its own version (`omstream.topics`: its outputs, consumer group and
state carry the name; the input log is shared) started from the first record of the log, so a
replay is crash recovery under another name and configuration: Ctrl-C stops it, running it
again resumes from its committed position, and once it has caught up it keeps following the
log like any worker.

How it applies model results is chosen from the registry (`omstream.versions`):

- **follow**, when its configuration is the live version's (same digest): it applies the
  results the live version recorded, where the log has them, as a crash recovery does, and so
  reproduces the live memory event for event; its own jobs find their answers in the cache;
- **settled**, otherwise: every job it makes holds that memory's later inputs until its own
  result arrives, so the new memory does not depend on how fast any model answered (the
  semantics of `om simulate`); answers to requests made before come from the cache.

Progress is read from the broker (the version's committed positions against the log's end)
and from the worker's figures (`stats.json`): records folded of total, memories, model calls,
cache hits, records/s and the time left.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from omstream.schemas.errors import OmError

from .processes import start_child, stop_child
from .settings import LIVE, Settings
from .topics import Topics, ensure_topics, partitions_of
from .versions import Registry, WorkerStats, read_registry, register, stats_path, version_info

__all__ = ["Positions", "ReplayRefused", "choose_mode", "replay"]


class ReplayRefused(OmError, ValueError):
    """The replay cannot start as asked (a user's fix)."""


def choose_mode(registry: Registry, digest: str, asked: str) -> str:
    """`follow` when the configuration is the live version's, else `settled` (or as asked)."""
    if asked != "auto":
        return asked
    live = registry.versions.get(LIVE)
    return "follow" if live is not None and live.digest == digest else "settled"


@dataclass(frozen=True)
class Positions:
    folded: int  # input-log records the version has committed
    total: int  # records in the input log
    jobs_done: int
    jobs_total: int

    @property
    def caught_up(self) -> bool:
        return self.folded >= self.total and self.jobs_done >= self.jobs_total


class Watch:
    """The version's committed positions against the ends of the input log and its jobs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self._admin = self._consumer = None
        self._tps: list = []

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        layout = await partitions_of(self.settings.bootstrap, [self.topics.log, self.topics.jobs])
        self._tps = [TopicPartition(t, p) for t in (self.topics.log, self.topics.jobs) for p in layout.get(t, [])]
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.bootstrap)
        await self._admin.start()
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap, group_id=None)
        await self._consumer.start()

    async def positions(self) -> Positions:
        ends = await self._consumer.end_offsets(self._tps)
        committed = await self._admin.list_consumer_group_offsets(self.settings.app_id)
        done = {tp: (committed[tp].offset if tp in committed and committed[tp].offset >= 0 else 0)
                for tp in self._tps}
        log, jobs = self.topics.log, self.topics.jobs
        return Positions(
            folded=sum(min(done[tp], ends[tp]) for tp in self._tps if tp.topic == log),
            total=sum(ends[tp] for tp in self._tps if tp.topic == log),
            jobs_done=sum(min(done[tp], ends[tp]) for tp in self._tps if tp.topic == jobs),
            jobs_total=sum(ends[tp] for tp in self._tps if tp.topic == jobs))

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()


async def prepare(settings: Settings, mode: str, start: datetime | None = None) -> Settings:
    """The replay's settings (version, mode), its topics created and the version registered.

    A name already registered with another configuration or other threads is refused: its state
    was folded under those, and resuming under new ones would mix the two."""
    await ensure_topics(settings)
    registry = await read_registry(settings)
    info = version_info(settings)
    chosen = choose_mode(registry, info.digest, mode)
    known = registry.versions.get(settings.version)
    if known is not None and (known.digest, known.threads) != (info.digest, info.threads):
        raise ReplayRefused(
            f"version {settings.version!r} exists with another configuration or other threads "
            f"(digest {known.digest}, threads {', '.join(known.threads) or 'all'}; this one {info.digest}, "
            f"{', '.join(info.threads) or 'all'}): `om drop {settings.version}` first, or replay as another name")
    if start is not None:
        await start_at(settings, start)
    if known is not None and mode == "auto":
        chosen = known.fold_mode  # a resumed replay keeps the mode it was folded with
    settings = replace(settings, fold_mode=chosen)
    await register(settings, version_info(settings))
    return settings


async def start_at(settings: Settings, when: datetime) -> bool:
    """Start a new version's group at the first log record of `when` or later (the records
    before are not its inputs); a version that has committed a position keeps it.  True if set."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = Topics.of(settings).log
    parts = [TopicPartition(topic, p) for p in (await partitions_of(settings.bootstrap, [topic]))[topic]]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=settings.app_id,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(parts)
        if any([await consumer.committed(tp) is not None for tp in parts]):
            return False
        found = await consumer.offsets_for_times({tp: round(when.timestamp() * 1000) for tp in parts})
        ends = await consumer.end_offsets(parts)
        await consumer.commit({tp: found[tp].offset if found[tp] else ends[tp] for tp in parts})
        return True
    finally:
        await consumer.stop()


def _figures(p: Positions, stats: WorkerStats, started: float, first: int) -> dict[str, Any]:
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = (p.folded - first) / elapsed
    left = p.total - p.folded
    summary = stats.summary()
    return {"folded": p.folded, "total": p.total, "memories": summary["memories"],
            "modelCalls": summary["modelCalls"], "cacheHits": summary["cacheHits"],
            "recordsPerS": round(rate, 1), "etaS": round(left / rate, 1) if rate > 0 and left else 0.0,
            "elapsedS": round(elapsed, 1)}


async def replay(settings: Settings, *, mode: str = "auto", exit_when_caught_up: bool = False,
                 start: datetime | None = None, progress: Any = None) -> dict[str, Any]:
    """Run the version's worker and watch it until it has caught up (when asked to stop then)
    or until interrupted; the final figures.  `start`: fold the log from this time on (a new
    version).  `progress(figures)` is called about twice a second."""
    settings = await prepare(settings, mode, start)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log_file = settings.data_dir / f"replay-{settings.version}.log"
    child = start_child(settings, "worker", log_file, dies_with_parent=True)
    watch = Watch(settings)
    stats_file = stats_path(settings)
    started = time.monotonic()
    figures: dict[str, Any] = {}
    try:
        await watch.start()
        first = (await watch.positions()).folded
        settled_polls = 0
        moving = caught = None  # when the first progress was seen, and when it caught up
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"the replay worker exited with status {child.returncode}; see {log_file}")
            p = await watch.positions()
            now = time.monotonic()
            moving = moving or (now if p.folded > first else None)
            figures = _figures(p, WorkerStats.load(stats_file), started, first)
            if progress is not None:
                progress(figures)
            # Twice in a row: a result folded just now may have made a job the broker has not
            # shown yet.
            settled_polls = settled_polls + 1 if p.caught_up else 0
            caught = (caught or now) if p.caught_up else None
            figures["caughtUp"] = settled_polls >= 2
            if moving and caught:
                # Folding time, the worker's start-up left out (positions are polled twice a
                # second and committed about once a second: a short replay's figure is coarse).
                figures["foldS"] = round(caught - moving + 0.5, 1)
                figures["foldRecordsPerS"] = round((p.folded - first) / figures["foldS"], 1)
            if figures["caughtUp"] and exit_when_caught_up:
                await asyncio.sleep(1.2)  # the worker writes its figures every second
                break
            await asyncio.sleep(0.5)
    finally:
        await watch.stop()
        stop_child(child)
    figures.update(version=settings.version, foldMode=settings.fold_mode,
                   **{k: v for k, v in WorkerStats.load(stats_file).summary().items()})
    return figures
