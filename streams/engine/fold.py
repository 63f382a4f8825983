"""The fold: `(state, input) -> (state, events, jobs)`, the whole engine as a pure function.

Every change to one memory (a thread in thread scope) is an input on a partition keyed by the
memory key: a chat message, an agent-loop marker, a command, or a model result.  The worker feeds
them here one at a time and stores the returned state; it sends the returned events to
`<ns>.events` and the jobs to `<ns>.jobs`.  Nothing here reads a clock, draws a random number or
does I/O: time is the inputs' event time, ids derive from the key and `state.seq`.

This module reads inputs and keeps their order; what a step decides lives in the modules named
for it (`check` and its phases `activating`, `observing`, `buffering`, `reflecting`, `status`;
`results` and `deadline` for a cycle's end).  The memory is a function of its input sequence alone:
every input is a record of one log, applied in the log's order, and a blocking cycle holds the
memory's later inputs until its result arrives, as the original blocks the agent, so model
latency never changes what is decided.  A marker naming a message the memory has not folded
(`afterMessageId`) is applied at once: in one ordered log that message was refused or never
sent, and waiting for it would stall the memory for good.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

import orjson
from pydantic import TypeAdapter

from omstream.schemas.codec import InputRecord
from omstream.schemas.control import (
    ConfigOverridden,
    ObserveRequested,
    ReflectRequested,
    ResourceDeleted,
    StepStarted,
    ThreadDeleted,
    ThreadPatched,
    TurnEnded,
    WorkingMemorySet,
)
from omstream.schemas.events import (
    InputHeld,
    InputHeldData,
    InputReleased,
    InputReleasedData,
    MemoryDeleted,
    MemoryDeletedData,
    MessageAccepted,
    MessageAcceptedData,
    TemporalGap,
    TemporalGapData,
    ThreadUpdate,
    ThreadUpdateData,
)
from omstream.schemas.jobs import ModelResult
from omstream.schemas.messages import Message, TokenCount, ToolCallPart, ToolResultPart

from .cycles.buffering import start_buffer
from .cycles.check import check
from .cycles.deadline import expire_overdue, is_overdue
from .cycles.observing import manual_observe
from .cycles.reflecting import manual_reflect
from .cycles.results import on_result
from .cycles.status import emit_status
from .cycles.thread_deletion import delete_resource_thread
from .cycles.working_memory import set_working_memory
from .prompting.transcript import SIGNAL, transcribe
from .rules.resource import is_resource
from .rules.temporal import TimedMessage, plan_temporal_gap
from .rules.tokens import Counter, count_message, count_text_message
from .state import Cycle, MemoryState, PendingMessage, ThreadMemory
from .step import EngineConfig, Folded, Rejected, Step

__all__ = ["EngineConfig", "Folded", "Input", "Rejected", "addressed", "fold", "holds", "new_state"]

Input = InputRecord
_INPUT = TypeAdapter(InputRecord)
_RECENT_REQUESTS = 64


def new_state(key: str, thread_id: str, resource_id: str | None) -> MemoryState:
    return MemoryState(memory_key=key, thread_id=thread_id, resource_id=resource_id)


def fold(state: MemoryState, event: Input, config: EngineConfig, *,
         log_time: datetime | None = None) -> Folded:
    """Fold one input.  `log_time` is the record's timestamp in the input log (the worker passes
    it; it is part of the log, so a refold sees the same): the clock of `cycleDeadline`.  A
    settled version has no such clock: its cycles end only with their own results."""
    if isinstance(event, ModelResult) and not addressed(event, config):
        return Folded(state, (), (), ())
    if config.settled:
        log_time = None
    step = Step(state, config)
    blocking = state.in_flight
    _apply(step, event, log_time)
    _mark_blocking_start(step, blocking, log_time)
    return step.finish()


def _mark_blocking_start(step: Step, before: Cycle | None, log_time: datetime | None) -> None:
    """Remember when, in log time, the blocking cycle in flight began (None when there is none)."""
    cycle = step.state.in_flight
    if cycle is None:
        step.update(blocked_since=None)
    elif before is None or before.cycle_id != cycle.cycle_id:
        step.update(blocked_since=log_time)


def _apply(step: Step, event: Input, log_time: datetime | None = None) -> None:
    if isinstance(event, ModelResult):
        on_result(step, event)
        _release_held(step)
    elif isinstance(event, ThreadDeleted) and is_resource(step.config):
        # One thread of the shared memory: it leaves, the others stay (thread_deletion).
        if not _already_applied(step, event):
            delete_resource_thread(step, event)
            _release_held(step)
    elif isinstance(event, (ThreadDeleted, ResourceDeleted)):
        # Never held: a deletion also cancels the cycle in flight (its result is then ignored).
        if not _already_applied(step, event):
            _delete(step, event)
    else:
        _expire_overdue(step, log_time)
        if _busy(step.state, step.config):
            _hold(step, event)
        else:
            _handle(step, event)


def _expire_overdue(step: Step, log_time: datetime | None) -> None:
    """A blocking cycle begun more than `cycleDeadline` of log time before this input fails, and
    the inputs it held are applied before this one (see `deadline.expire_overdue`).

    Log time, not the inputs' `createdAt`: a producer importing history writes messages hours
    apart in a second, and none of that is a model taking too long."""
    if is_overdue(step.state.blocked_since, log_time, step.config) and expire_overdue(step):
        _release_held(step)


def addressed(result: ModelResult, config: EngineConfig) -> bool:
    """Whether a model result in the log is an input of this version.

    Its own results are.  A version that follows the log also applies results made under its
    configuration digest by another version: the same decisions made the same request, so that
    answer is its answer, at the position the log gives it.  Anything else is another
    version's traffic and changes nothing here, not even with an event."""
    if (result.version or "live") == config.version:
        return True
    return not config.settled and result.config_digest == config.digest


