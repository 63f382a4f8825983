"""The observation and reflection lifecycle of one memory (spec §6–§8, §11), as fold steps.

A *check* runs at every step the agent reports (or at every message, for producers without an
agent loop) in the original's order::

    step 0: activate buffered chunks if the threshold, idle time or a provider change says so
            reflect if due (buffer a reflection, swap a buffered one in, or reflect blocking)
    then:   at the threshold, activate buffered chunks (instant, no model call)
            at blockAfter (or the threshold when buffering is off), observe blocking
            cross a buffer interval: start a background observation
            after anything changed the log: reflect if due
    last:   data-om-status, then the background observation's buffering-start (the status
            already counts it as running; the original's recordings show this order)

A blocking cycle (observe, reflect) holds the memory's later inputs until its result arrives; the
check then resumes where it stopped, so `data-om-status` reports the settled windows, after the
cycle's own events.  Background cycles (buffer, buffer-reflection) never hold anything: their
results land in state (`chunks`, `buffered_reflection`) and wait for an activation.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from omstream.schemas.base import iso
from omstream.schemas.events import (
    Activation,
    ActivationData,
    ActiveWindows,
    BufferedObservationsWindow,
    BufferedReflectionWindow,
    BufferedWindows,
    BufferingEnd,
    BufferingEndData,
    BufferingFailed,
    BufferingFailedData,
    BufferingStart,
    BufferingStartData,
    ExtractionFailure,
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
    ThreadUpdate,
    ThreadUpdateData,
    TokenWindow,
    Windows,
)
from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult, request_hash

from . import extraction
from .activation import (
    Chunk,
    activation_trigger,
    did_provider_change,
    force_max_activation,
    plan_activation,
    resolve_activation_ttl,
    to_epoch_ms,
)
from .attachments import observer_user_content
from .extraction import Extraction, Spec
from .observations import CHUNK_SEPARATOR, append_observations
from .parsing import ObserverOutput, is_degenerate, parse_observer_output
from .prompts import (
    observer_system_prompt,
    observer_user_prompt,
    reflector_system_prompt,
    reflector_user_prompt,
)
from .reflection_plan import (
    ReflectionAttempt,
    buffered_reflection_slice,
    buffered_reflection_suppressed,
    compression_start_level,
    ladder_step,
    merge_buffered_reflection,
    plan_reflection,
)
from .state import BufferedChunk, BufferedReflection, Cycle, Generation, MemoryState, PendingMessage
from .step import EngineConfig, Step
from .thresholds import (
    BufferCandidate,
    enough_to_buffer,
    projected_message_removal,
    safe_buffer_prefix,
    should_trigger_buffer,
)
from .tokens import count_messages
from .transcript import SIGNAL, AttachmentNumbers, TranscriptLine, render_transcript
from .truncation import truncate_observations

__all__ = ["check", "manual_observe", "manual_reflect", "on_result", "emit_status"]

BUFFERED_SEPARATOR = "--- BUFFERED (pending activation) ---"


# --- the check --------------------------------------------------------------------------------
def check(step: Step, now: datetime, step_number: int | None, actor_model: str | None) -> None:
    """One step's (or message's) preparation; ends with `data-om-status` unless a cycle blocks."""
    if step_number in (0, None):
        _activate(step, now, checked=True, actor_model=actor_model)
        if _maybe_reflect(step, now, "before-observe", step_number, actor_model):
            return
    resume(step, now, "before-observe", step_number)


def resume(step: Step, now: datetime, after: str, step_number: int | None) -> None:
    """Continue a check after its phase `after` (at once, or when a blocking cycle ended)."""
    if after == "before-observe" and _observe_phase(step, now, step_number):
        return
    if after in ("before-observe", "observe") and step.observations_changed:
        if _maybe_reflect(step, now, "after-observe", step_number, None):
            return
    emit_status(step, now, step_number)


def _observe_phase(step: Step, now: datetime, step_number: int | None) -> bool:
    """Activation, the blocking observation and buffering; True when a cycle now blocks."""
    config = step.config
    threshold = config.message_threshold(step.state)
    if not config.async_buffering:
        if step.pending_tokens >= threshold:
            _start_observation(step, now, step_number, trigger="turn-sync")
            return True
        return False
    if step.pending_tokens >= threshold:
        _activate(step, now, checked=False, actor_model=None)
    block_after = config.resolved.observation.block_after
    if block_after is not None and step.pending_tokens >= block_after:
        if step.state.buffering is not None:
            # The safety net: wait for the chunk in flight, then decide again.
            step.update(in_flight=step.state.buffering.model_copy(
                update={"phase": "before-observe", "step_number": step_number}))
            return True
        _start_observation(step, now, step_number, trigger="turn-sync")
        return True
    _maybe_buffer(step, now)
    return False


# --- status -----------------------------------------------------------------------------------
def emit_status(step: Step, now: datetime, step_number: int | None) -> None:
    state, config = step.state, step.config
    pending = step.pending_tokens
    threshold = config.message_threshold(state)
    chunk_tokens = [c.message_tokens for c in state.chunks]
    activation = config.resolved.observation.buffer_activation
    buffered = BufferedObservationsWindow(
        chunks=len(state.chunks),
        message_tokens=min(sum(chunk_tokens), pending),
        projected_message_removal=(
            projected_message_removal(chunk_tokens, activation, threshold, pending) if activation else 0),
        observation_tokens=sum(c.tokens for c in state.chunks),
        status="running" if state.buffering else "complete" if state.chunks else "idle",
    )
    reflection = state.buffered_reflection
    buffered_reflection = BufferedReflectionWindow(
        input_observation_tokens=reflection.input_tokens if reflection else 0,
        observation_tokens=reflection.tokens if reflection else 0,
        status="running" if state.reflection_buffering else "complete" if reflection else "idle",
    )
    windows = Windows(
        active=ActiveWindows(
            messages=TokenWindow(tokens=pending, threshold=threshold),
            observations=TokenWindow(tokens=state.observation_tokens,
                                     threshold=config.reflection_threshold(state, pending)),
        ),
        buffered=BufferedWindows(observations=buffered, reflection=buffered_reflection),
    )
    step.emit(Status, StatusData(
        windows=windows, record_id=step.record_id, thread_id=state.thread_id,
        step_number=step_number, generation_count=state.generation,
    ), now)
    # The processor persists the count it reported: the next activation plans against it.
    step.update(pending_message_tokens=pending)
    step.flush_after_status()


# --- model jobs -------------------------------------------------------------------------------
def _job(step: Step, cycle: Cycle, messages: tuple[ChatMessage, ...], *, reflector: bool,
         trigger: str, input_tokens: int, kind: str | None = None,
         extra_settings: dict | None = None) -> ModelJob | str:
    """The job for `cycle`, or the error text when no model may take it (ModelByInputTokens)."""
    state, resolved = step.state, step.config.resolved
    agent = resolved.reflection.model if reflector else resolved.observation.model
    try:
        model = agent.for_input_tokens(input_tokens)
    except ValueError as exc:
        return str(exc)
    fallbacks = None
    if agent.routing == "fallbacks":
        fallbacks = tuple(e.model for e in agent.spec[1:] if e.enabled) or None
    settings = {**agent.settings, **(extra_settings or {})}
    options = agent.provider_options or None
    # An observer request asked again because its answer looped wants another answer.
    sample = 0 if reflector else cycle.level
    config = step.config
    return ModelJob(
        kind=kind or cycle.kind, cycle_id=cycle.cycle_id, memory_key=state.memory_key,
        thread_id=state.thread_id, generation=state.generation,
        cursor=iso(state.cursor) if state.cursor else None, model=model, messages=messages,
        settings=settings, provider_options=options, fallbacks=fallbacks,
        request_hash=request_hash(model, messages, settings, provider_options=options,
                                  fallbacks=fallbacks, sample=sample),
        created_at=cycle.started_at, trigger=trigger, input_tokens=input_tokens,
        sample=sample or None, version=config.version, config_digest=config.digest,
    )


def _outcome_time(step: Step, cycle: Cycle, result: ModelResult) -> tuple[datetime, int]:
    """The cycle's start plus the model call's own duration, so the log does not depend on
    when the worker happened to read the result."""
    duration = max(0, round((result.completed_at - result.started_at).total_seconds() * 1000))
    return step.now(cycle.started_at + timedelta(milliseconds=duration)), duration


_RECENT_ANSWERS = 64  # cycles whose answer was applied, to recognise a job answered twice


def on_result(step: Step, result: ModelResult) -> None:
    """Route a model result to the cycle waiting for it; anything else is recorded and ignored."""
    state = step.state
    for slot, handler in (("in_flight", _blocking_result), ("buffering", _buffer_result),
                          ("reflection_buffering", _reflection_buffer_result)):
        cycle = getattr(state, slot)
        if cycle is not None and cycle.cycle_id == result.cycle_id:
            answered = _with_structured(step, cycle, result, slot)
            if answered is None:
                return
            cycle, result = answered
            step.update(answered=(*state.answered, result.cycle_id)[-_RECENT_ANSWERS:])
            handler(step, cycle, result)
            step.structured = None  # used by the commit, if the answer was committed
            return
    if result.cycle_id in state.answered:
        # The same job answered again (the model agents are at least once: a job re-runs after
        # a crash). Its answer is applied already; an event here would make the log depend on
        # when a worker died, so a redelivery changes nothing, as in an uninterrupted run.
        return
    at = step.now(state.clock or result.completed_at)
    step.emit(ResultIgnored, ResultIgnoredData(
        cycle_id=result.cycle_id, kind=result.kind,
        reason="no cycle waits for this result (a late or duplicate delivery, or superseded)",
    ), at)


def is_overdue(since: datetime | None, at: datetime | None, config: EngineConfig) -> bool:
    """Whether more than `cycleDeadline` of log time passed from `since` to `at` (never, when
    either is unknown: `om simulate` has no log and settles every job anyway)."""
    if since is None or at is None:
        return False
    return at - since > config.cycle_deadline


def expire_overdue(step: Step) -> bool:
    """End the blocking cycle in flight as failed (the caller found it overdue); True if it did.

    The backstop for an answer that never comes (the model agents answer every job, with a
    failure at their own deadline, but a lost record must not hold the memory for good).  It
    reads the log's time only, so a refold decides the same; a result arriving later finds no
    cycle waiting and is recorded as ignored (`on_result`).  A reflection gives up rather than
    climb its ladder: there is no answer to judge.
    """
    cycle = step.state.in_flight
    deadline_ms = step.config.om.cycle_deadline_ms
    if cycle is None:
        return False
    error = f"deadline: no model answer within cycleDeadline ({deadline_ms:g} ms) of the cycle's start"
    if cycle.answer is not None:  # the answer is in; only the structured follow-up is missing
        step.structured = _structured_failed(step, cycle, error)
        _blocking_result(step, cycle.model_copy(update={"answer": None}), cycle.answer)
        step.structured = None
        return True
    if cycle.kind == "reflect":
        done = step.now(cycle.started_at + timedelta(milliseconds=deadline_ms))
        step.update(in_flight=None)
        _reflection_gave_up(step, cycle, error, done, round(deadline_ms))
        return True
    _blocking_result(step, cycle, ModelResult(
        kind=cycle.kind, cycle_id=cycle.cycle_id, memory_key=step.state.memory_key,
        thread_id=step.state.thread_id, request_hash="deadline", ok=False, error=error,
        error_code="deadline", model=cycle.model or "unknown", attempts=0,
        started_at=cycle.started_at, completed_at=cycle.started_at + timedelta(milliseconds=deadline_ms)))
    return True


def _blocking_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    done, duration = _outcome_time(step, cycle, result)
    step.update(in_flight=None)
    if cycle.kind == "reflect":
        _reflection_result(step, cycle, result, done, duration)
    elif cycle.kind == "buffer":  # a buffer the check waited for at blockAfter
        _buffer_result(step, cycle, result)
        resume(step, step.state.clock or done, "before-observe", cycle.step_number)
    else:
        _observation_result(step, cycle, result, done, duration)


# --- observation ------------------------------------------------------------------------------
def _transcript(messages: tuple[PendingMessage, ...], time_zone: str) -> str:
    numbers = AttachmentNumbers()  # [Image #n] / [File #n] count from 1 in every observer call
    # A signal line has no time of its own: the reader takes the previous line's (spec §14).
    return render_transcript(
        (TranscriptLine(None if title == SIGNAL else m.created_at, title, numbers.fill(title, body))
         for m in messages
         for title, body in (m.lines if m.lines is not None
                             else ((m.role.capitalize() if m.title is None else m.title, m.text),))),
        time_zone)


def _observer_request(step: Step, messages: tuple[PendingMessage, ...], *,
                      buffered: bool) -> tuple[ChatMessage, ...]:
    state, config = step.state, step.config
    o = config.resolved.observation
    hints = (o.current_task_hint or o.suggested_response_hint) and not buffered
    previous = state.observations
    if buffered and state.chunks:
        pending = "\n\n".join(c.observations for c in state.chunks)
        previous = f"{previous}\n\n{BUFFERED_SEPARATOR}\n\n{pending}" if previous else pending
    known = state.observation_tokens if previous is state.observations else None
    shown, truncated = truncate_observations(previous, o.previous_observer_tokens,
                                             config.counter.count, known)
    extractors = _extractors(step, "observer")
    user = observer_user_prompt(
        transcript=_transcript(messages, config.om.time_zone),
        previous_observations=shown, truncated=truncated,
        current_task=state.current_task if hints else None,
        suggested_response=state.suggested_response if hints else None,
        prior_values=extraction.prior_values(extractors, state.metadata, state.title),
    ) + extraction.inline_reminder(extractors)
    if buffered:
        user += "\n\nOutput <observations> every time."
    return (
        ChatMessage(role="system", content=_with_inline(observer_system_prompt(
            continuation_hints=bool(hints), instruction=o.instruction), extractors)),
        ChatMessage(role="user", content=observer_user_content(
            user, messages, o.observe_attachments, o.model.name)),
    )


def _start_observation(step: Step, now: datetime, step_number: int | None, *, trigger: str) -> None:
    """A blocking observation of every unobserved message."""
    state = step.state
    messages = state.pending
    tokens = step.pending_tokens
    cycle = Cycle(cycle_id=step.next_cycle_id(), kind="observe", message_ids=state.pending_ids,
                  tokens=tokens, started_at=now, generation=state.generation, phase="observe",
                  step_number=step_number, trigger=trigger)
    step.emit(ObservationStart, ObservationStartData(
        cycle_id=cycle.cycle_id, operation_type="observation", started_at=now,
        tokens_to_observe=tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=step.config.marker_config(state),
    ), now)
    job = _job(step, cycle, _observer_request(step, messages, buffered=False), reflector=False,
               trigger=trigger, input_tokens=tokens)
    if isinstance(job, str):
        _failed(step, cycle, "observation", job, now, 0)
        emit_status(step, now, step_number)
        return
    step.jobs.append(job)
    step.update(in_flight=cycle)


def _failure(step: Step, cycle: Cycle, operation: str, error: str, done: datetime, duration: int,
             *, background: bool) -> BufferingFailedData | ObservationFailedData:
    data = BufferingFailedData if background else ObservationFailedData
    return data(
        cycle_id=cycle.cycle_id, operation_type=operation, failed_at=done, duration_ms=duration,
        tokens_attempted=cycle.tokens, error=error[:2000], record_id=step.record_id,
        thread_id=step.state.thread_id,
    )


def _failed(step: Step, cycle: Cycle, operation: str, error: str, done: datetime, duration: int,
            *, background: bool = False) -> None:
    cls = BufferingFailed if background else ObservationFailed
    step.emit(cls, _failure(step, cycle, operation, error, done, duration, background=background), done)


def _read_observer(result: ModelResult, state: MemoryState,
                   extractors: tuple[Spec, ...] = ()) -> ObserverOutput | str:
    """The parsed answer, or why it cannot be used (the messages then stay for the next cycle).

    Lines that only repeat an observation already in the log (or in a buffered chunk) are
    dropped: a small model tends to write the previous observations out again.  An answer that
    is nothing but such repeats is kept as it is, as before: failing it would retry the cycle
    at every later step, and a small model mostly repeats itself again."""
    if not result.ok:
        return result.error or "model call failed"
    previous = "\n".join([state.observations, *(c.observations for c in state.chunks)])
    answer = extraction.without_sections(result.output or "", extractors)
    parsed = parse_observer_output(answer, previous)
    if not parsed.observations and not parsed.degenerate:
        parsed = parse_observer_output(answer)
    if parsed.degenerate:
        return "Observer produced degenerate output"
    if not parsed.observations:
        return "Observer returned no observations"
    return parsed


def _regenerate(step: Step, cycle: Cycle, result: ModelResult) -> bool:
    """A degenerate (looping) answer is asked for once more (spec §7.7); True if it was."""
    if not result.ok or cycle.level > 0 or not is_degenerate(result.output or ""):
        return False
    again = cycle.model_copy(update={"level": 1})
    messages = tuple(m for m in step.state.pending if m.id in set(cycle.message_ids))
    job = _job(step, again, _observer_request(step, messages, buffered=cycle.kind == "buffer"),
               reflector=False, trigger=cycle.trigger, input_tokens=cycle.tokens)
    if isinstance(job, str):
        return False
    step.jobs.append(job)
    step.update(**{"in_flight" if cycle.kind == "observe" else "buffering": again})
    return True


def _observation_result(step: Step, cycle: Cycle, result: ModelResult, done: datetime,
                        duration: int) -> None:
    if _regenerate(step, cycle, result):
        return
    parsed = _read_observer(result, step.state, _extractors(step, "observer"))
    if isinstance(parsed, str):
        _failed(step, cycle, "observation", parsed, done, duration)
        emit_status(step, done, cycle.step_number)
        return
    _commit_observation(step, cycle, parsed, done, duration, result.output or "")
    resume(step, done, "observe", cycle.step_number)


def _observe_messages(step: Step, message_ids: tuple[str, ...], text: str, cursor: datetime,
                      *, added_tokens: int | None = None) -> None:
    """Append `text` after one boundary line and retire the messages it covers (both paths).

    Spec §3.4: a blocking observation recounts the whole log; an activation adds its chunks'
    own token counts (`added_tokens`), the boundary line costing nothing.
    """
    state, config = step.state, step.config
    covered = set(message_ids)
    joined = append_observations(state.observations, text, iso(cursor))
    tokens = config.counter.count(joined) if added_tokens is None else state.observation_tokens + added_tokens
    step.update(
        observations=joined,
        observation_tokens=tokens,
        cursor=cursor if state.cursor is None or cursor > state.cursor else state.cursor,
        pending=tuple(m for m in state.pending if m.id not in covered),
        # A chunk whose messages are observed some other way is superseded.
        chunks=tuple(c for c in state.chunks if not covered & set(c.message_ids)),
    )
    step.observations_changed = True


def _commit_observation(step: Step, cycle: Cycle, parsed: ObserverOutput, done: datetime,
                        duration: int, raw: str) -> None:
    found = _extract(step, cycle, raw, parsed.observations)
    state, config = step.state, step.config
    covered = set(cycle.message_ids)
    cursor = max(m.created_at for m in state.pending if m.id in covered)
    _observe_messages(step, cycle.message_ids, parsed.observations, cursor)
    step.update(current_task=parsed.current_task, suggested_response=parsed.suggested_response,
                cycles_completed=state.cycles_completed + 1, buffer_boundary=0,
                pending_message_tokens=0)
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens,
        observation_tokens=config.counter.count(parsed.observations), observations=parsed.observations,
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        record_id=step.record_id, thread_id=state.thread_id,
        observed_message_ids=cycle.message_ids, cursor=iso(step.state.cursor),
        generation=state.generation, **_extraction_fields(found),
    ), done)
    _retitle(step, cycle, found, done)


def manual_observe(step: Step, now: datetime) -> None:
    """`om observe`: every unobserved message, now, whatever the thresholds say."""
    if not step.state.pending:
        emit_status(step, now, None)
        return
    _start_observation(step, now, None, trigger="manual")


# --- async buffering (spec §6.2, §6.3) --------------------------------------------------------
def _maybe_buffer(step: Step, now: datetime) -> None:
    state, config = step.state, step.config
    o = config.resolved.observation
    pending = step.pending_tokens
    if state.buffering is not None or not should_trigger_buffer(
            pending, state.buffer_boundary, config.message_threshold(state), o.buffer_tokens):
        return
    # The boundary moves even when nothing is buffered, so the same interval does not retry.
    step.update(buffer_boundary=pending)
    start_buffer(step, now, skip_minimum=False)


def start_buffer(step: Step, now: datetime, *, skip_minimum: bool) -> None:
    """A background observation of the messages no chunk covers yet."""
    state = step.state
    covered = {mid for c in state.chunks for mid in c.message_ids}
    candidates = _safe_prefix(tuple(m for m in state.pending if m.id not in covered), state.pending)
    tokens = count_messages([m.tokens for m in candidates])
    if state.buffering is not None or not enough_to_buffer(
            tokens, step.config.resolved.observation.buffer_tokens, skip_minimum=skip_minimum):
        return
    cycle = Cycle(cycle_id=step.next_cycle_id(), kind="buffer",
                  message_ids=tuple(m.id for m in candidates), tokens=tokens, started_at=now,
                  generation=state.generation, trigger="async-buffer")
    # Running from now on (the step's status says so), announced after that status (Step).
    step.emit_after_status(BufferingStart, BufferingStartData(
        cycle_id=cycle.cycle_id, operation_type="observation", started_at=now,
        tokens_to_buffer=tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=step.config.marker_config(state),
    ), now)
    job = _job(step, cycle, _observer_request(step, candidates, buffered=True), reflector=False,
               trigger="async-buffer", input_tokens=tokens)
    if isinstance(job, str):
        step.emit_after_status(BufferingFailed, _failure(step, cycle, "observation", job, now, 0,
                                                         background=True), now)
        return
    step.jobs.append(job)
    step.update(buffering=cycle)


def _safe_prefix(candidates: tuple[PendingMessage, ...],
                 pending: tuple[PendingMessage, ...]) -> tuple[PendingMessage, ...]:
    """The candidates a buffer may take without cutting a tool exchange in half (spec §6.9)."""
    answered = {a for m in pending for a in m.answers}
    safe = safe_buffer_prefix([
        BufferCandidate(m.id, round(m.created_at.timestamp() * 1000),
                        frozenset(m.calls) | frozenset(m.answers),
                        has_pending_tool_call=bool(set(m.calls) - answered))
        for m in candidates])
    keep = {c.message_id for c in safe}
    return tuple(m for m in candidates if m.id in keep)


def _buffer_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    done, duration = _outcome_time(step, cycle, result)
    step.update(buffering=None)
    if _regenerate(step, cycle, result):
        return
    state = step.state
    parsed = _read_observer(result, state, _extractors(step, "observer"))
    pending_ids = set(state.pending_ids)
    if isinstance(parsed, str) or not set(cycle.message_ids) <= pending_ids:
        reason = parsed if isinstance(parsed, str) else "superseded: its messages were observed meanwhile"
        _failed(step, cycle, "observation", reason, done, duration, background=True)
        return
    # Spec: a buffering end reports the extractors' values as persisted already, before the
    # chunk activates.
    found = _extract(step, cycle, result.output or "", parsed.observations)
    state = step.state
    covered = [m for m in state.pending if m.id in set(cycle.message_ids)]
    chunk = BufferedChunk(
        cycle_id=cycle.cycle_id, observations=parsed.observations,
        tokens=step.config.counter.count(parsed.observations), message_ids=cycle.message_ids,
        message_tokens=cycle.tokens, last_observed_at=max(m.created_at for m in covered),
    )
    chunks = (*state.chunks, chunk)
    # Spec §6.3 step 9: the boundary restarts from the tokens just buffered.
    step.update(chunks=chunks, buffer_boundary=cycle.tokens)
    step.emit(BufferingEnd, BufferingEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_buffered=cycle.tokens,
        buffered_tokens=sum(c.tokens for c in chunks), record_id=step.record_id,
        thread_id=state.thread_id, observations=parsed.observations,
        observed_message_ids=cycle.message_ids, generation=state.generation,
        **_extraction_fields(found),
    ), done)
    _retitle(step, cycle, found, done)


# --- extractors (spec §9) ---------------------------------------------------------------------
def _source(cycle: Cycle) -> extraction.Source:
    return "reflector" if cycle.kind in ("reflect", "buffer-reflection") else "observer"


def _extractors(step: Step, source: extraction.Source) -> tuple[Spec, ...]:
    state = step.state
    return extraction.specs(step.config.om, source, {
        "source": source, "threadId": state.thread_id, "resourceId": state.resource_id,
        "workingMemory": state.working_memory})


def _with_inline(system: str, extractors: tuple[Spec, ...]) -> str:
    """The system prompt, asking for the inline extractors' sections when there are any (a
    prompt without extractors stays byte for byte what it was)."""
    section = extraction.inline_instructions(extractors)
    return f"{system}\n\n{section}" if section else system


def _with_structured(step: Step, cycle: Cycle, result: ModelResult,
                     slot: str) -> tuple[Cycle, ModelResult] | None:
    """The cycle and main answer to apply now, or None while a structured follow-up runs.

    A main answer with structured extractors to run is kept on the cycle, which stays where it
    is (a blocking one keeps holding the memory's inputs), and an `extract` job is emitted; its
    result brings the main answer back with the values (`step.structured`)."""
    if cycle.answer is not None:
        if result.kind != "extract":
            return None  # the main answer delivered again while its follow-up runs
        main = cycle.answer
        extractors = _extractors(step, _source(cycle))
        if result.ok and not cycle.extract_retried and extraction.retry_reason(result.output, extractors):
            job = _extract_job(step, cycle, main, extractors, again=True)
            if job is not None:
                step.jobs.append(job)
                step.update(**{slot: cycle.model_copy(update={"extract_retried": True})})
                return None
        step.structured = extraction.read_structured(
            result.output if result.ok else None, None if result.ok else result.error or "model call failed",
            extractors)
        spent = result.completed_at - result.started_at  # the cycle lasted both calls
        return (cycle.model_copy(update={"answer": None, "extract_retried": False}),
                main.model_copy(update={"completed_at": main.completed_at + spent}))
    if result.kind == "extract":
        return None  # a follow-up for an answer already applied (a redelivery)
    extractors = _extractors(step, _source(cycle))
    if not result.ok or not any(s.mode == "structured" for s in extractors):
        return cycle, result
    job = _extract_job(step, cycle, result, extractors)
    if job is None:
        return cycle, result
    step.jobs.append(job)
    step.update(**{slot: cycle.model_copy(update={"answer": result})})
    return None


def _extract_job(step: Step, cycle: Cycle, result: ModelResult, extractors: tuple[Spec, ...], *,
                 again: bool = False) -> ModelJob | None:
    """The structured follow-up of an answer (`again`: asked once more, for JSON alone), or
    None when the answer will not be committed anyway (it loops or holds no observations) or
    no model may take the job."""
    source = _source(cycle)
    parsed = parse_observer_output(extraction.without_sections(result.output or "", extractors))
    if parsed.degenerate or not parsed.observations:
        return None
    transcript = ""
    if source == "observer":
        covered = set(cycle.message_ids)
        transcript = _transcript(tuple(m for m in step.state.pending if m.id in covered),
                                 step.config.om.time_zone)
    system, user, settings = extraction.structured_request(
        extractors, source=source, observations=parsed.observations, transcript=transcript,
        metadata=step.state.metadata)
    if again:
        user += extraction.JSON_ONLY
    messages = (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))
    job = _job(step, cycle, messages, reflector=source == "reflector", trigger=cycle.trigger,
               input_tokens=cycle.tokens, kind="extract", extra_settings=settings)
    return None if isinstance(job, str) else job


def _structured_failed(step: Step, cycle: Cycle, error: str) -> Extraction:
    return Extraction(failures={s.slug: error for s in _extractors(step, _source(cycle))
                                if s.mode == "structured"})


def _extract(step: Step, cycle: Cycle, raw: str, observations: str) -> Extraction:
    """The committed cycle's values and failures (inline ones from `raw`, structured ones from
    the follow-up), stored in the thread's OM metadata."""
    structured, step.structured = step.structured or Extraction(), None
    source = _source(cycle)
    extractors = _extractors(step, source)
    if not extractors:
        return Extraction()
    state = step.state
    found = extraction.settle(
        extractors, extraction.inline_values(raw, extractors), structured,
        context={"source": source, "threadId": state.thread_id, "resourceId": state.resource_id},
        metadata=state.metadata, raw_observations=observations)
    if found.values:
        step.update(metadata=extraction.store(state.metadata, extractors, found.values))
    if extraction.WORKING_MEMORY in found.values:
        step.update(working_memory=found.values[extraction.WORKING_MEMORY])
    return found


