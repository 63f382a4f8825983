"""Many workers, proven: three fold workers and two model-agent processes on six partitions,
killed and restarted while threads talk; nothing lost, nothing doubled, every memory equal to
a calm one-worker run.

Two namespaces get the same input, round by round (message i of every thread, then its step):

- **calm**: one `om worker` (role `all`), undisturbed;
- **many**: six partitions; fold workers `f0`, `f1`, `f2` (`--role fold`) and model agents `m0`,
  `m1` (`--role models`), each with a data directory of its own and one `OM_RESULT_KEY`.  While
  the producer produces, by a fixed plan, each step waiting for its evidence (messages accepted,
  a blocking cycle open, the group's new assignment in the workers' logs), never for a time;
  the producer never runs more than a step ahead of the plan (`Gate`), so that on a loaded
  machine the kills still come while the threads talk:

  1. `f0` is SIGKILLed for good with a cycle open on one of its partitions (its member
     expelled, as the chaos test does, so its partitions move at once instead of after the
     10 s session timeout);
  2. `f3` joins with an empty data directory (it takes partitions, restoring their states from
     the changelog);
  3. `f1` is SIGKILLed (a cycle open on one of its partitions) and started again on an EMPTY
     data directory;
  4. `m0` is SIGKILLed with a cycle open and started again under the same `OM_INSTANCE_ID`:
     static membership gives it its job partitions back without a rebalance of its group;
  5. `f2` is SIGKILLed (a cycle open on one of its partitions) and restarted on its own data
     directory;
  6. `m1` is SIGKILLed for good (expelled: `m0` takes its jobs).

Every original fold worker dies, so every memory's partition moves at least once.  Who owned a
partition when is read from the fold workers' logs (the group's assignments); a model result
*crossed workers* when the fold worker that owned its memory when the job was sent is not the one
that owned it when the result's cycle ended.

No wait has a time budget: each fails only when the run stopped moving (no event read, no
round produced, no assignment logged for `STALL` seconds), and a run that does not settle is
told apart, from the offsets, as late (a job not answered, a result or a message not folded
yet) or lost (a group committed past a record whose effect never came): `diagnose`.  It found a
fold worker whose partitions stopped for good while it lived, nothing lost (their records folded
from the committed offsets by another worker once it was stopped): a seek of an earlier
generation ending after a rebalance had marked its new partitions as not sought, and every
fetch of them was dropped (`WorkerConsumer.perform_seek`; the run prints how many such seeks
it saw).

Judged as test_chaos.py judges (`event_watch.invariants`: accepted once, in the context once, seq
gapless, every blocking cycle ended, no event id with two contents) and as test_recovery.py
compares (every thread's final window and final state equal the calm run's).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import signal
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.messages import Message
from omstream.schemas.positions import LogPosition
from omstream.topics import Topics, memory_partition
from tests.helpers import T0, text_of
from tests.integration.event_watch import CYCLE_END, Seen, Watcher, expel, invariants
from tests.integration.options import om_options
from tests.integration.support import committed, end_offsets, final_states, read_all
from tests.integration.test_recovery import comparable as without_positions

# The last resort only: every wait below fails on its own when the run stops moving.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

THREADS = tuple(f"w{n:02d}" for n in range(24))
PER_THREAD = 40
PARTITIONS = 6
ROUND_PAUSE = 0.5  # seconds between rounds: production spans the plan
KEY = "many-workers-shared-key"
# Each model call takes half a second, as a hosted model's does, so cycles are open while
# workers die (the scripted models answer at once otherwise).
SLOW = {"latencyMs": 500}
OPTIONS = om_options(observation={"messageTokens": 600, "bufferTokens": False, "modelSettings": SLOW},
                     reflection={"observationTokens": 1200, "modelSettings": SLOW})
CONCURRENCY = {"OM_MODEL_CONCURRENCY": "6"}
#: Seconds without progress (an event read, a round produced, an assignment logged) after which
#: a wait fails: the run is stuck, not slow.  On an idle machine the longest quiet stretch is a
#: few seconds; 30 s flipped on a loaded one while nothing was wrong with the run.
STALL = 120.0
#: The plan's steps, as shares of the messages accepted.
MARKS = (0.25, 0.35, 0.45, 0.55, 0.65, 0.75)
PARTS = ("observations", "observedMessageIds", "messages", "chat", "currentTask", "suggestedResponse",
         "generation")


def comparable(state: dict) -> dict:
    """test_recovery's comparison of final states, without the end times of past generations:
    a cycle ends at its start plus the model call's measured duration (`engine.cycles.jobs.outcome_time`),
    which differs between two runs of a model that takes time."""
    state = without_positions(state)
    return {**state, "history": [{k: v for k, v in h.items() if k != "ended_at"} for h in state.get("history", [])]}


def conversation() -> dict[str, list[Message]]:
    return {thread: [Message(id=f"{thread}-m{i}", thread_id=thread, resource_id="u1",
                             role="user" if i % 2 == 0 else "assistant",
                             content=f"[{i}] " + text_of(20 + (i * 17 + n * 5) % 60, i + n),
                             created_at=T0 + timedelta(seconds=30 * i)) for i in range(PER_THREAD)]
            for n, thread in enumerate(THREADS)}


class Gate:
    """How many rounds the producer may have produced.  The plan opens it a step at a time: on
    a loaded machine the producer used to finish the conversation before the plan's kills, so
    no kill found a cycle open (a failure with nothing wrong)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.waiting = False  # the producer is held at the gate
        self._opened = asyncio.Event()

    def open_to(self, rounds: int) -> None:
        if rounds > self.rounds:
            self.rounds = min(rounds, PER_THREAD)
            self._opened.set()

    async def wait_for(self, round_: int) -> None:
        while round_ >= self.rounds:
            self.waiting = True
            self._opened.clear()
            await self._opened.wait()
        self.waiting = False


