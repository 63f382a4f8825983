"""The fold: `(state, input) -> (state, events, jobs)`, the whole engine as a pure function.

What is a fold?  Every change to one memory (a thread in thread scope) is an input on a
partition keyed by the memory key: a chat message, an agent-loop marker, or a model result.
The worker feeds them here one at a time and stores the returned state; it sends the returned
events to `<ns>.events` and the jobs to `<ns>.jobs`.  Nothing here reads a clock, draws a random
number or does I/O: time is the inputs' event time, ids derive from the key and `state.seq`.

Synchronous observation, the walking skeleton of the product::

    message ... message  (unobserved tokens reach observation.messageTokens)
        -> data-om-observation-start + an `observe` job; the memory is now blocked
    messages that arrive while blocked are held, as the original blocks the agent
    result  (checked against the cycle in flight, then applied)
        -> data-om-observation-end, cursor advanced; held inputs are folded again

A producer that reports steps gets thresholds checked at each step (like the original, which
checks at the start of every step); one that never does gets them checked on every message.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Union

import orjson

from schemas.base import iso
from schemas.config import OmConfig
from schemas.control import StepStarted, TurnEnded
from schemas.events import (
    ActiveWindows,
    MarkerConfig,
    ObservationEnd,
    ObservationEndData,
    ObservationFailed,
    ObservationFailedData,
    ObservationStart,
    ObservationStartData,
    ResultIgnored,
    ResultIgnoredData,
    Status,
    StatusData,
    TokenWindow,
    Windows,
)
from schemas.jobs import ChatMessage, ModelJob, ModelResult, request_hash
from schemas.messages import Message

from . import ids
from .observations import append_observations
from .parsing import ObserverOutput, parse_observer_output
from .prompts import (
    observer_system_prompt,
    observer_user_prompt,
    reflector_system_prompt,
    reflector_user_prompt,
)
from .state import Cycle, MemoryState, PendingMessage
from .tokens import Counter, count_message, count_messages, get_counter
from .transcript import TranscriptLine, render_transcript
from .truncation import truncate_observations

__all__ = ["EngineConfig", "Folded", "Input", "Rejected", "fold", "memory_key", "new_state"]

Input = Union[Message, StepStarted, TurnEnded, ModelResult]


@dataclass(frozen=True)
class EngineConfig:
    """The resolved options the fold decides with."""

    om: OmConfig
    counter: Counter = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counter", get_counter(self.om.token_counter))

    @property
    def message_tokens(self) -> int:
        return self.om.observation.message_tokens

    @property
    def reflection_tokens(self) -> int:
        return self.om.reflection.observation_tokens

    @property
    def marker_config(self) -> MarkerConfig:
        return MarkerConfig(
            message_tokens=self.om.observation.message_tokens,
            observation_tokens=self.om.reflection.observation_tokens,
            scope=self.om.scope,
        )


@dataclass(frozen=True)
class Rejected:
    """An input the fold refuses; the worker sends it to the dead-letter topic with the reason."""

    reason: str


@dataclass(frozen=True)
class Folded:
    state: MemoryState
    events: tuple = ()
    jobs: tuple[ModelJob, ...] = ()
    rejected: tuple[Rejected, ...] = ()


def memory_key(om: OmConfig, thread_id: str, resource_id: str | None) -> str:
    if om.scope == "resource":
        return f"resource:{resource_id or thread_id}"
    return f"thread:{thread_id}"


def new_state(key: str, thread_id: str, resource_id: str | None) -> MemoryState:
    return MemoryState(memory_key=key, thread_id=thread_id, resource_id=resource_id)


class _Step:
    """Collects what one fold call emits; `state` is replaced, never mutated."""

    def __init__(self, state: MemoryState, config: EngineConfig) -> None:
        self.state = state
        self.config = config
        self.events: list = []
        self.jobs: list[ModelJob] = []
        self.rejected: list[Rejected] = []

    def update(self, **changes: object) -> None:
        self.state = self.state.model_copy(update=changes)

    def now(self, at: datetime) -> datetime:
        clock = self.state.clock
        now = at if clock is None or at > clock else clock
        self.update(clock=now)
        return now

    def emit(self, cls: type, data: object, at: datetime) -> None:
        seq = self.state.seq + 1
        key = self.state.memory_key
        self.events.append(cls(
            event_id=ids.event_id(key, seq), memory_key=key, thread_id=self.state.thread_id,
            seq=seq, event_time=at, data=data,
        ))
        self.update(seq=seq)

    @property
    def record_id(self) -> str:
        return ids.record_id(self.state.memory_key, self.state.generation)


def fold(state: MemoryState, event: Input, config: EngineConfig) -> Folded:
    step = _Step(state, config)
    _apply(step, event)
    return Folded(step.state, tuple(step.events), tuple(step.jobs), tuple(step.rejected))


def _apply(step: _Step, event: Input) -> None:
    if isinstance(event, ModelResult):
        _on_result(step, event)
        _release_held(step)
    elif isinstance(event, (StepStarted, TurnEnded)) and _ahead_of_messages(step.state, event):
        step.update(parked=(*step.state.parked, event.wire()))
    elif isinstance(event, Message):
        if step.state.in_flight is not None:
            _hold(step, event)
        else:
            _on_message(step, event)
        _unpark(step)
    elif step.state.in_flight is not None:
        _hold(step, event)
    elif isinstance(event, StepStarted):
        _on_step(step, event)
    elif isinstance(event, TurnEnded):
        step.now(event.at)


def _ahead_of_messages(state: MemoryState, marker: StepStarted | TurnEnded) -> bool:
    """A marker that names a message not folded yet (it travels on another topic)."""
    return marker.after_message_id is not None and marker.after_message_id not in state.seen


def _decode_held(raw: dict) -> Input:
    kind = raw.get("type")
    if kind == "message":
        return Message.model_validate(raw)
    if kind == "step-started":
        return StepStarted.model_validate(raw)
    return TurnEnded.model_validate(raw)


def _unpark(step: _Step) -> None:
    """Fold the markers whose message has now arrived, in their own order."""
    while step.state.parked:
        marker = _decode_held(step.state.parked[0])
        if _ahead_of_messages(step.state, marker):
            return
        step.update(parked=step.state.parked[1:])
        _apply(step, marker)


# --- messages ---------------------------------------------------------------------------------
def _content_hash(message: Message) -> str:
    body = message.model_dump(mode="json", by_alias=True, exclude={"tokens"}, exclude_none=True)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _hold(step: _Step, event: Input) -> None:
    if isinstance(event, Message) and _is_duplicate(step, event):
        return
    step.update(held=(*step.state.held, event.wire()))


def _is_duplicate(step: _Step, message: Message) -> bool:
    """True for a replayed copy; a different message under a seen id is rejected."""
    digest = _content_hash(message)
    known = step.state.seen.get(message.id)
    if known is None:
        step.update(seen={**step.state.seen, message.id: digest})
        return False
    if known != digest:
        step.rejected.append(Rejected(
            f"message id {message.id!r} was already used for a different message in "
            f"{step.state.memory_key}; messages are immutable, give the new one a new id"
        ))
    return True


def _message_tokens(message: Message, counter: Counter) -> int:
    if message.tokens is not None and message.tokens.counter == counter.name:
        return message.tokens.count
    return count_message(message, counter)


def _on_message(step: _Step, message: Message, *, released: bool = False) -> None:
    if not released and _is_duplicate(step, message):
        return
    now = step.now(message.created_at)
    pending = PendingMessage(
        id=message.id, role=message.role, created_at=message.created_at,
        text=message.text(), tokens=_message_tokens(message, step.config.counter),
    )
    step.update(pending=(*step.state.pending, pending))
    if not step.state.steps_reported:
        _check_thresholds(step, now, step_number=None)


def _on_step(step: _Step, event: StepStarted) -> None:
    now = step.now(event.at)
    step.update(steps_reported=True)
    _check_thresholds(step, now, step_number=event.step_number)


def _release_held(step: _Step) -> None:
    """Fold the inputs held during a blocking cycle, until one blocks again."""
    while step.state.held and step.state.in_flight is None:
        raw, rest = step.state.held[0], step.state.held[1:]
        step.update(held=rest)
        event = _decode_held(raw)
        if isinstance(event, Message):
            _on_message(step, event, released=True)
        elif isinstance(event, StepStarted):
            _on_step(step, event)
        else:
            step.now(event.at)
    _unpark(step)


# --- the check a step (or message) runs -------------------------------------------------------
def _pending_tokens(state: MemoryState) -> int:
    return count_messages([m.tokens for m in state.pending])


def _reflection_due(state: MemoryState, config: EngineConfig) -> bool:
    tokens = state.observation_tokens
    return tokens >= config.reflection_tokens and state.reflection_suppressed_at != tokens


def _check_thresholds(step: _Step, now: datetime, step_number: int | None) -> None:
    """Reflect if due, then observe if due, then report: the order of the original's step."""
    if _reflection_due(step.state, step.config):
        _start_reflection(step, now, phase="before-observe", step_number=step_number)
    else:
        _resume(step, now, "before-observe", step_number)