def _extraction_fields(found: Extraction) -> dict:
    """The end event's `extractedValues` / `extractionFailures` (absent when empty)."""
    return {"extracted_values": found.values or None,
            "extraction_failures": tuple(ExtractionFailure(slug=slug, error=error)
                                         for slug, error in found.failures.items()) or None}


def _retitle(step: Step, cycle: Cycle, found: Extraction, at: datetime) -> None:
    """`data-om-thread-update` when the cycle's `thread-title` may replace the title."""
    state = step.state
    title = extraction.title_change(found.values, state.title, state.title_pinned)
    if title is None:
        return
    step.update(title=title)
    step.emit(ThreadUpdate, ThreadUpdateData(
        cycle_id=cycle.cycle_id, thread_id=state.thread_id, old_title=state.title,
        new_title=title, timestamp=at), at)


# --- activation (spec §6.4) -------------------------------------------------------------------
def _activate(step: Step, now: datetime, *, checked: bool, actor_model: str | None) -> None:
    """Move the leading buffered chunks into the log; instant, no model call."""
    state, config = step.state, step.config
    if not state.chunks:
        return
    o = config.resolved.observation
    threshold = config.message_threshold(state)
    ttl = resolve_activation_ttl(o.activate_after_idle, actor_model)
    trigger = "threshold"
    if checked:
        # Whether to activate is decided on the live count (spec §6.4 step 3) ...
        trigger = activation_trigger(
            has_chunks=True, pending_tokens=step.pending_tokens, threshold=threshold, now=now,
            last_activity_at=state.last_activity_at, idle_ttl_ms=ttl,
            activate_on_provider_change=o.activate_on_provider_change,
            actor_model=actor_model, last_model=state.last_model)
        if trigger is None:
            return
    # ... how much, on the count the previous step persisted (step 5).
    current = _persisted_pending(state)
    plan = plan_activation(
        [Chunk(c.cycle_id, c.message_tokens, c.tokens, c.message_ids) for c in state.chunks],
        retention_floor=config.retention_floor(state), pending_tokens=current,
        force_max=force_max_activation(current, o.block_after))
    chosen = state.chunks[:plan.chunk_count]
    _swap_in(step, chosen)
    details = {}
    if trigger == "ttl" and state.last_activity_at is not None:
        idle = to_epoch_ms(now) - to_epoch_ms(state.last_activity_at)
        details = {"last_activity_at": to_epoch_ms(state.last_activity_at),
                   "ttl_expired_ms": max(0, int(idle - (ttl or 0)))}
    elif trigger == "provider_change":
        details = {"previous_model": state.last_model, "current_model": actor_model}
    # One marker per activated chunk (spec §6.4 step 7), all naming the cursor after the swap.
    for chunk in chosen:
        step.emit(Activation, ActivationData(
            cycle_id=chunk.cycle_id, operation_type="observation", activated_at=now,
            chunks_activated=1, tokens_activated=chunk.message_tokens,
            observation_tokens=chunk.tokens, messages_activated=len(chunk.message_ids),
            record_id=step.record_id, thread_id=state.thread_id,
            generation_count=step.state.generation, config=config.marker_config(state),
            observations=chunk.observations, triggered_by=trigger,
            activated_message_ids=chunk.message_ids, cursor=iso(step.state.cursor), **details,
        ), now)
    # Activated chunks carry no hints: the stored ones are cleared (spec §6.4 step 8).
    step.update(current_task=None, suggested_response=None, buffer_boundary=0,
                cycles_completed=step.state.cycles_completed + len(chosen),
                pending_message_tokens=plan.remaining_tokens)