class Producer:
    """Round i: message i of every thread, then its step; each message's position kept (to
    tell a message lost from one late, `diagnose`)."""

    def __init__(self, settings, msgs, gate: Gate | None = None) -> None:
        self.settings, self.msgs, self.gate = settings, msgs, gate
        self.rounds = 0
        self.last_step = {}
        self.positions: dict[str, LogPosition] = {}

    async def run(self) -> None:
        async with OmClient(self.settings) as om:
            for i in range(PER_THREAD):
                if self.gate is not None:
                    await self.gate.wait_for(i)
                await asyncio.gather(*(self._turn(om, t, i) for t in THREADS))
                self.rounds = i + 1
                await asyncio.sleep(ROUND_PAUSE)

    async def _turn(self, om, thread: str, i: int) -> None:
        m = self.msgs[thread][i]
        self.positions[m.id] = await om.send_message(m)
        self.last_step[thread] = await om.step_started(thread, step_number=0, resource_id="u1", at=m.created_at,
                                                       after_message_id=m.id)


class WallWatcher(Watcher):
    """The shared watcher (`event_watch.Watcher`), with each event's broker timestamp (wall
    clock, seconds) as its time, to set beside the workers' logs."""

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batch.items():
                for r in records:
                    self._apply(Seen(tp.partition, r.offset, self._decode(r.value), r.timestamp / 1000))

    @staticmethod
    def _decode(value: bytes):
        from omstream.schemas.codec import decode_event

        return decode_event(value)


# --- the group's assignments, from the fold workers' logs --------------------------------------------
_JOINED = re.compile(r'"ts":"([^"]+)".*Joined group \'[^\']+\' \(generation (\d+)\)')
_ASSIGNED = re.compile(r'"ts":"([^"]+)".*Setting newly assigned partitions')


@dataclass
class Process:
    """One `om worker` process of the many run."""

    name: str  # f0, f1', ... (a restart is another process of the same slot)
    worker: object
    killed_at: float | None = None

    def assignments(self, log_topic: str) -> list[tuple[float, int, frozenset[int]]]:
        """(wall time, generation, partitions of the input log) for each assignment it logged."""
        out, generation = [], -1
        part = re.compile(re.escape(f"TopicPartition(topic='{log_topic}', partition=") + r"(\d+)\)")
        for line in self.worker.tail(10**9).splitlines():
            if (joined := _JOINED.search(line)) is not None:
                generation = int(joined.group(2))
            elif (assigned := _ASSIGNED.search(line)) is not None:
                at = datetime.fromisoformat(assigned.group(1)).timestamp()
                out.append((at, generation, frozenset(int(p) for p in part.findall(line))))
        return out


