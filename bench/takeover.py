"""Takeover time of fold workers on a real broker: how long a dead worker's memories go without
an event, with standby replicas 0 and 1, expelled or left to the session timeout, and a
restart in place with static membership on and off.  Not a timed test: it prints a table.

    python -m bench.takeover                  # about 4 minutes on a 2-core machine
    python -m bench.takeover --memories 40 --messages 10 --json   # a smoke run

What runs: a broker (`omstream.infra.broker.Broker`) on free ports in a temporary directory; per
value of `standby_replicas` (`OM_STANDBY_REPLICAS`) a namespace of 4 partitions, two fold workers
(`om worker --role fold`, A and B, each with its own data directory) and one model agent
(`--role models`, scripted models, never killed).  M memories get N messages each (observation
cycles every ~6 messages: real state, observations and history), then messages keep coming
(every memory in turn, `--rate` a second) while, in order:

1. **expelled**: A is SIGKILLed and its member expelled at once (the LeaveGroup a stopped member
   sends, as tests/integration/test_chaos.py does): B takes A's partitions;
2. **session timeout**: A (restarted, partitions back) is SIGKILLed and left: B takes them once
   the group's session timeout (10 s) has passed;
3. **restart, dynamic**: A is SIGKILLed and started again at once on its own data directory:
   a new member, so the group waits for the dead one's session to time out;
4. **restart, static**: the same with `OM_INSTANCE_ID` (`consumer_group_instance_id`) on
   before and after the kill: the restarted process takes the dead member's place.

Each time: from the SIGKILL to the first new event of each partition the killed worker had (a
memory of it folded again; the slowest partition is the row's figure, the fastest beside it), and
how many changelog records the new owner read to restore those partitions (from its recovery's
log: highwater minus "active offsets at start of reading").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from omstream import kafka
from omstream.client import OmClient
from omstream.infra.broker import Broker, free_port
from omstream.processes import start_child, stop_child
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message
from omstream.settings import Settings, load_settings
from omstream.topics import Topics, ensure_topics, memory_partition

PARTITIONS = 4
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike oscar papa".split()
CONFIG = """
[omstream]
namespace = "{namespace}"
bootstrap = "{bootstrap}"
partitions = {partitions}
data_dir = "{data}"
result_key = "takeover-bench"

[observationalMemory.observation]
model = "scripted/observer"
messageTokens = 600
bufferTokens = false

[observationalMemory.reflection]
model = "scripted/reflector"
observationTokens = 4000
"""

_JOINED = re.compile(r"Joined group '[^']+' \(generation (\d+)\) with member_id (\S+?)\"")
_ROW = re.compile(r"\|\s*\S+\s*\|\s*(\d+)\s*\|\s*(-?\d+)\s*\|")


def progress(text: str) -> None:
    print(f"[takeover {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass
class Worker:
    """One `om worker --role fold` slot (A or B) and its current process."""

    name: str
    settings: Settings
    log: Path
    proc: Any = None

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def assignment(self, log_topic: str) -> tuple[int, frozenset[int]] | None:
        """(generation, partitions of the input log) of the last assignment it logged, once its
        recovery of that assignment has ended ("Worker ready"); None before."""
        part = re.compile(re.escape(f"TopicPartition(topic='{log_topic}', partition=") + r"(\d+)\)")
        generation, last, ready = -1, None, False
        for line in self.lines():
            if (joined := _JOINED.search(line)) is not None:
                generation = int(joined.group(1))
            elif "Setting newly assigned partitions" in line:
                last, ready = (generation, frozenset(int(p) for p in part.findall(line))), False
            elif "Worker ready" in line:
                ready = True
        return last if ready else None

    def member_id(self) -> str | None:
        found = _JOINED.findall(self.log.read_text(errors="replace"))
        return found[-1][1] if found else None

    def recovered(self, after: int) -> dict[int, int]:
        """Per changelog partition, the records its last active recovery (in log lines from
        `after` on) read: highwater minus the offset reading started at."""
        highwaters: dict[int, int] = {}
        starts: dict[int, int] = {}
        for line in self.lines()[after:]:
            if not line.startswith("{"):
                continue
            msg = orjson.loads(line).get("msg", "")
            if "Highwater for active" in msg:
                highwaters = {int(p): int(v) for p, v in _ROW.findall(msg)}
            elif "active offsets at start of reading" in msg:
                starts = {int(p): int(v) for p, v in _ROW.findall(msg)}
        return {p: highwaters[p] - starts.get(p, -1) for p in highwaters}


class Events:
    """Follows `<ns>.events`: accepted messages, and the first event of each input partition
    after a mark."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.accepted = 0
        self.mark = float("inf")
        self.first: dict[int, float] = {}  # input partition -> its first event after the mark
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        topic = Topics(self.settings.namespace).events
        self._consumer = kafka.reader(self.settings, auto_offset_reset="earliest", fetch_max_wait_ms=20)
        await self._consumer.start()
        parts = self._consumer.partitions_for_topic(topic) or set(range(PARTITIONS))
        self._consumer.assign([TopicPartition(topic, p) for p in parts])
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def changelog_ends(self, partitions: Iterable[int]) -> dict[int, int]:
        """The end offsets of the state table's changelog partitions (Faust names it
        `<app id>-<table>-changelog`)."""
        from aiokafka import TopicPartition

        topic = f"{self.settings.worker_group}-state-changelog"
        ends = await self._consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: offset for tp, offset in ends.items()}

    def watch(self, at: float) -> None:
        self.mark, self.first = at, {}

    async def _follow(self) -> None:
        layout = list(range(self.settings.partitions))
        while True:
            batch = await self._consumer.getmany(timeout_ms=100, max_records=10_000)
            for records in batch.values():
                for r in records:
                    event = orjson.loads(r.value)
                    self.accepted += event.get("type") == "om-message-accepted"
                    at = r.timestamp / 1000
                    if at > self.mark:
                        key = memory_key(self.settings.om, event.get("threadId") or "", event.get("resourceId"))
                        self.first.setdefault(memory_partition(key.encode(), layout), at)