def _persisted_pending(state: MemoryState) -> int:
    """`currentPending` of spec §6.4 step 5: the record's pending count as the previous step
    left it, or, when it is 0, the message tokens of all buffered chunks."""
    return state.pending_message_tokens or sum(c.message_tokens for c in state.chunks)


def _swap_in(step: Step, chosen: tuple[BufferedChunk, ...]) -> None:
    """Spec §3.4: one boundary stamped with the last chunk's cursor, then the chunks' texts
    separated by blank lines; the log's token count grows by the chunks' own counts."""
    step.update(chunks=step.state.chunks[len(chosen):])
    _observe_messages(
        step, tuple(mid for c in chosen for mid in c.message_ids),
        CHUNK_SEPARATOR.join(c.observations for c in chosen), chosen[-1].last_observed_at,
        added_tokens=sum(c.tokens for c in chosen))


# --- reflection (spec §6.7, §6.8, §8.3) -------------------------------------------------------
def _maybe_reflect(step: Step, now: datetime, phase: str, step_number: int | None,
                   actor_model: str | None) -> bool:
    """Reflect if due; True when a blocking reflection now runs."""
    state, config = step.state, step.config
    r = config.resolved.reflection
    threshold = config.reflection_threshold(state, step.pending_tokens)
    ttl = resolve_activation_ttl(r.activate_after_idle, actor_model)
    ttl_expired = ttl is not None and state.last_activity_at is not None and (
        to_epoch_ms(now) - to_epoch_ms(state.last_activity_at) >= ttl)
    provider_changed = r.activate_on_provider_change and did_provider_change(actor_model, state.last_model)
    plan = plan_reflection(
        state.observation_tokens, threshold, async_enabled=config.async_buffering,
        buffer_activation=r.buffer_activation or 0.5, block_after=r.block_after,
        has_buffered_reflection=state.buffered_reflection is not None,
        buffering_in_flight=state.reflection_buffering is not None,
        ttl_expired=ttl_expired, provider_changed=provider_changed,
        suppressed_at=state.reflection_suppressed_at,
    )
    if plan.action == "buffer":
        _start_reflection_buffer(step, now, threshold)
    elif plan.action == "activate_buffered":
        _activate_reflection(step, now, plan.triggered_by or "threshold", threshold)
    elif plan.action == "reflect":
        _start_reflection(step, now, phase=phase, step_number=step_number, trigger="turn-sync")
        return True
    return False


