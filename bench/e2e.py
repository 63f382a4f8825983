"""End-to-end benchmark of one worker (or `--fold-workers N` fold workers and a models worker): a
real broker, `om worker` children, the producer client.

    python -m bench.e2e            # the default sizes, meant for under 10 minutes on an idle 2-core machine
    python -m bench.e2e --quick    # a smoke run of about a minute
    python -m bench.e2e --help

What runs
    A single-node Kafka broker (`omstream.infra.broker.Broker`) on free ports in a temporary
    directory, the topics of a fresh namespace (`omstream.topics.ensure_topics`, 4 partitions),
    and ONE worker child (`omstream.processes.start_child(settings, "worker", log)`), with the
    scripted observer and reflector (no network), async buffering on (the default) and
    `messageTokens` 3000 so cycles happen.  The bench process produces with `OmClient` and
    follows `<ns>.events` with a plain aiokafka consumer; every time stamp is
    `time.monotonic()` in this process (at produce, and when an event is consumed).

What is measured (each run uses its own threads, all in the one namespace)
    1. sustained messages/s without steps: T threads x N messages of ~200 tokens, each thread
       sending its messages one after another as fast as the broker acknowledges them, from the
       first produce to the consume of the last `om-message-accepted` of the run;
    2. the same with a `step-started` after each message (the agent-loop shape), until the last
       message is accepted and every step's `data-om-status` has been consumed;
    3. latency at fixed offered loads (messages/s): half the threads send messages only (their
       thresholds are checked per message) -> produce to `data-om-status` p50/p99; the other
       half send a step after each message -> step to `data-om-activation` p50/p99, for the
       steps that crossed the activation threshold.  Events are matched to their inputs in
       fold order per thread (`message_status_times`, `step_times`), not by `inputOffset`: a
       record held during a blocking cycle carries the offset of the result that released it;
    4. changelog bytes per message: key + value bytes appended to every `<app_id>-*-changelog`
       topic while run 1 ran (until the worker went quiet), divided by run 1's messages;
    5. state bytes of one memory after 100 / 1 000 / 10 000 messages on one thread (produced
       in order, at most `STATE_WINDOW` ahead of the fold, as a conversation is): the
       changelogs read back, the latest value per key (None is a tombstone), summed over the
       keys `thread:<id>` and `thread:<id>\\x00...` (the split layout);
    6. the worker's RSS (VmRSS of the python process of its process group) after each run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.fold_bench import make_bodies
from omstream import kafka
from omstream.client import OmClient
from omstream.engine.tokens import get_counter
from omstream.infra.broker import Broker, free_port
from omstream.processes import start_child, stop_child
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message
from omstream.settings import Settings, load_settings
from omstream.topics import Topics, ensure_topics, partitions_of

__all__ = ["Latency", "Options", "belongs_to", "live_sizes", "main", "memory_state_bytes",
           "message_status_times", "percentile", "step_times", "worker_rss_kb"]

#: messages/s the original implementation sustained end to end, with async buffering.
ORIGINAL_MPS = 62.0
COUNTERS = ("tokenx", "tiktoken")
BODY_POOL = 400  # distinct message bodies, reused under distinct ids (generation is not timed)
#: Quiet time after which the worker is taken to be idle (no new events, jobs or changelog).
SETTLE_S = 2.0
#: Run 5 produces at most this many messages ahead of the last one the fold accepted.
STATE_WINDOW = 10


# --- pure helpers (tested in tests/unit/test_bench_smoke.py) -------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def live_sizes(records: Iterable[tuple[bytes | None, bytes | None]],
               sizes: dict[bytes, int] | None = None) -> dict[bytes, int]:
    """len(key) + len(value) of each key's latest value, in changelog order; a None value is a
    tombstone (the key is deleted).  Updates and returns `sizes` when given (incremental reads)."""
    sizes = {} if sizes is None else sizes
    for key, value in records:
        key = key or b""
        if value is None:
            sizes.pop(key, None)
        else:
            sizes[key] = len(key) + len(value)
    return sizes


def belongs_to(key: bytes, memory: bytes) -> bool:
    """Whether a table key stores (part of) a memory: the bare memory key (the one-value layout)
    or the memory key, a NUL byte, and a suffix (the split layout)."""
    return key == memory or key.startswith(memory + b"\x00")


def memory_state_bytes(sizes: Mapping[bytes, int], memory: bytes) -> tuple[int, int]:
    """(bytes, keys) of one memory's live state, from `live_sizes`."""
    mine = [size for key, size in sizes.items() if belongs_to(key, memory)]
    return sum(mine), len(mine)


