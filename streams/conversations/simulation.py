"""`om simulate`: the real fold and model calls over a conversation file, without a broker.

A user can try a configuration on an exported conversation in seconds; we get a conformance
harness that runs exactly the code the worker runs (the fold, litellm and the providers), minus
Kafka.  A conversation is JSON lines (`omstream.conversations.files`): chat messages
`{threadId, resourceId?, role, content, createdAt, id?}`, and optionally the log's other input
records (agent-loop markers, commands), as `om export` writes a thread's history.

A file with agent-loop markers (`step-started`, `turn-ended`) is fed as it is, in order.  A file
of messages alone is driven the way the scenarios were recorded: each user message, step 0 (the
thresholds are checked here), the replies, the turn's end.  Either way every model job is run
and its result folded before the next input ("settled"), so a model's latency never changes
what is decided.

Model calls are real; their durations are not, by default: results are stamped as taking 0 ms
so that the same conversation and configuration always write the same event log
(`--measured-time` keeps the measured durations).
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from omstream.schemas.codec import encode
from omstream.schemas.config import OmConfig
from omstream.schemas.control import Control, StepStarted, TurnEnded
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message

from ..engine.fold import EngineConfig, Input, fold, new_state
from ..engine.rules.extraction import import_references
from ..engine.state import MemoryState
from ..engine.step import HookCall
from ..models.calls import RetryPolicy, run_job, untimed
from ..models.capabilities import takes_attachments
from ..models.hooks import Hooks
from .files import ConversationRecord, messages_of, read_conversation, turns

__all__ = ["CycleCount", "Simulation", "cycle_count", "format_timeline", "has_loop_markers", "inputs_of", "settle",
           "simulate", "turns"]


@dataclass
class Simulation:
    """States by memory key, and everything emitted, in order."""

    config: EngineConfig
    states: dict[str, MemoryState] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)
    jobs: list[ModelJob] = field(default_factory=list)
    results: list[ModelResult] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    hooks: list[HookCall] = field(default_factory=list)  # lifecycle hook calls not made yet

    def feed(self, event: Input) -> list[ModelJob]:
        if isinstance(event, ModelResult):
            key = event.memory_key
            state = self.states[key]
        else:
            key = memory_key(self.config.om, event.thread_id, event.resource_id)
            # A resource-wide deletion may name no thread (as in the worker).
            state = self.states.get(key) or new_state(key, _owner(event), event.resource_id)
        out = fold(state, event, self.config)
        self.states[key] = out.state
        self.events.extend(out.events)
        self.jobs.extend(out.jobs)
        self.rejected.extend(r.reason for r in out.rejected)
        self.hooks.extend(out.hooks)
        return list(out.jobs)

    async def call_hooks(self, hooks: Hooks) -> None:
        """Make the lifecycle hook calls the fold asked for so far (§13)."""
        calls, self.hooks = self.hooks, []
        for call in calls:
            await hooks.call(call.name, call.payload, background=call.background)


def _owner(event: Message | Control) -> str:
    """Whom a new memory belongs to: the record's thread, or (a resource-wide deletion) its resource."""
    owner = event.thread_id or event.resource_id
    if owner is None:  # every input names one of them
        raise ValueError(f"{event.type} names neither a thread nor a resource")
    return owner


async def settle(sim: Simulation, jobs: list[ModelJob], policy: RetryPolicy, hooks: Hooks,
                 measured: bool, timeout: float = 600.0) -> None:
    """Run jobs until none is left; a result may start the next cycle (a reflection, a retry).
    The lifecycle hooks the fold asks for are called before the jobs run, as the worker calls
    them once a batch's outputs are sent."""
    await sim.call_hooks(hooks)
    while jobs:
        job = jobs.pop(0)
        result = await run_job(job, policy, timeout=timeout)
        sim.results.append(result)
        if not measured:
            result = untimed(result, job)
        jobs.extend(sim.feed(result))
        await sim.call_hooks(hooks)


