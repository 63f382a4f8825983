"""The runs of `bench.e2e`: producing messages and steps, sustained throughput (runs 1-2), latency
at offered loads (run 3), changelog bytes per message (4), a growing memory's state (5), and
`measure`, which runs them all in order after a warm-up.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.e2e_env import Env, Options, progress, wait_for_group
from bench.e2e_stats import Latency, live_sizes, memory_state_bytes, message_status_times, step_times
from bench.e2e_timing import EventTimes, Offsets, wait_for, watched_topics
from bench.fold_bench import make_bodies
from omstream.client import OmClient
from omstream.engine.rules.tokens import get_counter
from omstream.pipeline.storage import LOG, PARTS, SEEN, SEP, SEQUENCES
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message

BODY_POOL = 400  # distinct message bodies, reused under distinct ids (generation is not timed)
#: Run 5 produces at most this many messages ahead of the last one the fold accepted.
STATE_WINDOW = 10


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
    """Key + value bytes appended to the changelogs between two snapshots, per message, and
    per kind of state record (`record_kind`), which says where the bytes go."""
    total = 0
    kinds: dict[str, list[int]] = {}

    def add(key: bytes | None, value: bytes | None) -> None:
        nonlocal total
        size = len(key or b"") + len(value or b"")
        total += size
        kind = kinds.setdefault(record_kind(key, value), [0, 0])
        kind[0] += 1
        kind[1] += size

    ends = {tp: end for tp, end in after.items() if tp.topic in changelogs}
    records = await offsets.read(before, ends, add)
    return {"bytes": total, "records": records, "bytes_per_message": total / messages,
            "records_per_message": records / messages,
            "kinds": {kind: {"records_per_message": n / messages, "bytes_per_message": size / messages}
                      for kind, (n, size) in sorted(kinds.items(), key=lambda kv: -kv[1][1])}}


#: The short names of `omstream.pipeline.storage`'s record keys (``K\0<name>...``), spelled out.
_KIND_NAMES = {short: name for name, short in {**PARTS, **SEQUENCES, "log": LOG, "seen": SEEN}.items()}


def record_kind(key: bytes | None, value: bytes | None) -> str:
    """What a state changelog record is: the core (the memory key alone) or a piece, and
    whether it is a tombstone."""
    name = (key or b"").split(SEP)[1:2]
    kind = _KIND_NAMES.get(name[0], "other") if name else "core"
    return kind if value is not None else f"{kind} (tombstone)"