def _resume(step: _Step, now: datetime, after: str, step_number: int | None) -> None:
    """Continue a check after its phase `after` has finished (at once, or when a cycle ended)."""
    state, config = step.state, step.config
    if after == "before-observe" and _pending_tokens(state) >= config.message_tokens:
        _start_observation(step, now, step_number)
    elif after == "observe" and _reflection_due(state, config):
        _start_reflection(step, now, phase="after-observe", step_number=step_number)
    else:
        _emit_status(step, now, step_number)


def _emit_status(step: _Step, now: datetime, step_number: int | None) -> None:
    state, config = step.state, step.config
    windows = Windows(active=ActiveWindows(
        messages=TokenWindow(tokens=_pending_tokens(state), threshold=config.message_tokens),
        observations=TokenWindow(tokens=state.observation_tokens, threshold=config.reflection_tokens),
    ))
    step.emit(Status, StatusData(
        windows=windows, record_id=step.record_id, thread_id=state.thread_id,
        step_number=step_number, generation_count=state.generation,
    ), now)


def _job(step: _Step, cycle: Cycle, model: str, messages: tuple[ChatMessage, ...],
         settings: dict) -> ModelJob:
    state = step.state
    return ModelJob(
        kind=cycle.kind, cycle_id=cycle.cycle_id, memory_key=state.memory_key,
        thread_id=state.thread_id, generation=state.generation,
        cursor=iso(state.cursor) if state.cursor else None, model=model, messages=messages,
        settings=settings, request_hash=request_hash(model, messages, settings),
        created_at=cycle.started_at,
    )