async def simulate(records: Iterable[ConversationRecord], om: OmConfig, *, measured_time: bool = False,
                   policy: RetryPolicy = RetryPolicy(), progress: Any = None,
                   timeout: float = 600.0) -> Simulation:
    """Fold a conversation (messages, or the log's input records) with real model calls, each
    job settled before the next input; `progress()` is called after each message.  `timeout`:
    seconds per model call attempt (a local model on a busy CPU may need more than 600)."""
    records = list(records)
    # A loop the simulator drives checks thresholds at its own steps; a given one as configured.
    config = om if has_loop_markers(records) else driven_config(om)
    sim = Simulation(EngineConfig(config, takes_attachments=takes_attachments))
    import_references(om)  # extractor code: a missing module or an async function stops here
    hooks = Hooks.from_config(om)
    for event in inputs_of(records):
        await settle(sim, sim.feed(event), policy, hooks, measured_time, timeout)
        if progress is not None and isinstance(event, Message):
            progress()
    await hooks.drain()
    return sim


def has_loop_markers(records: Iterable[ConversationRecord]) -> bool:
    """Whether the records carry the producer's own agent loop (a step or a turn end)."""
    return any(isinstance(record, (StepStarted, TurnEnded)) for record in records)


def inputs_of(records: Iterable[ConversationRecord]) -> list[ConversationRecord]:
    """The fold's inputs for a conversation, in order.

    Records with agent-loop markers (`om export` of a live thread) are fed exactly as given:
    the fold checks thresholds at steps and may buffer at turn ends, so the producer's own
    markers are what made the live memory's decisions, and the same records under the same
    configuration must decide the same again.  Adding synthesized steps to them would check
    thresholds where the live agent never did.  Messages alone (as recorded for the scenarios)
    carry no loop, so one is synthesized: `turns`."""
    records = list(records)
    return records if has_loop_markers(records) else list(turns(records))


def parity_config(om: OmConfig) -> OmConfig:
    """The original's counting and rendering: tokenx estimates, dates in UTC."""
    return om.model_copy(update={"token_counter": "tokenx", "time_zone": "UTC"})


def driven_config(om: OmConfig) -> OmConfig:
    """When the simulator drives the steps itself (`turns`), thresholds wait for steps from the
    first message."""
    if om.check_thresholds_at != "auto":
        return om
    return om.model_copy(update={"check_thresholds_at": "step"})


def write_events(events: Iterable[Any], path: Path) -> None:
    with path.open("wb") as out:
        for event in events:
            out.write(encode(event) + b"\n")


def summary(sim: Simulation) -> dict[str, Any]:
    calls = Tally(job.kind for job in sim.jobs)
    cycles = cycle_count(sim.events)
    return {
        "cycles": {"started": cycles.started, "failed": cycles.failed,
                   **({"firstError": cycles.first_error} if cycles.first_error else {})},
        "events": dict(sorted(Tally(e.type for e in sim.events).items())),
        "modelCalls": {"observer": calls["observe"] + calls["buffer"],
                       "reflector": calls["reflect"] + calls["buffer-reflection"]},
        "memories": {
            key: {"generation": s.generation, "observationTokens": s.observation_tokens,
                  "pendingMessages": len(s.pending)}
            for key, s in sorted(sim.states.items())
        },
        "rejected": sim.rejected,
    }


_STARTS = ("data-om-observation-start", "data-om-buffering-start")
_FAILURES = ("data-om-observation-failed", "data-om-buffering-failed")


@dataclass(frozen=True)
class CycleCount:
    """The model cycles (blocking and buffered) a run started, and how many of them failed."""

    started: int
    failed: int
    first_error: str | None = None

    def failure_line(self) -> str | None:
        """What a run with failed cycles must say (None when none failed): a run whose every
        cycle failed, for want of a model key say, otherwise looks like a quiet success."""
        from ..plural import plural

        if not self.failed:
            return None
        return (f"{self.failed} of {plural(self.started, 'model cycle')} failed"
                f"{f'; the first: {self.first_error}' if self.first_error else ''}")


