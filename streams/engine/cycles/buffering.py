"""Async buffering (spec §6.2, §6.3): background observations that become chunks.

A buffer observes the messages no chunk covers yet while the conversation goes on; it never
holds the memory's inputs.  Its answer lands in `state.chunks` and waits there for an
activation (`activating`).  When to buffer is `thresholds`' arithmetic (the interval, the
minimum, the safe prefix); this module starts the cycle and files its answer.
"""

from __future__ import annotations

from datetime import datetime

from omstream.schemas.events import BufferingEnd, BufferingEndData, BufferingFailed, BufferingStart, BufferingStartData
from omstream.schemas.jobs import ModelResult

from ..prompting.groups import grouped
from ..prompting.observation_times import check_messages
from ..rules.thresholds import BufferCandidate, enough_to_buffer, safe_buffer_prefix, should_trigger_buffer
from ..rules.tokens import count_messages
from ..state import BufferedChunk, Cycle, PendingMessage
from ..step import Step
from .extracting import extract, extraction_fields, extractors, retitle
from .jobs import failed, failure, model_job, outcome_time
from .observing import observer_request, read_observer, regenerate

__all__ = ["buffer_result", "maybe_buffer", "start_buffer"]


def maybe_buffer(step: Step, now: datetime) -> None:
    """Start a buffer when the pending tokens crossed into a new interval since the last one."""
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
    ), now, cycle=cycle)
    job = model_job(step, cycle, observer_request(step, candidates, buffered=True), reflector=False,
                    trigger="async-buffer", input_tokens=tokens)
    if isinstance(job, str):
        step.emit_after_status(BufferingFailed, failure(step, cycle, "observation", job, now, 0,
                                                        background=True), now, cycle=cycle)
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


def buffer_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    """File a buffer's answer as the next chunk (or record why it cannot be used)."""
    done, duration = outcome_time(step, cycle, result)
    step.update(buffering=None)
    if regenerate(step, cycle, result):
        return
    state = step.state
    parsed = read_observer(result, state, extractors(step, "observer"))
    pending_ids = set(state.pending_ids)
    if isinstance(parsed, str) or not set(cycle.message_ids) <= pending_ids:
        reason = parsed if isinstance(parsed, str) else "superseded: its messages were observed meanwhile"
        failed(step, cycle, "observation", reason, done, duration, background=True)
        return
    # Spec: a buffering end reports the extractors' values as persisted already, before the
    # chunk activates.
    covered = [m for m in state.pending if m.id in set(cycle.message_ids)]
    # Dates and times held to the buffered messages before anything reads the observations.
    checked = check_messages(parsed.observations, covered, step.config.om.time_zone)
    found = extract(step, cycle, result.output or "", checked.text)
    state = step.state
    text = grouped(step.config.resolved.retrieval is not None, state.memory_key, cycle.cycle_id, covered,
                   checked.text)
    chunk = BufferedChunk(
        cycle_id=cycle.cycle_id, observations=text,
        tokens=step.config.counter.count(text), message_ids=cycle.message_ids,
        message_tokens=cycle.tokens, last_observed_at=max(m.created_at for m in covered),
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
    )
    chunks = (*state.chunks, chunk)
    # Spec §6.3 step 9: the boundary restarts from the tokens just buffered.
    step.update(chunks=chunks, buffer_boundary=cycle.tokens)
    step.emit(BufferingEnd, BufferingEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_buffered=cycle.tokens,
        buffered_tokens=sum(c.tokens for c in chunks), record_id=step.record_id,
        thread_id=state.thread_id, observations=text,
        observed_message_ids=cycle.message_ids, generation=state.generation,
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        times_corrected=checked.count or None, **extraction_fields(found),
    ), done, cycle=cycle)
    retitle(step, cycle, found, done)