def _reflector_request(step: Step, observations: str, level: int, *, guidance: str | None,
                       hints: bool) -> tuple[ChatMessage, ...]:
    r = step.config.resolved.reflection
    extractors = _extractors(step, "reflector")
    return (
        ChatMessage(role="system", content=_with_inline(reflector_system_prompt(
            continuation_hints=hints, instruction=r.instruction), extractors)),
        ChatMessage(role="user", content=reflector_user_prompt(
            observations=observations, level=level, guidance=guidance, continuation_hints=hints,
            prior_values=extraction.prior_values(extractors, step.state.metadata))
            + extraction.inline_reminder(extractors)),
    )


def _reflection_cycle(step: Step, now: datetime, *, kind: str, level: int, tokens: int,
                      **fields: object) -> Cycle:
    state = step.state
    return Cycle(cycle_id=step.next_cycle_id(), kind=kind, message_ids=(), tokens=tokens,
                 started_at=now, generation=state.generation, level=level,
                 model=step.config.resolved.reflection.model.name, **fields)


def _start_reflection(step: Step, now: datetime, *, phase: str, step_number: int | None,
                      trigger: str, guidance: str | None = None, previous: Cycle | None = None,
                      level: int | None = None) -> None:
    """A blocking reflection of the whole log, or the next rung of its ladder."""
    state, config = step.state, step.config
    start = compression_start_level(config.resolved.reflection.model.name, manual=trigger == "manual")
    carried = {"attempts": previous.attempts, "candidates": previous.candidates,
               "suggested": previous.suggested} if previous else {}
    cycle = _reflection_cycle(
        step, now, kind="reflect", level=start if level is None else level,
        tokens=state.observation_tokens, phase=phase, step_number=step_number, trigger=trigger,
        guidance=guidance,
        target=config.reflection_threshold(state, step.pending_tokens), **carried)
    step.emit(ObservationStart, ObservationStartData(
        cycle_id=cycle.cycle_id, operation_type="reflection", started_at=now,
        tokens_to_observe=cycle.tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=config.marker_config(state),
    ), now)
    r = config.resolved.reflection
    hints = r.current_task_hint or r.suggested_response_hint
    messages = _reflector_request(step, state.observations, cycle.level, guidance=guidance, hints=hints)
    job = _job(step, cycle, messages, reflector=True, trigger=trigger, input_tokens=cycle.tokens)
    if isinstance(job, str):
        _reflection_gave_up(step, cycle, job, now, 0)
        return
    step.jobs.append(job)
    step.update(in_flight=cycle)