class Traffic:
    """Messages to every memory in turn: message i of memory m at T0 + 30 s * i."""

    def __init__(self, settings: Settings, memories: int) -> None:
        self.settings, self.memories = settings, memories
        self.sent = [0] * memories

    def next_message(self, m: int) -> Message:
        i = self.sent[m]
        self.sent[m] += 1
        return Message(id=f"m{m}-{i}", thread_id=f"t{m}", resource_id="u1",
                       role="user" if i % 2 == 0 else "assistant",
                       content=" ".join(WORDS[(m + i * 3 + k) % len(WORDS)] for k in range(90)),
                       created_at=T0 + timedelta(seconds=30 * i))

    async def preload(self, om: OmClient, per_memory: int) -> None:
        for _ in range(per_memory):
            await om.send_messages([self.next_message(m) for m in range(self.memories)])

    async def steady(self, om: OmClient, rate: float) -> None:
        m = 0
        while True:
            await om.send_message(self.next_message(m))
            m = (m + 1) % self.memories
            await asyncio.sleep(1 / rate)


@dataclass
class Row:
    standby: int
    case: str
    partitions: list[int]
    slowest: float  # seconds from the kill to the first new event, the slowest partition
    fastest: float
    read: int  # changelog records the new owner read to restore the partitions


class Namespace:
    """A namespace with fold workers A and B and a model agent, all of `standby` replicas."""

    def __init__(self, root: Path, broker: Broker, standby: int) -> None:
        self.root, self.standby = root, standby
        root.mkdir(parents=True)
        config = root / "om.toml"
        config.write_text(CONFIG.format(namespace=f"tk{uuid.uuid4().hex[:8]}", bootstrap=broker.bootstrap,
                                        partitions=PARTITIONS, data=root / "data"))
        self.env_standby = {"OM_STANDBY_REPLICAS": str(standby)}  # what each worker is started with
        self.settings = load_settings(config, env=self.env_standby)
        self.workers = {n: Worker(n, replace(self.settings, role="fold", data_dir=root / f"data-{n}"),
                                  root / f"{n}.log") for n in "AB"}
        self.models = replace(self.settings, role="models", data_dir=root / "data-models")
        self.procs: list[Any] = []

    async def start(self) -> None:
        await ensure_topics(self.settings)
        self.procs.append(start_child(self.models, "worker", self.root / "models.log", env=self.env_standby))
        for w in self.workers.values():
            self._start(w, instance=False)
        await self.covered("the start")

    def _start(self, w: Worker, instance: bool) -> None:
        env = {**self.env_standby, **({"OM_INSTANCE_ID": f"bench-{w.name}"} if instance else {})}
        w.proc = start_child(w.settings, "worker", w.log, env=env)

    def stop(self) -> None:
        for proc in [*self.procs, *(w.proc for w in self.workers.values() if w.proc is not None)]:
            stop_child(proc, kill=True)

    async def covered(self, what: str, timeout: float = 120.0) -> None:
        """Until both workers' last assignments are of one generation and cover the input log."""
        log = Topics(self.settings.namespace).log
        deadline = time.monotonic() + timeout
        while True:
            found = [a for w in self.workers.values() if (a := w.assignment(log)) is not None]
            if (len(found) == len(self.workers) and len({g for g, _ in found}) == 1
                    and sorted(p for _, parts in found for p in parts) == list(range(PARTITIONS))):
                return
            for w in self.workers.values():
                if w.proc.poll() is not None:
                    raise RuntimeError(f"worker {w.name} exited: {w.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no complete assignment after {what}")
            await asyncio.sleep(0.1)


async def expel(settings: Settings, member: str) -> None:
    """The LeaveGroup a stopped member sends itself, for a killed one (test_chaos.py's `expel`)."""
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import LeaveGroupRequest

    client = AIOKafkaClient(bootstrap_servers=settings.bootstrap)
    try:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, settings.worker_group)
        response = await client.send(node, LeaveGroupRequest(settings.worker_group, member))
        assert response.error_code == 0, response
    finally:
        await client.close()