def _busy(state: MemoryState, config: EngineConfig) -> bool:
    """Whether the memory holds its next input: a blocking cycle is in flight, or, settled, any."""
    if state.in_flight is not None:
        return True
    return config.settled and (state.buffering is not None or state.reflection_buffering is not None)


def holds(state: MemoryState, event: Input, config: EngineConfig, *,
          log_time: datetime | None = None) -> bool:
    """Whether `fold` holds `event` behind the cycle in flight (at least until the cycle ends),
    so a worker can bound how many inputs one memory holds."""
    if not _busy(state, config) or isinstance(event, (ModelResult, ThreadDeleted, ResourceDeleted)):
        return False
    return config.settled or not is_overdue(state.blocked_since, log_time, config)


def _focus(step: Step, event: Input) -> None:
    """Resource scope: the check this input sets off measures its thread's window."""
    thread = getattr(event, "thread_id", None)
    if is_resource(step.config) and thread is not None and thread != step.state.focus:
        step.update(focus=thread)


def _handle(step: Step, event: Input) -> None:
    _focus(step, event)
    if isinstance(event, Message):
        _on_message(step, event)
    elif _already_applied(step, event):
        return
    elif isinstance(event, StepStarted):
        _on_step(step, event)
    elif isinstance(event, TurnEnded):
        now = step.now(event.at)
        if (_memory_on(step) and step.config.resolved.async_buffering
                and step.config.resolved.observation.buffer_on_idle):
            start_buffer(step, now, skip_minimum=True)
    elif isinstance(event, (ObserveRequested, ReflectRequested)) and not _memory_on(step):
        step.rejected.append(Rejected(
            f"{event.type} for {step.state.memory_key}: observational memory is disabled "
            "(observationalMemory.enabled is false), so there is nothing to observe or reflect"))
    elif isinstance(event, ObserveRequested):
        manual_observe(step, step.now(event.at))
    elif isinstance(event, ReflectRequested):
        manual_reflect(step, step.now(event.at), event.prompt)
    elif isinstance(event, ConfigOverridden):
        _override(step, event)
    elif isinstance(event, ThreadPatched):
        _patch_thread(step, event)
    elif isinstance(event, WorkingMemorySet):
        set_working_memory(step, event)


def _already_applied(step: Step, command: object) -> bool:
    """Commands re-sent with the same `requestId` are applied once."""
    request = getattr(command, "request_id", None)
    if request is None:
        return False
    if request in step.state.requests:
        return True
    step.update(requests=(*step.state.requests, request)[-_RECENT_REQUESTS:])
    return False


def _awaited(state: MemoryState) -> str | None:
    """The cycle the memory's held inputs wait for."""
    cycle = state.in_flight or state.buffering or state.reflection_buffering
    return cycle.cycle_id if cycle is not None else None


def _hold(step: Step, event: Input) -> None:
    """Keep `event` until the cycle in flight ends, and say so: a reader waiting for it (`?after=`)
    learns that it is held, and behind what."""
    if isinstance(event, Message) and _is_duplicate(step, event):
        return
    state = step.state
    step.update(held=(*state.held, event.wire()), held_for=_awaited(state))
    if step.config.settled:
        return  # a settled version holds every input behind any job: when depends on the model
    thread = getattr(event, "thread_id", None)
    step.emit(InputHeld, InputHeldData(
        cycle_id=step.state.held_for, held=len(step.state.held), input_type=event.type,
        message_id=event.id if isinstance(event, Message) else None,
    ), _hold_time(step), thread_id=thread)


def _hold_time(step: Step) -> datetime:
    """The time of a hold or release event: the memory's clock, which a held input does not
    move (its own time counts once it is applied, as if it had arrived then)."""
    at = step.state.clock
    assert at is not None, "a memory that holds inputs has a cycle in flight, begun at some time"
    return at


