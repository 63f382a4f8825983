"""What `bench.e2e` observes: `<ns>.events` (and the dead letters) followed with consume times,
waiting on them, and topics' end offsets with the changelog records between two snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from bench.e2e_env import BenchError, Env, progress
from bench.e2e_stats import Seen
from omstream import kafka
from omstream.settings import Settings
from omstream.topics import Topics, partitions_of

#: Quiet time after which the worker is taken to be idle (no new events, jobs or changelog).
SETTLE_S = 2.0


# --- following <ns>.events ---------------------------------------------------------------------------
class EventTimes:
    """Follows `<ns>.events` from the start and keeps, per thread, what `Seen` describes.  Events
    are parsed with orjson, not the pydantic models: the bench must keep up with the worker on
    the same two cores."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.seen: dict[str, list[Seen]] = {}
        self.accepted: dict[str, float] = {}                # message id -> consume time
        self.step_statuses: Counter[str] = Counter()        # thread -> statuses with a step number
        self.kinds: Counter[tuple[str, str]] = Counter()    # (run label, event type) -> count
        self.dead: list[str] = []                           # "<code>: <reason>" per dead letter
        self.last_event = time.monotonic()
        self._consumer: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        topics = Topics(self.settings.namespace)
        layout = await partitions_of(self.settings.bootstrap, [topics.events, topics.dlq])
        self._consumer = kafka.reader(self.settings, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                      max_partition_fetch_bytes=8 * 1024**2)
        await self._consumer.start()
        # The dead letters too: a refused input never gets its events, so waiting on would hang.
        self._consumer.assign([TopicPartition(t, p) for t, parts in layout.items() for p in parts])
        self._dlq = topics.dlq
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    def check(self) -> None:
        """Raise what stopped the follower, if it stopped."""
        if self._task is not None and self._task.done():
            self._task.result()

    async def _follow(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=100, max_records=10_000)
            now = time.monotonic()
            for tp, records in batch.items():
                for record in records:
                    if tp.topic == self._dlq:
                        letter = orjson.loads(record.value)
                        self.dead.append(f"{letter.get('code')}: {str(letter.get('reason'))[:300]}")
                    else:
                        self._note(orjson.loads(record.value), now)
            if batch:
                self.last_event = now

    def _note(self, event: dict, now: float) -> None:
        kind, thread = event.get("type", ""), event.get("threadId") or ""
        self.kinds[(run_of(thread), kind)] += 1
        if kind == "om-message-accepted":
            message_id = event["data"]["message"]["id"]
            self.accepted.setdefault(message_id, now)
            self.seen.setdefault(thread, []).append(("accepted", message_id, now))
        elif kind == "data-om-status":
            step = event["data"].get("stepNumber")
            self.seen.setdefault(thread, []).append(("status", step, now))
            if step is not None:
                self.step_statuses[thread] += 1
        elif kind == "data-om-activation":
            self.seen.setdefault(thread, []).append(("activation", None, now))

    def counts(self, run: str) -> dict[str, int]:
        return {kind: n for (label, kind), n in sorted(self.kinds.items()) if label == run}


def run_of(thread_id: str) -> str:
    """The run a thread belongs to: thread ids are `<run>-t<n>`."""
    return thread_id.split("-", 1)[0]


async def wait_for(env: Env, events: EventTimes, done: Callable[[], bool], what: str,
                   stall: float) -> None:
    """Until `done()`; fails when the worker exits or no event arrived for `stall` seconds."""
    since, dead = time.monotonic(), len(events.dead)
    while not done():
        env.check_worker()
        events.check()
        if len(events.dead) > dead:
            raise BenchError(f"the worker dead-lettered {len(events.dead) - dead} input(s) while "
                             f"waiting for {what}, e.g. {events.dead[dead]}")
        if time.monotonic() - max(since, events.last_event) > stall:
            raise BenchError(f"no event for {stall:.0f} s while waiting for {what}; worker log:\n"
                             f"{env.worker_tail()}")
        await asyncio.sleep(0.02)



# --- offsets and changelogs --------------------------------------------------------------------------
class Offsets:
    """End offsets of topics, and reading changelog records between two snapshots."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumer: Any = None

    async def __aenter__(self) -> Offsets:
        self._consumer = kafka.reader(self.settings, max_partition_fetch_bytes=16 * 1024**2,
                                      fetch_max_bytes=64 * 1024**2)
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def changelogs(self) -> list[str]:
        """The worker's table changelog topics: `<app_id>-<table>-changelog`."""
        admin = kafka.admin(self.settings)
        await admin.start()
        try:
            names = await admin.list_topics()
        finally:
            await admin.close()
        prefix = f"{self.settings.app_id}-"
        return sorted(n for n in names if n.startswith(prefix) and n.endswith("-changelog"))

    async def ends(self, topics: Sequence[str]) -> dict[Any, int]:
        from aiokafka import TopicPartition

        layout = await partitions_of(self.settings.bootstrap, list(topics))
        parts = [TopicPartition(t, p) for t in topics for p in layout.get(t, [])]
        return dict(await self._consumer.end_offsets(parts)) if parts else {}

    async def read(self, start: Mapping[Any, int], end: Mapping[Any, int],
                   each: Callable[[bytes | None, bytes | None], None]) -> int:
        """Call `each(key, value)` for every record in [start, end) of every partition (a
        partition missing from `start` is read from 0); returns how many."""
        todo = {tp: (start.get(tp, 0), stop) for tp, stop in end.items() if stop > start.get(tp, 0)}
        if not todo:
            return 0
        self._consumer.assign(list(todo))
        for tp, (first, _) in todo.items():
            self._consumer.seek(tp, first)
        count = 0
        while todo:
            batch = await self._consumer.getmany(*todo, timeout_ms=500, max_records=20_000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset < todo[tp][1]:
                        each(record.key, record.value)
                        count += 1
            for tp in list(todo):
                if await self._consumer.position(tp) >= todo[tp][1]:
                    del todo[tp]
        self._consumer.assign([])
        return count

    async def settle(self, env: Env, topics: Sequence[str], quiet: float = SETTLE_S,
                     limit: float = 120.0) -> dict[Any, int]:
        """Wait until the topics' end offsets stayed the same for `quiet` seconds (the worker
        has written everything the run caused: state, buffered cycles, their results);
        returns those offsets."""
        deadline = time.monotonic() + limit
        last = await self.ends(topics)
        still_since = time.monotonic()
        while time.monotonic() - still_since < quiet:
            env.check_worker()
            if time.monotonic() > deadline:
                progress(f"warning: the worker was still writing after {limit:.0f} s")
                break
            await asyncio.sleep(0.25)
            now = await self.ends(topics)
            if now != last:
                last, still_since = now, time.monotonic()
        return last


def watched_topics(settings: Settings, changelogs: Sequence[str]) -> list[str]:
    topics = Topics(settings.namespace)
    return [topics.log, topics.events, topics.jobs, *changelogs]