async def takeover(ns: Namespace, events: Events, case: str, *, expelled: bool = False,
                   restart: bool = False, timeout: float = 90.0) -> Row:
    """Kill A as `case` says (`restart`: started again at once under its instance id); until
    every partition it had shows a new event."""
    a, b = ns.workers["A"], ns.workers["B"]
    log = Topics(ns.settings.namespace).log
    assignment = a.assignment(log)
    assert assignment is not None
    moved = sorted(assignment[1])
    member = a.member_id()
    lines = {w.name: len(w.lines()) for w in (a, b)}
    stop_child(a.proc, kill=True)
    killed = time.time()
    events.watch(killed)
    if expelled and member:
        await expel(ns.settings, member)
    if restart:
        ns._start(a, instance=True)
    deadline = time.monotonic() + timeout
    while not all(p in events.first for p in moved):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{case}: partitions {moved} without a new event after {timeout:.0f} s")
        await asyncio.sleep(0.05)
    waits = [events.first[p] - killed for p in moved]
    owner = a if restart else b
    read = owner.recovered(lines[owner.name])
    row = Row(ns.standby, case, moved, max(waits), min(waits), sum(read.get(p, 0) for p in moved))
    progress(f"standby {ns.standby}, {case}: partitions {moved} back in {row.fastest:.2f}-{row.slowest:.2f} s, "
             f"{row.read} changelog records read")
    return row


#: (case, how A dies).  In the dynamic restart the dead member is dynamic and the new process
#: joins static, so that the static case's dead member is static.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("SIGKILL, expelled", {"expelled": True}),
    ("SIGKILL, session timeout", {}),
    ("restart in place, dynamic membership", {"restart": True}),
    ("restart in place, static membership", {"restart": True}),
]


async def folding(ns: Namespace, events: Events, lead: int) -> None:
    """Until A has written `lead` records to each of its partitions' changelog from now: without
    a standby replica, B's copy of them is at least that far behind."""
    assignment = ns.workers["A"].assignment(Topics(ns.settings.namespace).log)
    assert assignment is not None
    start = await events.changelog_ends(assignment[1])
    while True:
        ends = await events.changelog_ends(assignment[1])
        if all(ends[p] >= start[p] + lead for p in start):
            return
        await asyncio.sleep(0.1)


async def run_namespace(root: Path, broker: Broker, standby: int, memories: int, messages: int,
                        rate: float, lead: int) -> list[Row]:
    ns = Namespace(root, broker, standby)
    events = Events(ns.settings)
    rows: list[Row] = []
    try:
        await ns.start()
        await events.start()
        traffic = Traffic(ns.settings, memories)
        async with OmClient(ns.settings) as om:
            progress(f"standby {standby}: {memories} memories x {messages} messages")
            await traffic.preload(om, messages)
            total = memories * messages
            while events.accepted < total:
                await asyncio.sleep(0.2)
            steady = asyncio.create_task(traffic.steady(om, rate))
            try:
                for case, how in CASES:
                    await ns.covered(case)
                    await folding(ns, events, lead)
                    rows.append(await takeover(ns, events, case, **how))
                    if not how.get("restart"):
                        ns._start(ns.workers["A"], instance=False)
                await ns.covered("the end")
            finally:
                steady.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await steady
    finally:
        await events.stop()
        ns.stop()
    return rows


def table(rows: list[Row], memories: int, messages: int, rate: float) -> str:
    out = [f"takeover: 2 fold workers, {PARTITIONS} partitions, {memories} memories x {messages} messages "
           f"before, then {rate:.0f} messages/s; from the SIGKILL to the first new event of the killed "
           "worker's partitions",
           "| standby replicas | case | slowest partition | fastest | changelog records read |",
           "| --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r.standby} | {r.case} | {r.slowest:.2f} s | {r.fastest:.2f} s | {r.read} |")
    return "\n".join(out)


async def main_async(args: argparse.Namespace) -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="takeover-"))
    broker = Broker(root / "kafka", port=free_port(), controller_port=free_port())
    progress(f"broker on {broker.bootstrap}, data in {root}")
    broker.start()
    try:
        await broker.wait_ready(timeout=120)
        rows: list[Row] = []
        for standby in args.standby:
            rows += await run_namespace(root / f"standby{standby}", broker, standby, args.memories,
                                        args.messages, args.rate, args.lead)
        return rows
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.takeover", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--messages", type=int, default=30, help="messages per memory before the kills")
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s during the kills")
    parser.add_argument("--lead", type=int, default=300,
                        help="changelog records A writes on each of its partitions before it is killed")
    parser.add_argument("--standby", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--json", action="store_true", help="rows as JSON instead of the table")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    else:
        print(table(rows, args.memories, args.messages, args.rate))
        print(f"(wall {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