@dataclass
class Many:
    """The many run's processes, and what the plan did."""

    env: object
    processes: dict[str, Process] = field(default_factory=dict)
    live: dict[str, Process] = field(default_factory=dict)  # slot -> its running process
    kills: list[str] = field(default_factory=list)
    mid_cycle_kills: int = 0
    steps: list[str] = field(default_factory=list)
    generation: int = -1  # the newest generation of the fold group in the logs: progress of a rebalance

    def start(self, slot: str, role: str, *, empty: bool = False, instance: bool = False) -> Process:
        data = self.env.root / f"data-{slot}"
        if empty and data.exists():
            shutil.rmtree(data)
        env = {"OM_RESULT_KEY": KEY, **CONCURRENCY, **({"OM_INSTANCE_ID": slot} if instance else {})}
        worker = self.env.start_worker(role=role, data_dir=data, env=env)
        name = slot + "'" * sum(p.startswith(slot) for p in self.processes)
        process = Process(name, worker)
        self.processes[name] = process
        self.live[slot] = process
        return process

    async def kill(self, slot: str, *, for_good: bool) -> Process:
        process = self.live.pop(slot) if for_good else self.live[slot]
        process.worker.kill()
        process.killed_at = time.time()
        self.kills.append(process.name)
        if not (slot.startswith("m") and not for_good):  # m0 comes back under its static id
            outcome = await expel(process.worker.settings, process.worker.tail(10**9))
            assert outcome == "left", (process.name, outcome)
        return process

    def log_topic(self) -> str:
        return Topics(self.env.settings.namespace).log

    def covered(self) -> bool:
        """The live fold workers' last assignments are of one generation and cover every
        partition of the input log: a rebalance has finished."""
        latest = [p.assignments(self.log_topic()) for slot, p in self.live.items() if slot.startswith("f")]
        self.generation = max([a[-1][1] for a in latest if a] + [self.generation])
        if not latest or not all(latest):
            return False
        generations = {a[-1][1] for a in latest}
        owned = [part for a in latest for part in a[-1][2]]
        return len(generations) == 1 and sorted(owned) == list(range(PARTITIONS))

    async def wait_covered(self, what: str, progress: Callable[[], Hashable]) -> float:
        def covered() -> bool:
            for p in self.live.values():
                assert p.worker.proc.poll() is None, f"{p.name} exited: {p.worker.tail()}"
            return self.covered()

        return await until(covered, f"a complete assignment after {what}", lambda: (progress(), self.generation),
                           report=lambda: self.env.logs()[-4000:], every=0.2)

    def partitions_of(self, slot: str) -> frozenset[int]:
        """The input log's partitions the fold worker in `slot` was last assigned."""
        assigned = self.live[slot].assignments(self.log_topic())
        return assigned[-1][2] if assigned else frozenset()

    def owners(self) -> dict[int, list[tuple[float, str]]]:
        """Per partition of the input log, (since, process) in time order: who folded it."""
        timeline: dict[int, list[tuple[float, str]]] = defaultdict(list)
        for name, p in self.processes.items():
            if not p.worker.settings.role == "fold":
                continue
            for at, _, parts in p.assignments(self.log_topic()):
                for part in parts:
                    timeline[part].append((at, name))
        return {part: sorted(entries) for part, entries in timeline.items()}


def owner_at(timeline: list[tuple[float, str]], at: float) -> str | None:
    i = bisect_right(timeline, (at, "\uffff"))
    return timeline[i - 1][1] if i else None


class Stalled(AssertionError):
    """A wait saw no progress for `STALL` seconds."""


async def until(condition: Callable[[], bool], what: str, progress: Callable[[], Hashable], *,
                report: Callable[[], str] = lambda: "", every: float = 0.1,
                on_idle: Callable[[], None] | None = None) -> float:
    """Wait for `condition`, as long as the run moves: fail only when `progress()` (figures
    that change while anything happens) stayed the same for `STALL` seconds, never on a time
    budget (a loaded machine is slower, not wrong).  `on_idle` is called at each look while
    the condition does not hold.  Returns the seconds waited."""
    t0 = time.monotonic()
    last, since = progress(), t0
    while not condition():
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > STALL:
            raise Stalled(f"no progress for {STALL:.0f}s waiting for {what} ({time.monotonic() - t0:.0f}s "
                          f"in all; figures {now}): {report()}")
        if on_idle is not None:
            on_idle()
        await asyncio.sleep(every)
    return time.monotonic() - t0