def worker_rss_kb(pgid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """VmRSS and VmHWM (peak), in kB, summed over the python processes of a process group (the
    worker child is its group's leader; Faust runs in that one process)."""
    rss = peak = count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:  # gone meanwhile
            continue
        # After the last ')' (the command name may hold spaces): state, ppid, pgrp, ...
        if int(stat.rsplit(")", 1)[1].split()[2]) != pgid or "python" not in stat.split(")")[0]:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss += int(fields.get("VmRSS", "0 kB").split()[0])
        peak += int(fields.get("VmHWM", "0 kB").split()[0])
        count += 1
    return {"rss_kb": rss, "peak_kb": peak, "processes": count}


@dataclass(frozen=True)
class Latency:
    """A latency distribution, in milliseconds."""

    n: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        return cls(len(ms), percentile(ms, 50), percentile(ms, 99), max(ms, default=None))


# --- options ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    threads: int = 100            # runs 1 and 2: threads ...
    messages: int = 100           # ... times messages per thread
    tokens: int = 200             # tokens per message (under the configured counter)
    message_tokens: int = 3000    # observation.messageTokens: cycles happen every ~15 messages
    loads: tuple[int, ...] = (200, 1000)
    load_seconds: float = 3.0     # how long each offered load is produced
    load_threads: int = 20        # half message-only, half agent-loop
    checkpoints: tuple[int, ...] = (100, 1_000, 10_000)
    counter: str = "tokenx"
    seed: int = 7
    stall: float = 120.0          # fail when no awaited event arrives for this long
    fold_workers: int = 0         # 0: one `om worker` (role all); N: N `--role fold` + one `--role models`
    model_latency_ms: int = 0     # each scripted model call takes this long (modelSettings.latencyMs)
    model_concurrency: int | None = None  # [omstream] model_concurrency (None: the default)
    state: bool = True            # run 5 (a growing memory's state bytes)
    out: Path | None = None
    keep: bool = False


QUICK = dict(threads=10, messages=20, loads=(100,), load_seconds=3.0, load_threads=10,
             checkpoints=(20, 100))


# --- the environment: broker, namespace, worker ----------------------------------------------------
CONFIG = """
[omstream]
namespace = "{namespace}"
bootstrap = "{bootstrap}"
partitions = 4
data_dir = "{data}"

[observationalMemory]
tokenCounter = "{counter}"

[observationalMemory.observation]
model = "scripted/observer"
messageTokens = {message_tokens}

[observationalMemory.reflection]
model = "scripted/reflector"
"""
#: Every worker of the namespace signs and checks model results with this key (each has a data
#: directory of its own, which would otherwise make a key of its own).
RESULT_KEY = "e2e-bench-shared-result-key"


class BenchError(RuntimeError):
    """The benchmark could not go on (worker died, nothing arrived); the message says why."""


@dataclass
class Env:
    """What one benchmark run set up; `cleanup` undoes it (also on Ctrl-C and failures).
    `workers` are (name, process, log): one `all` worker, or fold workers and a models one."""

    root: Path
    settings: Settings
    workers: list[tuple[str, subprocess.Popen, Path]]

    @property
    def worker(self) -> subprocess.Popen:
        return self.workers[0][1]

    @property
    def worker_log(self) -> Path:
        return self.workers[0][2]

    def worker_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name} ({log}):\n" + log.read_text(errors="replace")[-chars:]
                         for name, _, log in self.workers if log.exists())

    def check_worker(self) -> None:
        for name, worker, _ in self.workers:
            if worker.poll() is not None:
                raise BenchError(f"worker {name} exited with code {worker.returncode}:\n"
                                 f"{self.worker_tail()}")

    def rss(self) -> dict[str, int]:
        """worker_rss_kb summed over every worker."""
        each = [worker_rss_kb(worker.pid) for _, worker, _ in self.workers]
        return {key: sum(e[key] for e in each) for key in ("rss_kb", "peak_kb", "processes")}


def config_text(options: Options, namespace: str, bootstrap: str, data: Path) -> str:
    """CONFIG for `options`, with `model_concurrency` and the scripted models' `latencyMs` when
    set (CONFIG keeps its placeholders: other benches format it themselves)."""
    text = CONFIG.format(namespace=namespace, bootstrap=bootstrap, data=data, counter=options.counter,
                         message_tokens=options.message_tokens)
    if options.model_concurrency is not None:
        text = text.replace("\n[observationalMemory]\n",
                            f"model_concurrency = {options.model_concurrency}\n\n[observationalMemory]\n", 1)
    if options.model_latency_ms:
        for role in ("observer", "reflector"):
            text = text.replace(f'model = "scripted/{role}"\n', f'model = "scripted/{role}"\n'
                                f"modelSettings = {{ latencyMs = {options.model_latency_ms} }}\n", 1)
    return text