def _release_held(step: Step) -> None:
    """Fold the inputs held during a cycle, until one holds them again (then the rest are held
    behind that cycle, and an `om-input-held` says so)."""
    if step.state.held and _busy(step.state, step.config):
        _held_behind(step)  # the cycle ended and its check started the next one at once
        return
    if not step.state.held:
        return
    state = step.state
    if not step.config.settled:
        step.emit(InputReleased, InputReleasedData(cycle_id=state.held_for, released=len(state.held)),
                  _hold_time(step))
    while step.state.held and not _busy(step.state, step.config):
        raw, rest = step.state.held[0], step.state.held[1:]
        step.update(held=rest)
        event = _INPUT.validate_python(raw)
        if isinstance(event, Message):
            _on_message(step, event, released=True)
        else:
            _handle(step, event)
    if step.state.held:
        _held_behind(step)
    else:
        step.update(held_for=None)


def _held_behind(step: Step) -> None:
    """The held inputs wait for another cycle than the one named last: say which."""
    awaited = _awaited(step.state)
    if awaited != step.state.held_for:
        step.update(held_for=awaited)
        if not step.config.settled:
            step.emit(InputHeld, InputHeldData(cycle_id=awaited, held=len(step.state.held)), _hold_time(step))


# --- messages ---------------------------------------------------------------------------------
def _content_hash(message: Message) -> str:
    body = message.model_dump(mode="json", by_alias=True, exclude={"tokens"}, exclude_none=True)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _is_duplicate(step: Step, message: Message) -> bool:
    """True for a replayed copy; a different message under a seen id is rejected."""
    digest = _content_hash(message)
    known = step.state.seen.get(message.id)
    if known is None:
        step.update(seen=step.state.seen.with_id(message.id, digest))
        return False
    if known != digest:
        step.rejected.append(Rejected(
            f"message id {message.id!r} was already used for a different message in "
            f"{step.state.memory_key}; messages are immutable, give the new one a new id"
        ))
    return True


def _message_tokens(message: Message, counter: Counter, model: str | None = None) -> int:
    # A producer's count is never trusted: a count of 0 (or a wrong one) would keep a memory
    # from ever observing.  The configured counter is deterministic, so a refold agrees.
    return count_message(message, counter, model)


def _actor_model(message: Message) -> str | None:
    meta = message.metadata
    if meta is None or meta.model is None:
        return None
    return meta.model if meta.provider is None or "/" in meta.model else f"{meta.provider}/{meta.model}"


def _on_message(step: Step, message: Message, *, released: bool = False) -> None:
    if not released and _is_duplicate(step, message):
        return
    _focus(step, message)
    now = step.now(message.created_at)
    marker = None
    if message.role == "user" and step.config.resolved.temporal_markers:
        marker = _temporal_marker(step, message)
    counter = step.config.counter
    view = transcribe(message, counter.count)
    pending = PendingMessage(
        id=message.id, role=message.role, created_at=message.created_at, text=message.text(),
        tokens=_message_tokens(message, counter, step.config.om.observer_model),
        lines=view.lines, attachments=view.attachments,
        calls=_tool_ids(message, ToolCallPart), answers=_tool_ids(message, ToolResultPart),
        thread_id=message.thread_id if is_resource(step.config) else None,
    )
    # The marker follows the message it was made for, in the observer's history (spec §14).
    step.update(pending=(*step.state.pending, pending, *((marker,) if marker else ())))
    _announce(step, message, pending.tokens, counter.name, now)
    if message.role == "assistant":
        step.update(last_activity_at=message.created_at,
                    last_model=_actor_model(message) or step.state.last_model)
    if _memory_on(step) and _checks_per_message(step):
        check(step, now, None, _actor_model(message))


def _announce(step: Step, message: Message, tokens: int, counter: str, now: datetime) -> None:
    """Tell the read side the message joined the memory, before any cycle it triggers.

    Projections read messages only from here, never from the input log: a duplicate, a refused
    or a dead-lettered message is never shown to an agent, and a held message appears when it
    is folded, in the fold's order.  The count is the one the fold used."""
    folded = message.model_copy(update={"tokens": TokenCount(counter=counter, count=tokens)})
    step.emit(MessageAccepted, MessageAcceptedData(message=folded), now)


def _tool_ids(message: Message, part: type[ToolCallPart] | type[ToolResultPart]) -> tuple[str, ...]:
    if isinstance(message.content, str):
        return ()
    return tuple(p.tool_call_id for p in message.content if isinstance(p, part))