async def diagnose(settings, watcher: Watcher, producer: Producer, many: Many) -> str:
    """Why a run has not settled, from the offsets: per thread short of messages, each open
    cycle's job and result, and the messages not accepted, against what the fold workers'
    group and the model agents' group committed.  A record a group committed past whose effect
    never came is LOST (a correctness bug); one not committed past is late (still to be read)."""
    topics = Topics(settings.namespace)
    fold = await committed(settings, replace(settings, role="fold").worker_group, topics.log)
    models = await committed(settings, replace(settings, role="models").worker_group, topics.jobs)
    ends = {"log": await end_offsets(settings, topics.log), "jobs": await end_offsets(settings, topics.jobs)}
    jobs, results = {}, {}
    for r in await read_all(settings, topics.jobs, idle=0.3):
        jobs.setdefault(orjson.loads(r.value)["cycleId"], LogPosition(r.partition, r.offset))
    for r in await read_all(settings, topics.log, idle=0.3):
        if b'"model-result"' in r.value:
            results.setdefault(orjson.loads(r.value)["cycleId"], LogPosition(r.partition, r.offset))
    lines, lost = [], 0
    for thread, messages in producer.msgs.items():
        missing = [m.id for m in messages if m.id not in watcher.accepted[thread]]
        if not missing and not watcher.open[thread]:
            continue
        said = []
        for cycle in watcher.open[thread]:
            job, result = jobs.get(cycle), results.get(cycle)
            if result is not None:
                passed = fold[result.partition] > result.offset
                said.append(f"cycle {cycle}: result at log {result}, fold committed {fold[result.partition]}: "
                            + ("LOST (folded past, the cycle never ended)" if passed else "late (not folded yet)"))
            elif job is not None:
                passed = models[job.partition] > job.offset
                said.append(f"cycle {cycle}: job at jobs {job}, no result; models committed {models[job.partition]}: "
                            + ("LOST (answered past, no result)" if passed else "late (not answered yet)"))
            else:
                passed = False
                said.append(f"cycle {cycle}: no job on the jobs topic yet")
            lost += passed
        if not watcher.open[thread]:  # nothing holds the thread's messages: each one is folded or not
            for message in missing:
                at = producer.positions.get(message)
                passed = at is not None and fold[at.partition] > at.offset
                lost += passed
                said.append(f"message {message} at log {at}, fold committed "
                            f"{fold.get(at.partition) if at else '?'}: " + ("LOST" if passed else "late"))
        lines.append(f"  {thread}: {len(missing)} messages not accepted ({missing[:3]}...); " + "; ".join(said[:4]))
    verdict = f"{lost} records LOST (a group committed past them)" if lost else "nothing lost: late only"
    # Late has a reason in the processes: one that died, an agent still starting, a rebalance.
    processes = "; ".join(
        f"{p.name} {'running' if p.worker.proc.poll() is None else f'EXITED {p.worker.proc.poll()}'}"
        f"{'' if 'agent ready' in (log := p.worker.tail(10**9)) else ', agent NOT ready'}, "
        f"last log line {log.rstrip().rsplit(chr(10), 1)[-1][:160]!r}" for p in many.live.values())
    return (f"{verdict}; processes: {processes}; log ends {ends['log']}, fold committed {fold}, jobs ends {ends['jobs']}, models "
            f"committed {models}, inputs applied per the events {dict(sorted(watcher.applied.items()))}\n"
            + "\n".join(lines))


async def dump_tasks(many: Many) -> str:
    """Every live process's threads and asyncio tasks, written to its log (SIGUSR1: the
    `mode` worker's dump): where a stalled worker waits, for the next run that stalls."""
    for p in many.live.values():
        if p.worker.proc.poll() is None:
            os.kill(p.worker.proc.pid, signal.SIGUSR1)

    def dumped() -> bool:
        return all(p.worker.proc.poll() is not None or "TASKS" in p.worker.tail(10**9) for p in many.live.values())

    deadline = time.monotonic() + 20
    while not dumped() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return "task dumps (SIGUSR1) in " + ", ".join(f"{p.name}: {p.worker.log}" for p in many.live.values())