def worker_roles(options: Options) -> list[str]:
    """The roles of the workers to start: one `all`, or N `fold` and one `models`."""
    if options.fold_workers == 0:
        return ["all"]
    return ["fold"] * options.fold_workers + ["models"]


async def start_env(root: Path, options: Options, stack: contextlib.ExitStack) -> Env:
    """Broker, topics and the workers under `root`; each registered on `stack` to be stopped."""
    broker = Broker(root / "kafka", port=free_port(), controller_port=free_port())
    progress(f"starting the broker on {broker.bootstrap} (data in {root})")
    broker.start()
    stack.callback(broker.stop)
    await broker.wait_ready(timeout=120)
    config = root / "om.toml"
    config.write_text(config_text(options, f"e2e{uuid.uuid4().hex[:8]}", broker.bootstrap,
                                  root / "data"))
    settings = load_settings(config)
    await ensure_topics(settings)
    workers = []
    for index, role in enumerate(worker_roles(options)):
        name = f"{role}{index}" if role == "fold" else role
        log = root / f"worker-{name}.log"
        env = {"OM_ROLE": role, "OM_RESULT_KEY": RESULT_KEY, "OM_DATA_DIR": str(root / "data" / name)}
        worker = start_child(settings, "worker", log, env=env)
        stack.callback(stop_child, worker)
        progress(f"worker {name} pid {worker.pid}, log {log}")
        workers.append((name, worker, log))
    return Env(root, settings, workers)


