"""What the chaos and many-workers tests read and judge, shared: `Watcher` follows `<ns>.events`
into a context projection (as `om serve` builds one), `invariants` holds what every run must keep
(each message accepted and in its thread's final context exactly once, no event id with two
contents, `seq` gapless, every blocking cycle ended), and `expel` plays the orchestrator that
tells the group coordinator a SIGKILLed worker is gone.

A producer here is any object with `msgs` (thread -> its messages), `rounds` (rounds produced)
and `last_step` (thread -> the position of its last `step-started`): both tests' producers."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from omstream.projections.views.context import ContextProjection
from omstream.schemas.codec import decode_event
from omstream.schemas.messages import Message
from omstream.topics import Topics, partitions_of

__all__ = ["CYCLE_END", "TIMED", "Seen", "Watcher", "content", "expel", "failure", "invariants"]

#: Fields that carry a model call's measured (wall-clock) duration (see test_recovery.TIMED).
TIMED = ("eventTime", "completedAt", "durationMs", "failedAt")
CYCLE_END = ("data-om-observation-end", "data-om-observation-failed")


@dataclass
class Seen:
    partition: int
    offset: int
    event: object
    at: float  # monotonic time read


class Watcher:
    """Follows `<ns>.events` from the beginning into a context projection (as `om serve` does);
    keeps every record with its position."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.topic = Topics(settings.namespace).events
        self.records: list[Seen] = []
        self.projection = ContextProjection(time_zone=settings.om.time_zone)
        self.applied: dict[int, int] = {}
        self.accepted: dict[str, set[str]] = defaultdict(set)
        self.open: dict[str, dict[str, str]] = defaultdict(dict)  # thread -> cycle -> operation
        self.ids: set[str] = set()
        self.consumer: AIOKafkaConsumer | None = None
        self.parts: list[TopicPartition] = []
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        layout = await partitions_of(self.settings.bootstrap, [self.topic])
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap, group_id=None,
                                         enable_auto_commit=False, auto_offset_reset="earliest")
        await self.consumer.start()
        self.parts = [TopicPartition(self.topic, p) for p in layout[self.topic]]
        self.consumer.assign(self.parts)
        await self.consumer.seek_to_beginning(*self.parts)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.consumer is not None:
            await self.consumer.stop()

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200, max_records=5000)
            now = time.monotonic()
            for tp, records in batch.items():
                for r in records:
                    self._apply(Seen(tp.partition, r.offset, decode_event(r.value), now))

    def _apply(self, seen: Seen) -> None:
        self.records.append(seen)
        e = seen.event
        self.projection.apply_event(e)
        if e.input_offset is not None:
            done = e.input_offset if e.input_last else e.input_offset - 1
            self.applied[seen.partition] = max(done, self.applied.get(seen.partition, -1))
        if e.event_id in self.ids:  # a copy re-sent after a crash
            return
        self.ids.add(e.event_id)
        if e.type == "om-message-accepted":
            self.accepted[e.data.message.thread_id].add(e.data.message.id)
        elif e.type == "data-om-observation-start":
            self.open[e.thread_id][e.data.cycle_id] = e.data.operation_type
        elif e.type in CYCLE_END:
            self.open[e.thread_id].pop(e.data.cycle_id, None)

    def total_accepted(self) -> int:
        return sum(map(len, self.accepted.values()))

    def open_kinds(self) -> set[str]:
        return {op for cycles in self.open.values() for op in cycles.values()}

    async def ends(self) -> dict[int, int]:
        ends = await self.consumer.end_offsets(self.parts)
        return {tp.partition: end for tp, end in ends.items()}

    def settled(self, producer: Any) -> bool:
        """Every message of the producer's conversation sent and accepted, no cycle open, and
        every thread's last step folded (the producer's own sizes: test_many_workers shares it).
        Raises what stopped the reading, if it stopped: a dead watcher would look like a run
        that stopped moving."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            raise AssertionError(f"the watcher of {self.topic} stopped reading") from self._task.exception()
        if producer.rounds < max(len(messages) for messages in producer.msgs.values()):
            return False
        for thread, messages in producer.msgs.items():
            step = producer.last_step.get(thread)
            if (len(self.accepted[thread]) < len(messages) or self.open[thread] or step is None
                    or self.applied.get(step.partition, -1) < step.offset):
                return False
        return True

    async def drain(self, quiet: float = 1.0) -> None:
        """Until every partition is read to its end and nothing came for `quiet` seconds."""
        while True:
            count, ends = len(self.records), await self.ends()
            await asyncio.sleep(quiet)
            positions = {tp.partition: await self.consumer.position(tp) for tp in self.parts}
            if len(self.records) == count and all(positions[p] >= e for p, e in ends.items()):
                return

    def missing(self, producer: Any) -> str:
        rounds = max(len(messages) for messages in producer.msgs.values())
        short = {t: len(self.accepted[t]) for t, ms in producer.msgs.items() if len(self.accepted[t]) < len(ms)}
        busy = {t: dict(c) for t, c in self.open.items() if c}
        behind = {t: (str(s), self.applied.get(s.partition)) for t, s in producer.last_step.items()
                  if self.applied.get(s.partition, -1) < s.offset}
        return (f"rounds produced {producer.rounds}/{rounds}; threads short of messages "
                f"{dict(list(short.items())[:5])} ({len(short)}); open cycles {dict(list(busy.items())[:5])} "
                f"({len(busy)}); steps not yet folded {dict(list(behind.items())[:5])} ({len(behind)})")


_JOINED = re.compile(r"Joined group '[^']+' \(generation \d+\) with member_id (\S+?)\"")


async def expel(settings, log_text: str) -> str:
    """Tell the group coordinator that the killed worker's member left (its last member id in
    its log); the LeaveGroup a cleanly stopped member sends itself.  Returns what happened."""
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import LeaveGroupRequest

    members = _JOINED.findall(log_text)
    if not members:
        return "not joined"
    client = AIOKafkaClient(bootstrap_servers=settings.bootstrap)
    try:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, settings.worker_group)
        response = await client.send(node, LeaveGroupRequest(settings.worker_group, members[-1]))
        return "left" if response.error_code == 0 else f"error {response.error_code}"
    except KafkaError as exc:
        return f"failed: {exc!r}"
    finally:
        await client.close()


def content(event) -> dict:
    body = event.model_dump(mode="json", by_alias=True)
    data = {k: v for k, v in body.get("data", {}).items() if k not in TIMED}
    return {**{k: v for k, v in body.items() if k not in TIMED}, "data": data}


def failure(event) -> tuple[str, str, str, str]:
    """What identifies a failed cycle across the two runs (not its seq: fragile threads differ)."""
    return event.thread_id, event.data.cycle_id, event.data.operation_type, event.data.error or ""


def invariants(name: str, records: list[Seen], messages: dict[str, list[Message]],
               projection: ContextProjection) -> dict:
    """The checks that hold for every run, as figures and a list of problems (not asserted here,
    so that a failing run still prints its figures)."""
    problems: list[str] = []
    distinct: dict[str, object] = {}
    conflicts = []
    for s in records:
        e = s.event
        first = distinct.setdefault(e.event_id, e)
        if content(first) != content(e):
            conflicts.append((first, e))
    if conflicts:
        a, b = conflicts[0]
        problems.append(f"{name}: {len(conflicts)} copies of an event id with other content, e.g. seq "
                        f"{a.seq} of {a.memory_key}: first {a.type} {str(content(a)['data'])[:200]} ... "
                        f"then {b.type} {str(content(b)['data'])[:200]}")
    by_memory: dict[str, list[int]] = defaultdict(list)
    for e in distinct.values():
        by_memory[e.memory_key].append(e.seq)
    gaps = [key for key, seqs in by_memory.items() if sorted(seqs) != list(range(1, len(seqs) + 1))]
    if gaps:
        problems.append(f"{name}: seq not 1..N on {len(gaps)} memories, e.g. {gaps[:3]}")
    accepted: Counter = Counter()
    observed: Counter = Counter()
    starts, ends = {}, set()
    for e in distinct.values():
        if e.type == "om-message-accepted":
            accepted[e.data.message.id] += 1
        elif e.type == "data-om-observation-start":
            starts[e.data.cycle_id] = e
        elif e.type in CYCLE_END:
            ends.add(e.data.cycle_id)
        if e.type == "data-om-observation-end" and e.data.operation_type == "observation":
            observed.update(e.data.observed_message_ids)
    unended = sorted(set(starts) - ends)
    if unended:
        problems.append(f"{name}: {len(unended)} blocking cycles never ended, e.g. "
                        f"{[(starts[c].thread_id, c) for c in unended[:3]]}")
    ids = {m.id for ms in messages.values() for m in ms}
    lost = ids - set(accepted)
    twice = {i for i, n in accepted.items() if n > 1} | {i for i, n in observed.items() if n > 1}
    in_context: Counter = Counter()
    for thread in messages:
        view = projection.threads.get(thread)
        if view is None:
            continue
        snap = view.snapshot()
        listed = [m["id"] for m in snap["messages"]] + snap["observedMessageIds"]
        in_context.update(i for i in listed if i in ids)  # not the temporal-gap markers
    lost |= ids - set(in_context)
    twice |= {i for i, n in in_context.items() if n > 1}
    kinds = {"accepted": accepted, "observed": observed, "in the context": in_context}
    how = "; ".join(f"{kind} twice: {sorted(i for i, n in counts.items() if n > 1)[:5]}"
                    for kind, counts in kinds.items() if any(n > 1 for n in counts.values()))
    if lost:
        problems.append(f"{name}: {len(lost)} messages lost (not accepted, or not in the final "
                        f"context), e.g. {sorted(lost)[:5]}")
    if twice:
        problems.append(f"{name}: {len(twice)} messages accepted, observed or in the context twice ({how})")
    return {"events": len(records), "distinct": len(distinct), "lost": lost, "twice": twice,
            "problems": problems}
