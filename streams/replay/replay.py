"""`om replay`: fold the retained input log into a new memory version, beside the live one.

A replay is a worker of its own version (`omstream.topics`: its outputs, consumer group and
state carry the name; the input log is shared) started from the first record of the log, so a
replay is crash recovery under another name and configuration: Ctrl-C stops it, running it
again resumes from its committed position, and once it has caught up it keeps following the
log like any worker.

How it applies model results is chosen from the registry (`omstream.versions.registry`):

- **follow**, when its configuration is the live version's (same digest): it applies the
  results the live version recorded, where the log has them, as a crash recovery does, and so
  reproduces the live memory event for event; its own jobs find their answers in the cache;
- **settled**, otherwise: every job it makes holds that memory's later inputs until its own
  result arrives, so the new memory does not depend on how fast any model answered (the
  semantics of `om simulate`); answers to requests made before come from the cache.

A new settled version is folded at bulk speed first (`omstream.replay.bulk`: in this
process, jobs answered from the cache or the model without a round trip through the broker,
outputs and states written in large batches), and its worker then takes over at the log's end
(`bulk=False`, `om replay --no-bulk`: the worker folds it all).

Progress is read from the broker (the version's committed positions against the log's end)
and from the worker's figures (`stats.json`): records folded of total, memories, model calls,
cache hits, records/s and the time left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from omstream.schemas.errors import OmError

from .. import kafka
from ..engine.rules.extraction import import_references
from ..processes import start_child, stop_child
from ..settings import LIVE, Settings
from ..topics import Topics, ensure_topics, partitions_of
from ..versions.records import VersionInfo
from ..versions.registry import Registry, read_registry, register, version_info
from ..versions.stats import StatsSummary, WorkerStats, stats_path
from .bulk import BulkResult, bulk_ready, bulk_replay
from .watch import Positions, Watch

__all__ = ["ReplayProgress", "ReplayRefused", "ReplayResult", "choose_mode", "replay"]


class ReplayRefused(OmError, ValueError):
    """The replay cannot start as asked (a user's fix)."""


def choose_mode(registry: Registry, digest: str, asked: str) -> str:
    """`follow` when the configuration is the live version's, else `settled` (or as asked)."""
    if asked != "auto":
        return asked
    live = registry.versions.get(LIVE)
    return "follow" if live is not None and live.digest == digest else "settled"


@dataclass(frozen=True)
class ReplayProgress:
    """Where a replay stands, as it is polled (about twice a second)."""

    folded: int  # input-log records the version has committed
    total: int  # records in the input log
    memories: int
    model_calls: int
    cache_hits: int
    records_per_s: float  # since the replay started, the worker's start-up included
    eta_s: float
    elapsed_s: float
    caught_up: bool = False  # the log folded and every job answered, seen twice in a row
    # Folding time, the worker's start-up left out, once it has caught up (positions are polled
    # twice a second and committed about once a second: a short replay's figure is coarse).
    fold_s: float | None = None
    fold_records_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """As `om replay` prints it (with the final figures of `ReplayResult`)."""
        figures: dict[str, Any] = {
            "folded": self.folded, "total": self.total, "memories": self.memories,
            "modelCalls": self.model_calls, "cacheHits": self.cache_hits, "recordsPerS": self.records_per_s,
            "etaS": self.eta_s, "elapsedS": self.elapsed_s, "caughtUp": self.caught_up}
        if self.fold_s is not None:
            figures.update(foldS=self.fold_s, foldRecordsPerS=self.fold_records_per_s)
        return figures


@dataclass(frozen=True)
class ReplayResult:
    """A finished replay: its version, how it folded, its last progress and the worker's figures."""

    version: str
    fold_mode: str
    progress: ReplayProgress
    stats: StatsSummary
    bulk: BulkResult | None = None  # the bulk fold before the worker took over, if there was one

    def to_json(self) -> dict[str, Any]:
        """The progress figures, the version, and the worker's figures (they replace the progress
        figures of the same name: read after the worker wrote its last); `bulk`, the bulk fold's."""
        figures = {**self.progress.to_json(), "version": self.version, "foldMode": self.fold_mode,
                   **self.stats.to_json()}
        if self.bulk is not None:
            b = self.bulk
            figures["bulk"] = {"records": b.records, "memories": b.memories, "answers": b.answers,
                               "seconds": b.seconds, "recordsPerS": b.records_per_s,
                               "ends": {str(p): o for p, o in sorted(b.ends.items())}}
        return figures


async def prepare(settings: Settings, mode: str, start: datetime | None = None) -> Settings:
    """The replay's settings (version, mode), its topics created and the version registered.

    A name already registered with another configuration or other threads is refused: its state
    was folded under those, and resuming under new ones would mix the two."""
    await ensure_topics(settings)
    registry = await read_registry(settings)
    info = version_info(settings)
    chosen = choose_mode(registry, info.digest, mode)
    known = registry.versions.get(settings.version)
    if known is not None and (known.digest, known.threads, known.resources) != (info.digest, info.threads,
                                                                                 info.resources):
        def what(v: VersionInfo) -> str:
            return (f"digest {v.digest}, threads {', '.join(v.threads) or 'all'}, "
                    f"resources {', '.join(v.resources) or 'all'}")
        raise ReplayRefused(
            f"version {settings.version!r} exists with another configuration, threads or resources "
            f"({what(known)}; this one {what(info)}): `om drop {settings.version}` first, or replay as another name")
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
    from aiokafka import TopicPartition

    topic = Topics.of(settings).log
    parts = [TopicPartition(topic, p) for p in (await partitions_of(settings.bootstrap, [topic]))[topic]]
    consumer = kafka.group_reader(settings, settings.app_id)
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


def _progress(p: Positions, stats: WorkerStats, started: float, first: int) -> ReplayProgress:
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = (p.folded - first) / elapsed
    left = p.total - p.folded
    summary = stats.summary()
    return ReplayProgress(folded=p.folded, total=p.total, memories=summary.memories,
                          model_calls=summary.model_calls, cache_hits=summary.cache_hits,
                          records_per_s=round(rate, 1), eta_s=round(left / rate, 1) if rate > 0 and left else 0.0,
                          elapsed_s=round(elapsed, 1))


async def replay(settings: Settings, *, mode: str = "auto", exit_when_caught_up: bool = False,
                 start: datetime | None = None, bulk: bool = True,
                 progress: Callable[[ReplayProgress], Any] | None = None) -> ReplayResult:
    """Run the version's worker and watch it until it has caught up (when asked to stop then)
    or until interrupted; the final figures.  `start`: fold the log from this time on (a new
    version).  `bulk`: a new settled version is folded in this process first (see the module
    docstring).  `progress(figures)` is called about twice a second."""
    import_references(settings.om)  # the extractor code the fold calls: refused here, not mid-replay
    settings = await prepare(settings, mode, start)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bulked = None
    if bulk and settings.fold_mode == "settled" and await bulk_ready(settings):
        bulked = await _bulk(settings, progress)
    log_file = settings.data_dir / f"replay-{settings.version}.log"
    child = start_child(settings, "worker", log_file, dies_with_parent=True)
    watch = Watch(settings)
    stats_file = stats_path(settings)
    started = time.monotonic()
    try:
        await watch.start()
        first = (await watch.positions()).folded
        settled_polls = 0
        moving: float | None = None  # when the first progress was seen
        caught: float | None = None  # when it caught up
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"the replay worker exited with status {child.returncode}; see {log_file}")
            p = await watch.positions()
            now = time.monotonic()
            moving = moving or (now if p.folded > first else None)
            figures = _progress(p, WorkerStats.load(stats_file), started, first)
            # Twice in a row: a result folded just now may have made a job the broker has not
            # shown yet.
            settled_polls = settled_polls + 1 if p.caught_up else 0
            caught = (caught or now) if p.caught_up else None
            figures = replace(figures, caught_up=settled_polls >= 2)
            if moving and caught:
                fold_s = round(caught - moving + 0.5, 1)
                figures = replace(figures, fold_s=fold_s, fold_records_per_s=round((p.folded - first) / fold_s, 1))
            if progress is not None:
                progress(figures)
            if figures.caught_up and exit_when_caught_up:
                await asyncio.sleep(1.2)  # the worker writes its figures every second
                break
            await asyncio.sleep(0.5)
    finally:
        await watch.stop()
        stop_child(child)
    return ReplayResult(settings.version, settings.fold_mode, figures, WorkerStats.load(stats_file).summary(),
                        bulked)


async def _bulk(settings: Settings, progress: Callable[[ReplayProgress], Any] | None) -> BulkResult:
    """The bulk fold, its progress shown as the worker's would be."""
    started = time.monotonic()
    stats_file = stats_path(settings)

    def show(read: int, total: int) -> None:
        if progress is not None:
            # The worker's figures are not written until the end: the records alone.
            figures = _progress(Positions(read, total, 0, 0), WorkerStats.load(stats_file), started, 0)
            progress(figures)

    return await bulk_replay(settings, progress=show)