def _outcome_time(step: _Step, cycle: Cycle, result: ModelResult) -> tuple[datetime, int]:
    """The cycle's start plus the model call's own duration, so the log does not depend on
    when the worker happened to read the result."""
    duration = max(0, round((result.completed_at - result.started_at).total_seconds() * 1000))
    return step.now(cycle.started_at + timedelta(milliseconds=duration)), duration


def _on_result(step: _Step, result: ModelResult) -> None:
    cycle = step.state.in_flight
    if cycle is None or cycle.cycle_id != result.cycle_id:
        at = step.now(step.state.clock or result.completed_at)
        step.emit(ResultIgnored, ResultIgnoredData(
            cycle_id=result.cycle_id, kind=result.kind,
            reason="no cycle waits for this result (a late or duplicate delivery)",
        ), at)
        return
    done, duration = _outcome_time(step, cycle, result)
    step.update(in_flight=None)
    if cycle.kind == "reflect":
        _on_reflection_result(step, cycle, result, done, duration)
    else:
        _on_observation_result(step, cycle, result, done, duration)


# --- observation ------------------------------------------------------------------------------
def _observer_request(state: MemoryState, config: EngineConfig) -> tuple[ChatMessage, ...]:
    transcript = render_transcript(
        (TranscriptLine(m.created_at, m.role.capitalize(), m.text) for m in state.pending),
        config.om.time_zone,
    )
    hints = config.om.observation.continuation_hints
    budget = config.om.observation.previous_observer_tokens
    previous, truncated = truncate_observations(
        state.observations, None if budget is False else budget, config.counter.count)
    return (
        ChatMessage(role="system", content=observer_system_prompt(
            continuation_hints=hints, instruction=config.om.observation.instruction)),
        ChatMessage(role="user", content=observer_user_prompt(
            transcript=transcript,
            previous_observations=previous,
            truncated=truncated,
            current_task=state.current_task if hints else None,
            suggested_response=state.suggested_response if hints else None,
        )),
    )