def _temporal_marker(step: Step, message: Message) -> PendingMessage | None:
    """The marker for a gap of ten minutes or more before a user message (spec §14), if any."""
    def timed(message_id: str, at: datetime) -> TimedMessage:
        ms = round(at.timestamp() * 1000)
        return TimedMessage(message_id, ms, ms)

    # In resource scope the gap is the thread's own: its messages, its last observed one.
    thread = message.thread_id if is_resource(step.config) else None
    timeline = [timed(m.id, m.created_at) for m in step.state.pending if m.thread_id == thread]
    meta = step.state.threads.get(thread) if thread is not None else None
    last_observed = step.state.cursor if thread is None else meta.last_observed_at if meta else None
    if not timeline and last_observed is not None:
        # Everything before is observed: the previous message is the newest observed one.
        timeline = [timed("last-observed", last_observed)]
    timeline.append(timed(message.id, message.created_at))
    gap = plan_temporal_gap(timeline, message.id, ZoneInfo(step.config.om.time_zone))
    if gap is None:
        return None
    step.emit(TemporalGap, TemporalGapData(
        marker_id=gap.marker_id, precedes_message_id=gap.precedes_message_id, gap_text=gap.gap_text,
        gap_ms=gap.gap_ms, timestamp=gap.timestamp, timestamp_ms=gap.timestamp_ms,
        contents=gap.contents), message.created_at)
    # The agent reads a system-reminder dated just before the message; the observer reads a
    # time-less `Signal: <gapText> — <timestamp>` line right after it.  It counts as the
    # original stores it: a `signal` message of one text part, the reminder's contents (§5.2).
    return PendingMessage(
        id=gap.marker_id, role="user", created_at=message.created_at - timedelta(milliseconds=1),
        text=gap.contents, title=SIGNAL, tokens=count_text_message("signal", gap.contents, step.config.counter),
        thread_id=thread,
    )


def _memory_on(step: Step) -> bool:
    """With `enabled: false` messages are kept (they reach the agent raw), but no cycle runs."""
    return step.config.om.enabled


def _checks_per_message(step: Step) -> bool:
    when = step.config.om.check_thresholds_at
    return when == "message" or (when == "auto" and not step.state.steps_reported)


def _on_step(step: Step, event: StepStarted) -> None:
    now = step.now(event.at)
    step.update(steps_reported=True)
    if _memory_on(step) and step.config.om.check_thresholds_at != "message":
        check(step, now, event.step_number, event.model)


# --- commands ---------------------------------------------------------------------------------
def _override(step: Step, event: ConfigOverridden) -> None:
    """Deep-merge per-memory overrides; the thresholds use them from the next check on."""
    o, r = event.overrides.observation, event.overrides.reflection
    changes = {}
    if o is not None and o.message_tokens is not None:
        changes["message_tokens_override"] = o.message_tokens
    if r is not None and r.observation_tokens is not None:
        changes["observation_tokens_override"] = r.observation_tokens
    step.update(**changes)
    emit_status(step, step.now(event.at), None)


def _patch_thread(step: Step, event: ThreadPatched) -> None:
    if is_resource(step.config):
        _patch_resource_thread(step, event)
        return
    now = step.now(event.at)
    old = step.state.title
    if event.title_pinned is not None:
        step.update(title_pinned=event.title_pinned)
    if event.title is not None and event.title != old:
        step.update(title=event.title)
        step.emit(ThreadUpdate, ThreadUpdateData(
            cycle_id=step.next_cycle_id(), thread_id=step.thread_id, old_title=old,
            new_title=event.title, timestamp=now), now)


def _patch_resource_thread(step: Step, event: ThreadPatched) -> None:
    """A thread of a resource memory keeps its own title (spec §3.3: thread metadata)."""
    now = step.now(event.at)
    meta = step.state.threads.get(event.thread_id) or ThreadMemory()
    old = meta.title
    if event.title_pinned is not None:
        meta = meta.model_copy(update={"title_pinned": event.title_pinned})
    if event.title is not None and event.title != old:
        meta = meta.model_copy(update={"title": event.title})
        step.emit(ThreadUpdate, ThreadUpdateData(
            cycle_id=step.next_cycle_id(), thread_id=event.thread_id, old_title=old,
            new_title=event.title, timestamp=now), now)
    step.update(threads={**step.state.threads, event.thread_id: meta})


def _delete(step: Step, event: ThreadDeleted | ResourceDeleted) -> None:
    """Forget the memory; the edge deletes the table entry on the `om-memory-deleted` event."""
    now = step.now(event.at)
    state = step.state
    reason: Literal["thread-deleted", "resource-deleted"] = (
        "thread-deleted" if isinstance(event, ThreadDeleted) else "resource-deleted")
    step.emit(MemoryDeleted, MemoryDeletedData(reason=reason, generation_count=state.generation), now)
    step.state = MemoryState(memory_key=state.memory_key, thread_id=state.thread_id,
                             resource_id=state.resource_id, seq=step.state.seq, clock=now,
                             offsets=state.offsets)