def cycle_count(events: Iterable[Any]) -> CycleCount:
    """How many cycles the events started and how many failed, with the first failure's error.

    A reflection's compression ladder marks each rung that did not fit with a failed event and
    starts the next rung at once, from the same record: that is one cycle going on, not a
    failure (the rung's start is not a new cycle either)."""
    started = failed = 0
    first: str | None = None
    marker: Any = None  # a failed event that may be a rung of a ladder
    for event in events:
        if marker is not None and not (event.type in _STARTS and _same_cycle(marker, event)):
            failed, first = failed + 1, first or str(marker.data.error)
        if event.type in _STARTS and not (marker is not None and _same_cycle(marker, event)):
            started += 1
        marker = event if event.type in _FAILURES else None
    if marker is not None:
        failed, first = failed + 1, first or str(marker.data.error)
    return CycleCount(started, failed, first)


def _same_cycle(failure: Any, start: Any) -> bool:
    """The start of the next rung of `failure`'s ladder: the same operation, thread and record."""
    a, b = failure.data, start.data
    return (a.operation_type, a.thread_id, a.record_id) == (b.operation_type, b.thread_id, b.record_id)


def format_timeline(events: Iterable[Any], *, buffering_end: bool = False) -> list[str]:
    """Status and cycle lines in the shape of the scenarios' recorded timelines.

    The recordings have no `buffering-end` line (a background cycle ends outside any step);
    `buffering_end=True` adds one per stored chunk or reflection.
    """
    lines = []
    for event in events:
        d = event.data
        if event.type == "data-om-status":
            w = d.windows
            bo, br = w.buffered.observations, w.buffered.reflection
            lines.append(
                f"{'status':<19}step={d.step_number} "
                f"msgs={w.active.messages.tokens}/{w.active.messages.threshold} "
                f"obs={w.active.observations.tokens}/{w.active.observations.threshold} "
                f"bufObs={bo.chunks}ch/{bo.message_tokens}t({bo.status}) "
                f"proj={bo.projected_message_removal} "
                f"bufRefl={br.input_observation_tokens}->{br.observation_tokens}({br.status}) "
                f"gen={d.generation_count}")
        elif event.type == "data-om-observation-start":
            lines.append(
                f"{'observation-start':<19}{d.operation_type} tokensToObserve={d.tokens_to_observe} "
                f"thread={d.thread_id} threads=[{','.join(d.thread_ids)}]")
        elif event.type == "data-om-observation-end":
            lines.append(
                f"{'observation-end':<19}{d.operation_type} tokensObserved={d.tokens_observed} "
                f"observationTokens={d.observation_tokens} thread={d.thread_id}")
        elif event.type in ("data-om-observation-failed", "data-om-buffering-failed"):
            lines.append(
                f"{event.type.removeprefix('data-om-'):<19}{d.operation_type} "
                f"tokensAttempted={d.tokens_attempted} error={d.error!r}")
        elif event.type == "data-om-buffering-start":
            lines.append(f"{'buffering-start':<19}{d.operation_type} tokensToBuffer={d.tokens_to_buffer}")
        elif event.type == "data-om-buffering-end" and buffering_end:
            lines.append(f"{'buffering-end':<19}{d.operation_type} tokensBuffered={d.tokens_buffered} "
                         f"bufferedTokens={d.buffered_tokens}")
        elif event.type == "data-om-activation":
            lines.append(f"{'activation':<19}{d.operation_type} chunks={d.chunks_activated} "
                         f"tokensActivated={d.tokens_activated} observationTokens={d.observation_tokens} "
                         f"messages={d.messages_activated} gen={d.generation_count} by={d.triggered_by}")
    return lines


def run(conversation: Path, om: OmConfig, *, out: Path | None, parity: bool,
        measured_time: bool, timeline: bool) -> dict[str, Any]:
    """The `om simulate` command's work; returns the summary it prints (with its cycles' outcome)."""
    records = read_conversation(conversation)
    if parity:
        om = parity_config(om)
    with tqdm(total=len(messages_of(records)), unit="msg", disable=None, leave=False) as bar:
        sim = asyncio.run(simulate(records, om, measured_time=measured_time, progress=bar.update))
    if out is not None:
        write_events(sim.events, out)
    if timeline:
        print("\n".join(format_timeline(sim.events)))
    return summary(sim)