def _start_observation(step: _Step, now: datetime, step_number: int | None) -> None:
    state, config = step.state, step.config
    tokens = _pending_tokens(state)
    cycle = Cycle(
        cycle_id=ids.cycle_id(state.memory_key, state.seq + 1), kind="observe",
        message_ids=state.pending_ids, tokens=tokens, started_at=now, generation=state.generation,
        phase="observe", step_number=step_number,
    )
    step.emit(ObservationStart, ObservationStartData(
        cycle_id=cycle.cycle_id, operation_type="observation", started_at=now,
        tokens_to_observe=tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=config.marker_config,
    ), now)
    model = config.om.observer_model
    settings = dict(config.om.observation.model_settings)
    step.jobs.append(_job(step, cycle, model, _observer_request(state, config), settings))
    step.update(in_flight=cycle)


def _failed(step: _Step, cycle: Cycle, operation: str, error: str, done: datetime,
            duration: int) -> None:
    step.emit(ObservationFailed, ObservationFailedData(
        cycle_id=cycle.cycle_id, operation_type=operation, failed_at=done, duration_ms=duration,
        tokens_attempted=cycle.tokens, error=error[:2000], record_id=step.record_id,
        thread_id=step.state.thread_id,
    ), done)


def _on_observation_result(step: _Step, cycle: Cycle, result: ModelResult, done: datetime,
                           duration: int) -> None:
    parsed = parse_observer_output(result.output or "") if result.ok else None
    error = result.error
    if parsed is not None and parsed.degenerate:
        error = "Observer produced degenerate output"
    elif parsed is not None and not parsed.observations:
        error = "Observer returned no observations"
    if parsed is None or error:
        # The messages stay unobserved for the next cycle; the check reports and ends.
        _failed(step, cycle, "observation", error or "", done, duration)
        _emit_status(step, done, cycle.step_number)
        return
    _commit_observation(step, cycle, parsed, done, duration)
    _resume(step, done, "observe", cycle.step_number)


def _commit_observation(step: _Step, cycle: Cycle, parsed: ObserverOutput, done: datetime,
                        duration: int) -> None:
    state, config = step.state, step.config
    text = parsed.observations
    covered = set(cycle.message_ids)
    observed = [m for m in state.pending if m.id in covered]
    cursor = max(m.created_at for m in observed)
    joined = append_observations(state.observations, text, iso(cursor))
    step.update(
        observations=joined,
        observation_tokens=config.counter.count(joined),
        cursor=cursor if state.cursor is None or cursor > state.cursor else state.cursor,
        pending=tuple(m for m in state.pending if m.id not in covered),
        current_task=parsed.current_task,
        suggested_response=parsed.suggested_response,
        cycles_completed=state.cycles_completed + 1,
    )
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens,
        observation_tokens=config.counter.count(text), observations=text,
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        record_id=step.record_id, thread_id=state.thread_id,
        observed_message_ids=cycle.message_ids, cursor=iso(step.state.cursor),
        generation=state.generation,
    ), done)


# --- reflection (spec §6.7, §8.3) -------------------------------------------------------------
def compression_start_level(model: str, *, manual: bool = False) -> int:
    """Gemini 2.5 Flash compresses weakly at level 1, so it starts one level up; manual at 0."""
    if manual:
        return 0
    return 2 if "gemini-2.5-flash" in model else 1