def _ladder(step: Step, cycle: Cycle, result: ModelResult):
    """Record this attempt on the cycle and ask the ladder what follows."""
    extractors = _extractors(step, "reflector")
    answer = extraction.without_sections(result.output or "", extractors)
    parsed = parse_observer_output(answer) if result.ok else None
    failed = parsed is None or parsed.degenerate or not parsed.observations
    text = "" if failed else parsed.observations
    tokens = cycle.tokens if failed else step.config.counter.count(text)
    cycle = cycle.model_copy(update={
        "attempts": (*cycle.attempts, (cycle.level, tokens, failed)),
        "candidates": (*cycle.candidates, text),
        "suggested": (*cycle.suggested, None if failed else parsed.suggested_response),
        # Inline extractor values come from the answer that is accepted, whichever it is.
        "raw": (*cycle.raw, result.output or "") if extractors else (),
    })
    start = compression_start_level(cycle.model or "", manual=cycle.trigger == "manual")
    decision = ladder_step([ReflectionAttempt(*a) for a in cycle.attempts], start_level=start,
                           target=cycle.target, input_tokens=cycle.tokens)
    if decision.action == "fail" and parsed is None:
        decision = decision.__class__("fail", message=result.error or decision.message)
    return cycle, decision


def _reflection_result(step: Step, cycle: Cycle, result: ModelResult, done: datetime,
                       duration: int) -> None:
    cycle, decision = _ladder(step, cycle, result)
    if decision.action == "accept":
        i = decision.accepted_index
        _commit_reflection(step, cycle, i, done, duration)
        return
    if decision.action == "retry":
        _failed(step, cycle, "reflection", decision.message or "", done, duration)
        _start_reflection(step, done, phase=cycle.phase, step_number=cycle.step_number,
                          trigger=cycle.trigger, guidance=cycle.guidance, previous=cycle,
                          level=decision.next_level)
    else:
        _reflection_gave_up(step, cycle, decision.message or "reflection failed", done, duration)