async def scenario(calm, many_env, msgs, started: float) -> dict:
    calm.start_worker(env=CONCURRENCY)
    many = Many(many_env)
    for n in range(3):
        many.start(f"f{n}", "fold")
    many.start("m0", "models", instance=True)
    many.start("m1", "models")
    await many.wait_covered("the start", lambda: 0)
    gate = Gate(math.ceil(MARKS[1] * PER_THREAD))
    producers = {"calm": Producer(calm.settings, msgs), "many": Producer(many_env.settings, msgs, gate)}
    watchers = {"calm": WallWatcher(calm.settings), "many": WallWatcher(many_env.settings)}
    for w in watchers.values():
        await w.start()
    producing = [asyncio.create_task(p.run()) for p in producers.values()]
    watch = watchers["many"]
    total = len(THREADS) * PER_THREAD
    layout = list(range(PARTITIONS))
    partition_of = {t: memory_partition(f"thread:{t}".encode(), layout) for t in THREADS}
    waits: dict[str, float] = {}

    def progress() -> Hashable:
        return (sum(len(w.records) for w in watchers.values()), tuple(p.rounds for p in producers.values()))

    def open_on(parts: frozenset[int]) -> bool:
        """A blocking cycle is open on one of the partitions."""
        return any(cycles and partition_of[t] in parts for t, cycles in watch.open.items())

    def one_more_round() -> None:
        """Held at the gate while the plan waits for a cycle to open: let the producer on, a
        round at a time (a cycle opens only when messages come)."""
        if gate.waiting:
            gate.open_to(producers["many"].rounds + 1)

    async def at_mark(step: int, *, cycle_on: str | None = None, cycle_open: bool = True) -> None:
        """Step `step` of the plan: its share of the messages accepted, then (`cycle_open`) a
        blocking cycle open, on a partition of `cycle_on`'s fold worker when given."""
        share = MARKS[step]
        # Reachable with the gate where it is (at the next step's mark): no round more.
        waits[f"{share:.0%}"] = await until(lambda: watch.total_accepted() >= share * total,
                                            f"{share:.0%} accepted", progress)
        if cycle_open:  # the group's assignment is settled here (`wait_covered`): read once
            parts = many.partitions_of(cycle_on) if cycle_on is not None else frozenset(layout)
            waits[f"{share:.0%} open"] = await until(lambda: open_on(parts), f"a cycle open on {cycle_on or 'any'}",
                                                     progress, on_idle=one_more_round)
            many.mid_cycle_kills += 1

    def next_step(step: int) -> None:
        """Step `step` done: the producer may go on to the step after the next one's mark."""
        gate.open_to(math.ceil(MARKS[step + 2] * PER_THREAD) if step + 2 < len(MARKS) else PER_THREAD)

    async def plan() -> None:
        await at_mark(0, cycle_on="f0")
        await many.kill("f0", for_good=True)
        waits["f0 gone"] = await many.wait_covered("f0 killed for good", progress)
        many.steps.append(f"f0 killed for good at {time.monotonic() - started:.1f}s")
        next_step(0)

        await at_mark(1, cycle_open=False)
        many.start("f3", "fold", empty=True)
        waits["f3 in"] = await many.wait_covered("f3 joined", progress)
        many.steps.append(f"f3 joined empty at {time.monotonic() - started:.1f}s")
        next_step(1)

        await at_mark(2, cycle_on="f1")
        await many.kill("f1", for_good=True)
        many.start("f1", "fold", empty=True)
        waits["f1 back"] = await many.wait_covered("f1 restarted empty", progress)
        many.steps.append(f"f1 killed, restarted empty at {time.monotonic() - started:.1f}s")
        next_step(2)

        await at_mark(3)
        await many.kill("m0", for_good=False)
        many.start("m0", "models", instance=True)
        many.steps.append(f"m0 killed, restarted under its instance id at {time.monotonic() - started:.1f}s")
        next_step(3)

        await at_mark(4, cycle_on="f2")
        await many.kill("f2", for_good=True)
        many.start("f2", "fold")
        waits["f2 back"] = await many.wait_covered("f2 restarted", progress)
        many.steps.append(f"f2 killed, restarted on its data at {time.monotonic() - started:.1f}s")
        next_step(4)

        await at_mark(5)
        await many.kill("m1", for_good=True)
        many.steps.append(f"m1 killed for good at {time.monotonic() - started:.1f}s")
        next_step(5)

    try:
        # The plan, then until both settle, as long as anything happens; a run that stopped
        # short is told apart as late or lost from the offsets, and the judge says what is missing.
        try:
            await plan()
            waits["settle"] = await until(lambda: all(w.settled(producers[n]) for n, w in watchers.items()),
                                          "both runs to settle", progress)
        except Stalled as exc:
            many.steps.append(f"NOT settled after {time.monotonic() - started:.1f}s: {str(exc)[:300]}\n"
                              + await diagnose(many_env.settings, watch, producers["many"], many)
                              + "\n" + await dump_tasks(many))
            gate.open_to(PER_THREAD)  # the plan stopped short: the producer may finish
        settled_at = time.monotonic() - started
        for w in watchers.values():
            await w.drain()
        await asyncio.gather(*producing)
        topics = Topics(many_env.settings.namespace)
        jobs = await read_all(many_env.settings, topics.jobs, idle=0.3)
        log = await read_all(many_env.settings, topics.log, idle=0.3)
        dlq = {n: await read_all(e.settings, Topics(e.settings.namespace).dlq, idle=0.3)
               for n, e in (("calm", calm), ("many", many_env))}
        states = {n: await final_states(e.settings) for n, e in (("calm", calm), ("many", many_env))}
    finally:
        for task in producing:
            task.cancel()
        for w in watchers.values():
            await w.stop()
    return {"many": many, "watchers": watchers, "jobs": jobs, "log": log, "dlq": dlq, "states": states,
            "settled_at": settled_at, "waits": waits, "gate": gate.rounds}