def _start_reflection(step: _Step, now: datetime, *, phase: str, step_number: int | None,
                      level: int | None = None, previous: Cycle | None = None) -> None:
    state, config = step.state, step.config
    model = config.om.reflector_model
    start = compression_start_level(model)
    cycle = Cycle(
        cycle_id=ids.cycle_id(state.memory_key, state.seq + 1), kind="reflect", message_ids=(),
        tokens=state.observation_tokens, started_at=now, generation=state.generation,
        phase=phase, step_number=step_number,
        level=start if level is None else level,
        max_level=min(4, start + 3) if previous is None else previous.max_level,
        best=previous.best if previous else None,
        best_suggested_response=previous.best_suggested_response if previous else None,
    )
    step.emit(ObservationStart, ObservationStartData(
        cycle_id=cycle.cycle_id, operation_type="reflection", started_at=now,
        tokens_to_observe=cycle.tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=config.marker_config,
    ), now)
    hints = config.om.observation.continuation_hints
    messages = (
        ChatMessage(role="system", content=reflector_system_prompt(
            continuation_hints=hints, instruction=config.om.reflection.instruction)),
        ChatMessage(role="user", content=reflector_user_prompt(
            observations=state.observations, level=cycle.level, continuation_hints=hints)),
    )
    settings = dict(config.om.reflection.model_settings)
    step.jobs.append(_job(step, cycle, model, messages, settings))
    step.update(in_flight=cycle)


def _on_reflection_result(step: _Step, cycle: Cycle, result: ModelResult, done: datetime,
                          duration: int) -> None:
    config = step.config
    parsed = parse_observer_output(result.output or "") if result.ok else None
    if parsed is None:
        _reflection_gave_up(step, cycle, result.error or "", done, duration)
        return
    acceptable = not parsed.degenerate and bool(parsed.observations)
    tokens = config.counter.count(parsed.observations) if acceptable else cycle.tokens
    best, best_hint = cycle.best, cycle.best_suggested_response
    if acceptable and (best is None or tokens < config.counter.count(best)):
        best, best_hint = parsed.observations, parsed.suggested_response
    last = cycle.level >= cycle.max_level
    if acceptable and tokens < config.reflection_tokens:
        _commit_reflection(step, cycle, parsed.observations, parsed.suggested_response, done, duration)
    elif last and best is not None:
        _commit_reflection(step, cycle, best, best_hint, done, duration)
    elif last:
        reason = "degenerate" if parsed.degenerate else "empty"
        _reflection_gave_up(
            step, cycle, f"Reflector produced {reason} output after "
            f"{cycle.max_level - compression_start_level(config.om.reflector_model) + 1} "
            "attempt(s)", done, duration)
    else:
        _failed(step, cycle, "reflection",
                f"Did not compress below threshold ({cycle.tokens} → {tokens}, target: "
                f"{config.reflection_tokens}), retrying at level {cycle.level + 1}", done, duration)
        retry = cycle.model_copy(update={"best": best, "best_suggested_response": best_hint})
        _start_reflection(step, done, phase=cycle.phase, step_number=cycle.step_number,
                          level=cycle.level + 1, previous=retry)


def _reflection_gave_up(step: _Step, cycle: Cycle, error: str, done: datetime, duration: int) -> None:
    _failed(step, cycle, "reflection", error, done, duration)
    step.update(reflection_suppressed_at=cycle.tokens)
    _resume(step, done, cycle.phase, cycle.step_number)


def _commit_reflection(step: _Step, cycle: Cycle, text: str, suggested: str | None,
                       done: datetime, duration: int) -> None:
    """A new generation whose observations are the reflection; the messages are untouched."""
    state, config = step.state, step.config
    tokens = config.counter.count(text)
    step.update(
        generation=state.generation + 1, observations=text, observation_tokens=tokens,
        suggested_response=suggested or state.suggested_response,
        reflection_suppressed_at=tokens if tokens >= config.reflection_tokens else None,
    )
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="reflection", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens, observation_tokens=tokens,
        observations=text, suggested_response=suggested, record_id=step.record_id,
        thread_id=state.thread_id, cursor=iso(state.cursor) if state.cursor else None,
        generation=step.state.generation,
    ), done)
    _resume(step, done, cycle.phase, cycle.step_number)