def progress(text: str) -> None:
    """A progress line on stderr (stdout carries the table)."""
    print(f"[e2e {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- following <ns>.events ---------------------------------------------------------------------------
#: One thread's events as the bench saw them, in the order they were folded (one partition holds
#: a memory, so consume order is fold order): (kind, detail, consume time); kind is "accepted"
#: (detail: the message id), "status" (detail: its stepNumber, None for a per-message check) or
#: "activation" (detail: None).
Seen = tuple[str, Any, float]


def message_status_times(seen: Sequence[Seen]) -> dict[str, float]:
    """When each message's `data-om-status` was consumed: the thread's first status after the
    message's `om-message-accepted`.

    Not by `inputOffset`: a record held while a blocking cycle runs is folded when the cycle's
    model result is, and its events carry the result's offset.  In fold order, though, the
    message's check (and so its status) always follows its acceptance, also when a cycle in
    between held it; a message folded under per-step checks has no status of its own (it then
    takes the next step's, which is when the agent sees it)."""
    out: dict[str, float] = {}
    waiting: list[str] = []
    for kind, detail, at in seen:
        if kind == "accepted":
            waiting.append(detail)
        elif kind == "status":
            out.update((message_id, at) for message_id in waiting)
            waiting = []
    return out


def step_times(seen: Sequence[Seen]) -> list[tuple[float, float | None]]:
    """For each step of a thread, in order: when its `data-om-status` was consumed, and when the
    first `data-om-activation` its check caused was (None: it activated nothing).

    A step's check emits exactly one status carrying its step number, at its end (later, when a
    cycle held the step), and any activation of that check comes before it; statuses without a
    step number (per-message checks, model results) belong to no step."""
    out: list[tuple[float, float | None]] = []
    activation: float | None = None
    for kind, detail, at in seen:
        if kind == "activation" and activation is None:
            activation = at
        elif kind == "status" and detail is not None:
            out.append((at, activation))
            activation = None
        elif kind == "status":
            activation = None  # it belonged to that per-message check or model result
    return out


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


# --- producing -----------------------------------------------------------------------------------------
@dataclass
class Sent:
    """What the producer side recorded: when each message and each step was produced."""

    message_at: dict[str, float] = field(default_factory=dict)      # message id -> time
    step_at: dict[str, list[float]] = field(default_factory=dict)   # thread -> times, in order
    first: float = math.inf
    last_ack: float = 0.0

    def note(self, started: float, message_id: str | None = None, thread: str | None = None) -> None:
        """A message (by id) or a step (by thread) produced at `started`, acked now."""
        if message_id is not None:
            self.message_at[message_id] = started
        if thread is not None:
            self.step_at.setdefault(thread, []).append(started)
        self.first = min(self.first, started)
        self.last_ack = max(self.last_ack, time.monotonic())

    @property
    def steps(self) -> int:
        return sum(map(len, self.step_at.values()))


class Conversation:
    """Messages of ~`tokens` tokens from a seeded pool of bodies (generated once, not timed)."""

    def __init__(self, options: Options) -> None:
        # A few tokens under the target: the fold counts the role and framing too.
        self.bodies = make_bodies(BODY_POOL, options.seed, options.tokens - 4,
                                  get_counter(options.counter))
        self._next = 0

    def message(self, thread: str, index: int) -> Message:
        body = self.bodies[self._next % len(self.bodies)]
        self._next += 1
        # Real time: the worker refuses a createdAt far ahead of the record's log time.
        return Message(id=f"{thread}-m{index}", thread_id=thread, resource_id=f"u-{thread}",
                       role="assistant" if index % 2 else "user", content=body,
                       created_at=datetime.now(UTC))


async def send_message(om: OmClient, sent: Sent, message: Message) -> None:
    started = time.monotonic()
    await om.send_message(message)
    sent.note(started, message_id=message.id)


async def send_step(om: OmClient, sent: Sent, message: Message, index: int) -> None:
    """A step after `message`: step 0 of the turn after the user's message, 1 after the reply."""
    started = time.monotonic()
    await om.step_started(message.thread_id, resource_id=message.resource_id,
                          step_number=index % 2, after_message_id=message.id)
    sent.note(started, thread=message.thread_id)


def folded(events: EventTimes, sent: Sent) -> bool:
    """Whether every message of `sent` was accepted and every step's status consumed."""
    return (all(m in events.accepted for m in sent.message_at)
            and all(events.step_statuses[t] >= len(at) for t, at in sent.step_at.items()))


def last_folded(events: EventTimes, sent: Sent) -> float:
    """When the last awaited event of `sent` was consumed (after `folded` holds)."""
    ends = [events.accepted[m] for m in sent.message_at]
    ends += [step_times(events.seen[t])[len(at) - 1][0] for t, at in sent.step_at.items()]
    return max(ends)


# --- runs 1 and 2: sustained throughput ------------------------------------------------------------------
@dataclass
class Throughput:
    run: str
    steps: bool
    messages: int
    records: int
    seconds: float           # first produce -> last awaited event consumed
    produce_seconds: float   # first produce -> last broker ack (is the producer the bottleneck?)
    messages_per_s: float
    records_per_s: float
    events: dict[str, int]
    rss: dict[str, int]
    changelog: dict[str, float] | None = None


async def throughput_run(env: Env, om: OmClient, events: EventTimes, conv: Conversation,
                         options: Options, run: str, steps: bool) -> Throughput:
    """`threads` agents at once, each sending its messages (and steps) back to back, waiting
    for the broker's ack of each before the next, as an agent loop does."""
    sent = Sent()

    async def agent(thread: str) -> None:
        for index in range(options.messages):
            message = conv.message(thread, index)
            await send_message(om, sent, message)
            if steps:
                await send_step(om, sent, message, index)

    progress(f"run {run}: {options.threads} threads x {options.messages} messages"
             f"{' + a step after each' if steps else ''}")
    await asyncio.gather(*(agent(f"{run}-t{i:03d}") for i in range(options.threads)))

    await wait_for(env, events, lambda: folded(events, sent), f"run {run}'s events", options.stall)
    seconds = last_folded(events, sent) - sent.first
    messages = len(sent.message_at)
    progress(f"  {messages / seconds:,.1f} messages/s ({seconds:,.1f} s)")
    return Throughput(
        run=run, steps=steps, messages=messages, records=messages + sent.steps, seconds=seconds,
        produce_seconds=sent.last_ack - sent.first, messages_per_s=messages / seconds,
        records_per_s=(messages + sent.steps) / seconds, events={}, rss={})


# --- run 3: latency at offered loads ------------------------------------------------------------------------
@dataclass
class LoadResult:
    offered_per_s: int
    messages: int
    achieved_per_s: float    # messages actually produced per second
    status: Latency          # message-only threads: produce -> data-om-status
    activation: Latency      # agent-loop threads: step -> data-om-activation (steps that activated)
    drain_seconds: float     # last produce -> last awaited event
    events: dict[str, int]
    rss: dict[str, int]


async def load_run(env: Env, om: OmClient, events: EventTimes, conv: Conversation,
                   options: Options, rate: int) -> LoadResult:
    """Messages at `rate`/s in total for `load_seconds`, dealt round-robin to the threads; the
    odd threads send a step after each message.  A message is produced at its scheduled time
    (or at once, when the thread is behind), so the offered load does not adapt to the worker."""
    run = f"l{rate}"
    threads = options.load_threads
    per_thread = max(1, round(rate * options.load_seconds / threads))
    plain, loop = Sent(), Sent()
    start = time.monotonic() + 0.2

    async def agent(i: int) -> None:
        thread, with_steps = f"{run}-t{i:03d}", i % 2 == 1
        for index in range(per_thread):
            delay = start + (index * threads + i) / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            message = conv.message(thread, index)
            await send_message(om, loop if with_steps else plain, message)
            if with_steps:
                await send_step(om, loop, message, index)

    progress(f"run 3 at {rate} messages/s: {threads} threads x {per_thread} messages")
    await asyncio.gather(*(agent(i) for i in range(threads)))
    last_produce = max(plain.last_ack, loop.last_ack)
    plain_threads = [f"{run}-t{i:03d}" for i in range(0, threads, 2)]

    def statuses() -> dict[str, float]:
        return {m: at for t in plain_threads for m, at in message_status_times(events.seen.get(t, [])).items()}

    def done() -> bool:
        return folded(events, loop) and folded(events, plain) and len(statuses()) >= len(plain.message_at)

    await wait_for(env, events, done, f"the {rate}/s run's events", options.stall)
    status_at = statuses()
    end = max(last_folded(events, plain), last_folded(events, loop), *status_at.values())
    progress(f"  produced in {last_produce - min(plain.first, loop.first):,.1f} s, folded "
             f"{end - last_produce:,.1f} s after the last produce")
    activations = [activated - produced
                   for thread, produced_at in loop.step_at.items()
                   for produced, (_, activated) in zip(produced_at, step_times(events.seen[thread]))
                   if activated is not None]
    messages = len(plain.message_at) + len(loop.message_at)
    first = min(plain.first, loop.first)
    return LoadResult(
        offered_per_s=rate, messages=messages,
        achieved_per_s=messages / max(last_produce - first, 1e-9),
        status=Latency.of([status_at[m] - at for m, at in plain.message_at.items()]),
        activation=Latency.of(activations), drain_seconds=end - last_produce, events={}, rss={})


# --- run 5: the state of one growing memory ----------------------------------------------------------------
@dataclass
class StatePoint:
    messages: int
    state_bytes: int
    keys: int
    seconds: float  # since the run's first produce, when the checkpoint's message was accepted


async def state_run(env: Env, om: OmClient, events: EventTimes, conv: Conversation,
                    options: Options, offsets: Offsets, out: dict[str, Any]) -> None:
    """One thread, messages in order; at each checkpoint wait until its last message was
    accepted and the worker went quiet, then read the changelogs on from where the previous
    checkpoint stopped and sum the memory's live keys."""
    thread = "s-t000"
    memory = memory_key(env.settings.om, thread, None).encode()
    changelogs = await offsets.changelogs()
    read_from = await offsets.ends(changelogs)   # the thread is new: nothing of it before this
    sizes: dict[bytes, int] = {}
    sent, produced = Sent(), 0
    progress(f"run 5: one thread, checkpoints {', '.join(map(str, options.checkpoints))}")
    for checkpoint in sorted(options.checkpoints):
        while produced < checkpoint:
            # At most STATE_WINDOW messages ahead of the fold, as a conversation is: a burst of
            # hundreds would hold them all in the state behind a buffering job whose result
            # queues behind them in the same partition (see README: blockAfter).
            folded_up_to = produced
            while folded_up_to > 0 and f"{thread}-m{folded_up_to - 1}" not in events.accepted:
                folded_up_to -= 1
            room = min(checkpoint, folded_up_to + STATE_WINDOW) - produced
            if room <= 0:
                last = f"{thread}-m{produced - STATE_WINDOW}"
                await wait_for(env, events, lambda last=last: last in events.accepted,
                               f"message {produced - STATE_WINDOW + 1} of the state run", options.stall)
                continue
            batch = [conv.message(thread, i) for i in range(produced, produced + room)]
            started = time.monotonic()
            await om.send_messages(batch)  # in order: one producer keeps the log order
            for message in batch:
                sent.note(started, message_id=message.id)
            produced += len(batch)
        last_id = f"{thread}-m{checkpoint - 1}"
        await wait_for(env, events, lambda last_id=last_id: last_id in events.accepted,
                       f"message {checkpoint} of the state run", options.stall)
        reached = events.accepted[last_id] - sent.first
        changelogs = await offsets.changelogs()  # a table may have appeared since
        ends = await offsets.settle(env, watched_topics(env.settings, changelogs))
        ends = {tp: end for tp, end in ends.items() if tp.topic in changelogs}
        await offsets.read(read_from, ends, lambda k, v: live_sizes([(k, v)], sizes))
        read_from = {**read_from, **ends}
        size, keys = memory_state_bytes(sizes, memory)
        out["points"].append(asdict(StatePoint(checkpoint, size, keys, reached)))
        progress(f"  {checkpoint} messages: {size:,} bytes in {keys} key(s), reached after "
                 f"{reached:.1f} s")


# --- the whole benchmark -------------------------------------------------------------------------------------
async def warm_up(env: Env, om: OmClient, events: EventTimes, conv: Conversation,
                  options: Options) -> None:
    """One thread past a buffering and an activation, so the group join, imports and the model
    agent's first call are not timed."""
    sent = Sent()
    count = max(4, 2 * options.message_tokens // options.tokens)
    for index in range(count):
        message = conv.message("w-t000", index)
        await send_message(om, sent, message)
        await send_step(om, sent, message, index)
    progress(f"warm-up: {count} messages, waiting for the worker to join and fold them")
    await wait_for(env, events, lambda: folded(events, sent), "the warm-up (worker start)",
                   max(options.stall, 180.0))
    if options.fold_workers > 1:
        await wait_for_group(env, options.fold_workers, max(options.stall, 180.0))


async def wait_for_group(env: Env, members: int, limit: float) -> None:
    """Until the fold workers' consumer group is stable with `members` members, so that no
    rebalance (a worker joining late) falls into a timed run."""
    admin = kafka.admin(env.settings)
    await admin.start()
    try:
        deadline = time.monotonic() + limit
        while True:
            env.check_worker()
            described = await admin.describe_consumer_groups([env.settings.app_id])
            # aiokafka answers DescribeGroups responses: groups as (error, id, state, protocol
            # type, protocol, members, ...) tuples.
            groups = [g for response in described for g in response.groups]
            state, count = (groups[0][2], len(groups[0][5])) if groups else ("", 0)
            if state == "Stable" and count == members:
                progress(f"fold group stable with {count} members")
                return
            if time.monotonic() > deadline:
                raise BenchError(f"the fold group was {state or 'absent'} with {count} of "
                                 f"{members} members after {limit:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def measure(env: Env, options: Options, report: dict[str, Any]) -> None:
    """Every run in order on the one worker, each section added to `report` as it completes
    (so a failure later still reports what was measured)."""
    conv = Conversation(options)
    events = EventTimes(env.settings)
    await events.start()
    try:
        async with OmClient(env.settings) as om, Offsets(env.settings) as offsets:
            await warm_up(env, om, events, conv, options)
            changelogs = await offsets.changelogs()
            report["changelogs"] = changelogs
            watched = watched_topics(env.settings, changelogs)
            before = await offsets.settle(env, watched)

            one = await throughput_run(env, om, events, conv, options, "r1", steps=False)
            after = await offsets.settle(env, watched)
            one.rss, one.events = env.rss(), events.counts("r1")
            one.changelog = await changelog_bytes(offsets, changelogs, before, after, one.messages)
            report["sustained"] = [asdict(one)]

            two = await throughput_run(env, om, events, conv, options, "r2", steps=True)
            await offsets.settle(env, watched)
            two.rss, two.events = env.rss(), events.counts("r2")
            report["sustained"].append(asdict(two))

            report["loads"] = []
            for rate in options.loads:
                result = await load_run(env, om, events, conv, options, rate)
                await offsets.settle(env, watched)
                result.rss = env.rss()
                result.events = events.counts(f"l{rate}")
                report["loads"].append(asdict(result))

            if not options.state:
                return
            report["state"] = {"points": [], "events": {}}
            await state_run(env, om, events, conv, options, offsets, report["state"])
            report["state"]["rss"] = env.rss()
            report["state"]["events"] = events.counts("s")
    finally:
        report["dead_letters"] = len(events.dead)
        report["dead_letter_examples"] = events.dead[:5]
        await events.stop()


async def changelog_bytes(offsets: Offsets, changelogs: Sequence[str], before: Mapping[Any, int],
                          after: Mapping[Any, int], messages: int) -> dict[str, float]:
    """Key + value bytes appended to the changelogs between two snapshots, per message."""
    total = 0

    def add(key: bytes | None, value: bytes | None) -> None:
        nonlocal total
        total += len(key or b"") + len(value or b"")

    ends = {tp: end for tp, end in after.items() if tp.topic in changelogs}
    records = await offsets.read(before, ends, add)
    return {"bytes": total, "records": records, "bytes_per_message": total / messages,
            "records_per_message": records / messages}


# --- the report ----------------------------------------------------------------------------------------------
def _kb(n: float) -> str:
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n:,.0f} B"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _cycles(events: Mapping[str, int]) -> str:
    """The cycles a run caused, from its event counts (buffered, activated, blocking, failed)."""
    failed = sum(n for kind, n in events.items() if kind.endswith("-failed"))
    return (f"buffered {events.get('data-om-buffering-end', 0)}, activations "
            f"{events.get('data-om-activation', 0)}, blocking "
            f"{events.get('data-om-observation-start', 0)}, failed {failed}")


def format_report(report: Mapping[str, Any]) -> str:
    """The figures as a table with units, the original's 62 messages/s as a ratio column; the
    sections a failed run did not reach are left out."""
    sustained, loads = report.get("sustained", []), report.get("loads", [])
    state = report.get("state", {})
    rows: list[tuple[str, str, str, str]] = []
    for run in sustained:
        name = ("1 sustained, no steps" if not run["steps"] else "2 sustained, step after each message")
        rows.append((f"{name} ({run['messages']:,} messages)", f"{run['messages_per_s']:,.1f}",
                     "messages/s", f"{run['messages_per_s'] / ORIGINAL_MPS:.2f}x"))
        rows.append(("    records (messages + steps) / s", f"{run['records_per_s']:,.1f}",
                     "records/s", ""))
        rows.append(("    producer: first produce -> last ack", f"{run['produce_seconds']:,.1f}",
                     "s", f"of {run['seconds']:,.1f} s"))
    for load in loads:
        head = f"3 load {load['offered_per_s']:,}/s"
        rows.append((f"{head}: produced", f"{load['achieved_per_s']:,.0f}", "messages/s",
                     f"{load['messages']:,} messages"))
        rows.append((f"{head}: message -> status p50 / p99",
                     f"{_ms(load['status']['p50_ms'])} / {_ms(load['status']['p99_ms'])}", "ms",
                     f"n={load['status']['n']}"))
        rows.append((f"{head}: step -> activation p50 / p99",
                     f"{_ms(load['activation']['p50_ms'])} / {_ms(load['activation']['p99_ms'])}",
                     "ms", f"n={load['activation']['n']}"))
        rows.append((f"{head}: drain after last produce", f"{load['drain_seconds']:,.1f}", "s", ""))
    if sustained and sustained[0].get("changelog"):
        log = sustained[0]["changelog"]
        rows.append(("4 changelog bytes per message (run 1)", _kb(log["bytes_per_message"]),
                     "per message", f"{log['records_per_message']:.2f} records/message"))
    for point in state.get("points", []):
        rows.append((f"5 state of one memory after {point['messages']:,} messages",
                     _kb(point["state_bytes"]), "", f"{point['keys']} key(s); folded "
                     f"{point['messages'] / max(point['seconds'], 1e-9):,.0f} messages/s on one thread"))
    rss = [(f"run {run['run'][1:]}", run["rss"]) for run in sustained]
    rss += [(f"load {x['offered_per_s']}/s", x["rss"]) for x in loads]
    rss += [("run 5", state["rss"])] if "rss" in state else []
    for label, value in rss:
        rows.append((f"6 worker RSS after {label}", f"{value['rss_kb'] / 1024:,.0f}", "MiB",
                     f"peak {value['peak_kb'] / 1024:,.0f} MiB"))
    head = ("figure", "value", "unit", f"vs original ({ORIGINAL_MPS:.0f} msg/s) / note")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = [f"$ {report['command']}", report["summary"], ""]
    for index, row in enumerate([head, *rows]):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]), row[3]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    cycles = [(run["run"], run["events"]) for run in sustained]
    cycles += [(f"l{x['offered_per_s']}", x["events"]) for x in loads]
    cycles += [("s", state["events"])] if state.get("events") else []
    lines += [f"cycles {label}: {_cycles(counts)}" for label, counts in cycles]
    lines.append(f"dead letters: {report.get('dead_letters', '-')}"
                 + "".join(f"\n  {example}" for example in report.get("dead_letter_examples", [])))
    lines.append(f"changelogs: {', '.join(report.get('changelogs', [])) or '-'}")
    if report.get("error"):
        lines.append(f"FAILED (the figures above are those measured before): {report['error']}")
    lines.append(f"wall time {report['wall_seconds']:,.0f} s; JSON: {report['out']}")
    return "\n".join(lines)