def _reflection_gave_up(step: Step, cycle: Cycle, error: str, done: datetime, duration: int) -> None:
    _failed(step, cycle, "reflection", error, done, duration)
    step.update(reflection_suppressed_at=cycle.tokens)
    resume(step, done, cycle.phase, cycle.step_number)


def _new_generation(step: Step, text: str, at: datetime, **changes: object) -> None:
    """The record's next generation; the finished one goes to history.  The messages, the
    cursor and the buffered chunks carry over (normative choice 6)."""
    state, config = step.state, step.config
    finished = Generation(generation=state.generation, record_id=step.record_id,
                          observation_tokens=state.observation_tokens, ended_at=at)
    step.update(generation=state.generation + 1, observations=text,
                observation_tokens=config.counter.count(text), history=(*state.history, finished),
                buffered_reflection=None, reflection_buffering=None, pending_message_tokens=0,
                **changes)
    step.observations_changed = False


def _accepted_answer(step: Step, cycle: Cycle, i: int) -> str:
    """The raw answer of the accepted ladder attempt; a structured follow-up belongs to the
    latest attempt only, so an earlier one's is dropped."""
    if i != len(cycle.attempts) - 1:
        step.structured = None
    return cycle.raw[i] if i < len(cycle.raw) else ""


def _commit_reflection(step: Step, cycle: Cycle, i: int, done: datetime, duration: int) -> None:
    text, suggested = cycle.candidates[i], cycle.suggested[i]
    found = _extract(step, cycle, _accepted_answer(step, cycle, i), text)
    state, config = step.state, step.config
    tokens = config.counter.count(text)
    _new_generation(step, text, done,
                    suggested_response=suggested or state.suggested_response,
                    reflection_suppressed_at=tokens if tokens >= cycle.target else None)
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="reflection", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens, observation_tokens=tokens,
        observations=text, suggested_response=suggested, record_id=step.record_id,
        thread_id=state.thread_id, cursor=iso(state.cursor) if state.cursor else None,
        generation=step.state.generation, **_extraction_fields(found),
    ), done)
    resume(step, done, cycle.phase, cycle.step_number)