def test_many_workers_under_kills_keep_every_memory(new_env):
    started = time.monotonic()
    msgs = conversation()
    calm = new_env(options=OPTIONS)
    many_env = new_env(options=OPTIONS, partitions=PARTITIONS)
    figures = asyncio.run(scenario(calm, many_env, msgs, started))
    many: Many = figures["many"]
    watchers = figures["watchers"]
    checked = {n: invariants(n, w.records, msgs, w.projection) for n, w in watchers.items()}

    # Who folded what, when: the partitions' owners from the fold workers' logs.
    owners = many.owners()
    layout = list(range(PARTITIONS))
    partition_of = {t: memory_partition(f"thread:{t}".encode(), layout) for t in THREADS}
    moved = {t for t in THREADS if len({name for _, name in owners.get(partition_of[t], [])}) >= 2}
    # A move mid-cycle: a memory's partition changed hands while one of its blocking cycles was open.
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    first: dict[str, Seen] = {}
    for s in watchers["many"].records:
        first.setdefault(s.event.event_id, s)
    opened: dict[str, float] = {}
    for s in sorted(first.values(), key=lambda s: s.at):
        e = s.event
        if e.type == "data-om-observation-start":
            opened[e.data.cycle_id] = s.at
        elif e.type in CYCLE_END and e.data.cycle_id in opened:
            spans[e.thread_id].append((opened[e.data.cycle_id], s.at))
    handovers = {part: [at for (at, name), (_, before) in zip(entries[1:], entries) if name != before]
                 for part, entries in owners.items()}
    mid_cycle = {t for t in THREADS for at in handovers.get(partition_of[t], [])
                 if any(a < at < b for a, b in spans[t])}
    # A result crossed workers: the job was sent under one fold worker, its cycle ended under another.
    sent = {}
    for r in figures["jobs"]:
        job = orjson.loads(r.value)
        sent.setdefault(job["cycleId"], (job["threadId"], r.timestamp / 1000))
    ended = {s.event.data.cycle_id: s.at for s in first.values() if s.event.type in CYCLE_END}
    crossed = sum(1 for cycle, (thread, at) in sent.items() if cycle in ended
                  and owner_at(owners[partition_of[thread]], at) != owner_at(owners[partition_of[thread]], ended[cycle]))
    results = [r for r in figures["log"] if b'"model-result"' in r.value]

    # Equal to the calm run: every window, every final state.
    calm_view, many_view = watchers["calm"].projection, watchers["many"].projection
    differing = [t for t in THREADS if t not in calm_view.threads or t not in many_view.threads
                 or any(calm_view.threads[t].snapshot()[p] != many_view.threads[t].snapshot()[p] for p in PARTS)]
    states = figures["states"]
    unequal = [t for t in THREADS if comparable(states["calm"].get(f"thread:{t}", {}))
               != comparable(states["many"].get(f"thread:{t}", {}))]
    cycles = sum(len(v) for v in spans.values())
    # Fetches that came back past records never delivered, read again (`WorkerConsumer._hand_over`).
    reread = sum(p.worker.tail(10**9).count("records were fetched and not delivered") for p in many.processes.values())
    # Fetches that came back before the new owner's seek to the committed offset, dropped.
    early = sum(p.worker.tail(10**9).count("records fetched before the seek") for p in many.processes.values())
    # Seeks of an earlier generation that ended after a rebalance: one that ended after the new
    # generation's own seek used to stall the worker's partitions for good (every later fetch
    # dropped as early) until the next rebalance.
    stale = sum(p.worker.tail(10**9).count("a seek of an earlier generation ended") for p in many.processes.values())
    # Changelog partitions whose restore received nothing and were read again (`WorkerRecovery`).
    restores = sum(p.worker.tail(10**9).count("being restored received nothing") for p in many.processes.values())
    lost = len(checked["many"]["lost"]) + len(checked["calm"]["lost"])
    twice = len(checked["many"]["twice"]) + len(checked["calm"]["twice"])
    # The longest stretch in which neither run wrote an event (broker times): how near a run came
    # to the wait's `STALL`; a restarted model agent's start-up and a rebalance make most of it.
    times = sorted(s.at for w in watchers.values() for s in w.records)
    quiet = max((b - a for a, b in zip(times, times[1:])), default=0.0)
    print(f"\nmany workers: {len(THREADS)} threads x {PER_THREAD} messages with steps on {PARTITIONS} partitions, "
          f"{len(many.processes)} worker processes (fold and model agents apart); memories moved "
          f"{len(moved)}/{len(THREADS)} (mid-cycle {len(mid_cycle)}), kills {len(many.kills)} "
          f"({many.mid_cycle_kills} with a cycle open: {', '.join(many.kills)}), results "
          f"{len(results)} of {len(sent)} jobs, results that crossed workers {crossed}, blocking cycles "
          f"{cycles}, fetches read again {reread}, fetches before the seek dropped {early}, stale seeks {stale}, "
          f"restores read again {restores}, "
          f"lost={lost} duplicated={twice}, windows equal to the calm run "
          f"{len(THREADS) - len(differing)}/{len(THREADS)}, states equal {len(THREADS) - len(unequal)}/{len(THREADS)}, "
          f"settled {figures['settled_at']:.1f}s, longest stretch without an event {quiet:.1f}s, "
          f"wall {time.monotonic() - started:.1f}s")
    print("  waits (s): " + ", ".join(f"{what} {seconds:.1f}" for what, seconds in figures["waits"].items())
          + f"; the plan let the producer on to round {figures['gate']} of {PER_THREAD}")
    for step in many.steps:
        print(f"  {step}")
    for part, entries in sorted(owners.items()):
        print(f"  partition {part}: " + " -> ".join(name for _, name in entries))

    problems = [p for found in checked.values() for p in found["problems"]]
    problems += [step for step in many.steps if step.startswith("NOT settled")]
    assert not problems, "\n".join(problems) + "\n" + many_env.logs()[-3000:]
    for name, letters in figures["dlq"].items():
        assert not letters, f"{name}: {len(letters)} dead letters, e.g. {letters[0].value[:300]!r}"
    assert not differing, f"{len(differing)} threads' windows differ from the calm run: {differing[:5]}"
    if unequal:
        a, b = (comparable(states[n].get(f"thread:{unequal[0]}", {})) for n in ("calm", "many"))
        detail = {k: (str(a.get(k))[:300], str(b.get(k))[:300]) for k in set(a) | set(b) if a.get(k) != b.get(k)}
        pytest.fail(f"{len(unequal)} threads' final states differ from the calm run: {unequal[:5]}; {detail}")
    assert lost == 0 and twice == 0
    assert moved == set(THREADS), sorted(set(THREADS) - moved)
    assert mid_cycle and crossed > 0 and many.mid_cycle_kills >= 1, (mid_cycle, crossed, many.mid_cycle_kills)
    assert len(many.kills) == 5