# --- command line --------------------------------------------------------------------------------------------
def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def _at_least(low: float, kind: type = int) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    d = Options()
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e",
        description="End-to-end benchmark of one worker on a local broker it starts itself: "
                    "sustained messages/s (without and with steps), latency at fixed loads, "
                    "changelog bytes per message, state bytes of a growing memory, worker RSS.")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, about a minute (a smoke run, not a measurement)")
    parser.add_argument("--threads", type=_at_least(1), help=f"runs 1-2: threads (default {d.threads})")
    parser.add_argument("--messages", type=_at_least(1),
                        help=f"runs 1-2: messages per thread (default {d.messages})")
    parser.add_argument("--tokens", type=_at_least(20), help=f"tokens per message (default {d.tokens})")
    parser.add_argument("--message-tokens", type=_at_least(100),
                        help=f"observation.messageTokens (default {d.message_tokens})")
    parser.add_argument("--loads", type=_ints, help="run 3: offered loads in messages/s, "
                        f"comma-separated (default {','.join(map(str, d.loads))})")
    parser.add_argument("--load-seconds", type=_at_least(0.5, float),
                        help=f"run 3: seconds each load is offered (default {d.load_seconds})")
    parser.add_argument("--load-threads", type=_at_least(2),
                        help=f"run 3: threads, half of them with steps (default {d.load_threads})")
    parser.add_argument("--checkpoints", type=_ints, help="run 5: message counts at which the "
                        f"memory's state is measured (default {','.join(map(str, d.checkpoints))})")
    parser.add_argument("--fold-workers", type=_at_least(0), help="0 (default): one `om worker` "
                        "(role all); N: N `om worker --role fold` and one `om worker --role models`")
    parser.add_argument("--model-latency", type=_at_least(0), dest="model_latency_ms",
                        help="milliseconds each scripted model call takes (default 0)")
    parser.add_argument("--model-concurrency", type=_at_least(1),
                        help="[omstream] model_concurrency (default: omstream's)")
    parser.add_argument("--no-state", dest="state", action="store_const", const=False,
                        help="skip run 5 (a growing memory's state bytes)")
    parser.add_argument("--counter", choices=COUNTERS, help="tokenCounter (default tokenx)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--stall", type=_at_least(1, float), help="fail when no awaited event arrives for this "
                        f"many seconds (default {d.stall:.0f})")
    parser.add_argument("--out", type=Path, help="where to write the JSON report (default: a "
                        "file in the system temp dir, printed at the end)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (broker data, worker log)")
    return parser