def manual_reflect(step: Step, now: datetime, guidance: str | None) -> None:
    """`om reflect`: the whole log, now, starting at compression level 0, with optional guidance."""
    if not step.state.observations:
        emit_status(step, now, None)
        return
    _start_reflection(step, now, phase="after-observe", step_number=None, trigger="manual",
                      guidance=guidance)


def _start_reflection_buffer(step: Step, now: datetime, threshold: int) -> None:
    state, config = step.state, step.config
    r = config.resolved.reflection
    piece = buffered_reflection_slice(state.observations, state.observation_tokens, threshold,
                                      r.buffer_activation or 0.5)
    if piece.line_count == 0:
        return
    start = compression_start_level(r.model.name)
    cycle = _reflection_cycle(step, now, kind="buffer-reflection", level=start,
                              tokens=piece.estimated_tokens, trigger="async-buffer",
                              target=piece.target_tokens,
                              line_count=piece.line_count)
    step.emit(BufferingStart, BufferingStartData(
        cycle_id=cycle.cycle_id, operation_type="reflection", started_at=now,
        tokens_to_buffer=cycle.tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=config.marker_config(state),
    ), now)
    job = _job(step, cycle, _reflector_request(step, piece.text, cycle.level, guidance=None, hints=False),
               reflector=True, trigger="async-buffer", input_tokens=cycle.tokens)
    if isinstance(job, str):
        _failed(step, cycle, "reflection", job, now, 0, background=True)
        return
    step.jobs.append(job)
    step.update(reflection_buffering=cycle)