def options_from(args: argparse.Namespace) -> Options:
    """The defaults, then --quick's sizes, then every option given explicitly."""
    options = replace(Options(), **QUICK) if args.quick else Options()
    given = {name: value for name, value in vars(args).items()
             if name != "quick" and value is not None and not (name == "keep" and value is False)}
    return replace(options, **given)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = options_from(args)
    began = time.monotonic()
    command = shlex.join(["python", "-m", "bench.e2e", *(sys.argv[1:] if argv is None else argv)])
    # The bench's om.toml is the whole configuration: no OM_* variable of this shell may change
    # the worker's namespace, broker or thresholds.
    for name in [n for n in os.environ if n.startswith("OM_")]:
        del os.environ[name]
    root = Path(tempfile.mkdtemp(prefix="omstream-e2e-"))
    out = options.out or Path(tempfile.gettempdir()) / f"omstream-e2e-{time.strftime('%Y%m%d-%H%M%S')}.json"
    # SIGTERM unwinds like Ctrl-C, so the worker and the broker are always stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    report: dict[str, Any] = {}
    status = 0
    with contextlib.ExitStack() as stack:
        if not options.keep:
            stack.callback(shutil.rmtree, root, ignore_errors=True)
        try:
            asyncio.run(_bench(root, options, stack, report))
        except BenchError as exc:
            report["error"] = str(exc)
            status = 1
        except KeyboardInterrupt:
            report["error"] = "interrupted"
            status = 130
    report.update(command=command, out=str(out), wall_seconds=time.monotonic() - began,
                  summary=_summary(options), options={**asdict(options), "out": str(out)},
                  machine={"python": platform.python_version(), "cpus": os.cpu_count(),
                           "platform": platform.platform()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(format_report(report))
    if status:
        print(f"\ne2e benchmark stopped: {report['error']}", file=sys.stderr)
    return status


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _bench(root: Path, options: Options, stack: contextlib.ExitStack,
                 report: dict[str, Any]) -> None:
    env = await start_env(root, options, stack)
    report["worker_log"] = str(env.worker_log) if options.keep else None
    await measure(env, options, report)


def _summary(o: Options) -> str:
    workers = ("one worker" if o.fold_workers == 0 else
               f"{o.fold_workers} fold worker(s) and one models worker")
    model = (f"scripted models of {o.model_latency_ms} ms" if o.model_latency_ms else "scripted models")
    if o.model_concurrency is not None:
        model += f", model_concurrency {o.model_concurrency}"
    return (f"{workers}, 4 partitions, {o.counter}, ~{o.tokens}-token messages, messageTokens "
            f"{o.message_tokens}, async buffering on, {model}; runs 1-2: {o.threads} "
            f"threads x {o.messages} messages; run 3: {o.load_seconds:g} s per load over "
            f"{o.load_threads} threads; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    sys.exit(main())