def _reflection_buffer_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    done, duration = _outcome_time(step, cycle, result)
    step.update(reflection_buffering=None)
    if cycle.generation != step.state.generation:
        _failed(step, cycle, "reflection", "superseded: the log was reflected meanwhile", done,
                duration, background=True)
        return
    cycle, decision = _ladder(step, cycle, result)
    if decision.action == "retry":
        _failed(step, cycle, "reflection", decision.message or "", done, duration, background=True)
        state = step.state
        piece_text = "\n".join(state.observations.split("\n")[:cycle.line_count])
        retry = cycle.model_copy(update={"cycle_id": step.next_cycle_id(), "level": decision.next_level,
                                         "started_at": done})
        step.emit(BufferingStart, BufferingStartData(
            cycle_id=retry.cycle_id, operation_type="reflection", started_at=done,
            tokens_to_buffer=retry.tokens, record_id=step.record_id, thread_id=state.thread_id,
            thread_ids=(state.thread_id,), config=step.config.marker_config(state),
        ), done)
        job = _job(step, retry, _reflector_request(step, piece_text, retry.level, guidance=None, hints=False),
                   reflector=True, trigger="async-buffer", input_tokens=retry.tokens)
        if isinstance(job, str):
            _failed(step, retry, "reflection", job, done, 0, background=True)
            return
        step.jobs.append(job)
        step.update(reflection_buffering=retry)
        return
    if decision.action == "fail":
        _failed(step, cycle, "reflection", decision.message or "", done, duration, background=True)
        return
    i = decision.accepted_index
    text, tokens = cycle.candidates[i], cycle.attempts[i][1]
    found = _extract(step, cycle, _accepted_answer(step, cycle, i), text)
    step.update(buffered_reflection=BufferedReflection(
        cycle_id=cycle.cycle_id, text=text, tokens=tokens, input_tokens=cycle.tokens,
        line_count=cycle.line_count, suggested_response=cycle.suggested[i]))
    step.emit(BufferingEnd, BufferingEndData(
        cycle_id=cycle.cycle_id, operation_type="reflection", completed_at=done,
        duration_ms=duration, tokens_buffered=cycle.tokens, buffered_tokens=tokens,
        record_id=step.record_id, thread_id=step.state.thread_id, observations=text,
        generation=step.state.generation, **_extraction_fields(found),
    ), done)


def _activate_reflection(step: Step, now: datetime, trigger: str, threshold: int) -> None:
    """Swap a buffered reflection in: it replaces the lines it covered, later lines stay."""
    state, config = step.state, step.config
    buffered = state.buffered_reflection
    if buffered is None:
        return
    merged = merge_buffered_reflection(state.observations, buffered.text, buffered.line_count)
    tail = "\n".join(state.observations.split("\n")[buffered.line_count:])
    if buffered_reflection_suppressed(
            trigger, tail_tokens=config.counter.count(tail), buffered_reflection_tokens=buffered.tokens,
            combined_tokens=config.counter.count(merged), threshold=threshold,
            buffer_activation=config.resolved.reflection.buffer_activation or 0.5):
        return
    before = state.observation_tokens
    _new_generation(step, merged, now,
                    suggested_response=buffered.suggested_response or state.suggested_response)
    step.emit(Activation, ActivationData(
        cycle_id=buffered.cycle_id, operation_type="reflection", activated_at=now,
        chunks_activated=1, tokens_activated=before, observation_tokens=step.state.observation_tokens,
        messages_activated=0, record_id=step.record_id, thread_id=state.thread_id,
        generation_count=step.state.generation, config=config.marker_config(state),
        observations=merged, triggered_by=trigger,
        cursor=iso(state.cursor) if state.cursor else None,
    ), now)
