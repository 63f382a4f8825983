"""Reflection (spec §6.7, §6.8, §8.3): condensing the observation log into a new generation.

`maybe_reflect` asks `reflection_plan` what is due: a blocking reflection of the whole log, a
background reflection of its oldest lines, or swapping a finished background one in.  A
reflection climbs the compression ladder until its answer fits under the target; a blocking one
that gives up is suppressed until the log changes.  The functions that end a blocking
reflection say whether the check it held goes on; `check` (or `results`) resumes it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from omstream.schemas.base import iso
from omstream.schemas.events import (
    Activation,
    ActivationData,
    BufferingEnd,
    BufferingEndData,
    BufferingStart,
    BufferingStartData,
    ObservationEnd,
    ObservationEndData,
    ObservationStart,
    ObservationStartData,
)
from omstream.schemas.jobs import ChatMessage, JobTrigger, ModelResult

from ..prompting.groups import combine_ranges, group_id, group_safe_line_count, parse_groups, strip_groups, wrap_group
from ..prompting.parsing import parse_observer_output
from ..prompting.prompts import reflector_system_prompt, reflector_user_prompt
from ..prompting.resource_groups import resource_reflection_groups
from ..prompting.thread_answers import parse_reflection_sections
from ..rules import extraction
from ..rules.activation import did_provider_change, idle_expired, resolve_activation_ttl
from ..rules.reflection_plan import (
    LadderStep,
    ReflectionAttempt,
    ReflectionTrigger,
    buffered_reflection_slice,
    buffered_reflection_suppressed,
    compression_start_level,
    ladder_step,
    merge_buffered_reflection,
    plan_reflection,
    suppression_after_commit,
    suppression_after_failure,
)
from ..rules.resource import is_resource
from ..rules.thresholds import reflection_buffer_activation
from ..state import BufferedReflection, Cycle, CycleKind, Generation, Phase
from ..step import Step
from .extracting import extract, extraction_fields, extractors, with_inline
from .jobs import failed, model_job, outcome_time
from .status import emit_status

__all__ = ["manual_reflect", "maybe_reflect", "reflection_buffer_result", "reflection_gave_up",
           "reflection_result"]


def maybe_reflect(step: Step, now: datetime, phase: Phase, step_number: int | None,
                  actor_model: str | None) -> bool:
    """Reflect if due; True when a blocking reflection now runs."""
    state, config = step.state, step.config
    r = config.resolved.reflection
    threshold = config.reflection_threshold(state, step.pending_tokens)
    ttl = resolve_activation_ttl(r.activate_after_idle, actor_model)
    provider_changed = r.activate_on_provider_change and did_provider_change(actor_model, state.last_model)
    plan = plan_reflection(
        state.observation_tokens, threshold, async_enabled=config.resolved.async_buffering,
        buffer_activation=reflection_buffer_activation(r.buffer_activation), block_after=r.block_after,
        has_buffered_reflection=state.buffered_reflection is not None,
        buffering_in_flight=state.reflection_buffering is not None,
        ttl_expired=idle_expired(now, state.last_activity_at, ttl), provider_changed=provider_changed,
        suppressed_at=state.reflection_suppressed_at,
    )
    if plan.action == "buffer":
        _start_reflection_buffer(step, now, threshold)
    elif plan.action == "activate_buffered":
        _activate_reflection(step, now, plan.triggered_by or "threshold", threshold)
    elif plan.action == "reflect":
        # When no model may take it, the reflection gave up at once and the check goes on.
        return _start_reflection(step, now, phase=phase, step_number=step_number, trigger="turn-sync")
    return False


def _reflector_request(step: Step, observations: str, level: int, *, guidance: str | None,
                       hints: bool) -> tuple[ChatMessage, ...]:
    r = step.config.resolved.reflection
    specs = extractors(step, "reflector")
    return (
        ChatMessage(role="system", content=with_inline(reflector_system_prompt(
            continuation_hints=hints, instruction=r.instruction,
            multi_thread=is_resource(step.config), example=not r.model.constrained), specs)),
        ChatMessage(role="user", content=reflector_user_prompt(
            observations=strip_groups(observations), level=level, guidance=guidance, continuation_hints=hints,
            prior_values=extraction.prior_values(specs, step.state.metadata))
            + extraction.inline_reminder(specs)),
    )


def _reflection_cycle(step: Step, now: datetime, *, kind: CycleKind, level: int, tokens: int,
                      **fields: Any) -> Cycle:
    state = step.state
    return Cycle(cycle_id=step.next_cycle_id(), kind=kind, message_ids=(), tokens=tokens,
                 started_at=now, generation=state.generation, level=level,
                 model=step.config.resolved.reflection.model.name, **fields)


def _start_reflection(step: Step, now: datetime, *, phase: Phase, step_number: int | None,
                      trigger: JobTrigger, guidance: str | None = None, previous: Cycle | None = None,
                      level: int | None = None) -> bool:
    """A blocking reflection of the whole log, or the next rung of its ladder; True when it
    runs, False when it gave up at once (no model may take it)."""
    state, config = step.state, step.config
    start = compression_start_level(config.resolved.reflection.model.name, manual=trigger == "manual")
    carried: dict[str, Any] = {"attempts": previous.attempts, "candidates": previous.candidates,
                               "suggested": previous.suggested, "usage": previous.usage,
                               "provider_metadata": previous.provider_metadata,
                               "ladder_of": previous.hook_id} if previous else {}
    cycle = _reflection_cycle(
        step, now, kind="reflect", level=start if level is None else level,
        tokens=state.observation_tokens, phase=phase, step_number=step_number, trigger=trigger,
        guidance=guidance,
        target=config.reflection_threshold(state, step.pending_tokens), **carried)
    step.emit(ObservationStart, ObservationStartData(
        cycle_id=cycle.cycle_id, operation_type="reflection", started_at=now,
        tokens_to_observe=cycle.tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=config.marker_config(state),
    ), now, cycle=cycle)
    r = config.resolved.reflection
    hints = r.current_task_hint or r.suggested_response_hint
    messages = _reflector_request(step, state.observations, cycle.level, guidance=guidance, hints=hints)
    job = model_job(step, cycle, messages, reflector=True, trigger=trigger, input_tokens=cycle.tokens)
    if isinstance(job, str):
        reflection_gave_up(step, cycle, job, now, 0)
        return False
    step.jobs.append(job)
    step.update(in_flight=cycle)
    return True


def _ladder(step: Step, cycle: Cycle, result: ModelResult) -> tuple[Cycle, LadderStep]:
    """Record this attempt on the cycle and ask the ladder what follows."""
    specs = extractors(step, "reflector")
    answer = extraction.without_sections(result.output or "", specs)
    # A resource memory's reflection keeps its thread sections (spec §8.1).
    parse = parse_reflection_sections if is_resource(step.config) else parse_observer_output
    parsed = parse(answer) if result.ok else None
    usable = parsed if parsed is not None and not parsed.degenerate and parsed.observations else None
    text = usable.observations if usable else ""
    tokens = step.config.counter.count(text) if usable else cycle.tokens
    cycle = cycle.model_copy(update={
        "attempts": (*cycle.attempts, (cycle.level, tokens, usable is None)),
        "candidates": (*cycle.candidates, text),
        "suggested": (*cycle.suggested, usable.suggested_response if usable else None),
        # Inline extractor values come from the answer that is accepted, whichever it is.
        "raw": (*cycle.raw, result.output or "") if specs else (),
    })
    start = compression_start_level(cycle.model or "", manual=cycle.trigger == "manual")
    decision = ladder_step([ReflectionAttempt(*a) for a in cycle.attempts], start_level=start,
                           target=cycle.target, input_tokens=cycle.tokens)
    if decision.action == "fail" and parsed is None:
        decision = LadderStep("fail", message=result.error or decision.message)
    return cycle, decision


def _accepted(decision: LadderStep) -> int:
    index = decision.accepted_index
    assert index is not None, "the ladder names the attempt it accepts"
    return index


def reflection_result(step: Step, cycle: Cycle, result: ModelResult, done: datetime, duration: int) -> bool:
    """Apply a blocking reflection's answer; True when the reflection is over (committed or
    given up) and the check it held goes on, False while the ladder's next rung runs."""
    cycle, decision = _ladder(step, cycle, result)
    if decision.action == "accept":
        _commit_reflection(step, cycle, _accepted(decision), done, duration)
        return True
    if decision.action == "retry":
        failed(step, cycle, "reflection", decision.message or "", done, duration, rung=True)
        return not _start_reflection(step, done, phase=cycle.phase, step_number=cycle.step_number,
                                     trigger=cycle.trigger, guidance=cycle.guidance, previous=cycle,
                                     level=decision.next_level)
    reflection_gave_up(step, cycle, decision.message or "reflection failed", done, duration)
    return True


def reflection_gave_up(step: Step, cycle: Cycle, error: str, done: datetime, duration: int) -> None:
    """A blocking reflection failed: reported, and not retried until the log changes.  The
    caller resumes the check it held."""
    failed(step, cycle, "reflection", error, done, duration)
    step.update(reflection_suppressed_at=suppression_after_failure(cycle.tokens))


def _new_generation(step: Step, text: str, at: datetime, **changes: Any) -> None:
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


def _reflection_group(step: Step, cycle: Cycle, text: str, source: str) -> str:
    """With retrieval on, a reflection is one group spanning the groups it condensed (spec §12);
    a log written before retrieval was turned on has none, and its reflection stays bare."""
    if step.config.resolved.retrieval is None:
        return text
    if is_resource(step.config):  # per thread section (resource_groups)
        return resource_reflection_groups(text, source, step.state.memory_key, cycle.cycle_id)
    sources = parse_groups(source)
    if not sources or not text.strip():
        return text
    return wrap_group(text, group_id(step.state.memory_key, cycle.cycle_id), combine_ranges(sources),
                      kind="reflection")


def _commit_reflection(step: Step, cycle: Cycle, i: int, done: datetime, duration: int) -> None:
    text, suggested = cycle.candidates[i], cycle.suggested[i]
    found = extract(step, cycle, _accepted_answer(step, cycle, i), text)
    text = _reflection_group(step, cycle, text, step.state.observations)
    state, config = step.state, step.config
    tokens = config.counter.count(text)
    _new_generation(step, text, done,
                    suggested_response=suggested or state.suggested_response,
                    reflection_suppressed_at=suppression_after_commit(tokens, cycle.target))
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="reflection", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens, observation_tokens=tokens,
        observations=text, suggested_response=suggested, record_id=step.record_id,
        thread_id=state.thread_id, cursor=iso(state.cursor) if state.cursor else None,
        generation=step.state.generation, **extraction_fields(found),
    ), done, cycle=cycle)


def manual_reflect(step: Step, now: datetime, guidance: str | None) -> None:
    """`om reflect`: the whole log, now, starting at compression level 0, with optional guidance."""
    if step.state.observations and _start_reflection(
            step, now, phase="after-observe", step_number=None, trigger="manual", guidance=guidance):
        return
    emit_status(step, now, None)  # nothing to reflect, or it gave up at once


# --- in the background (spec §6.8) -------------------------------------------------------------
def _start_reflection_buffer(step: Step, now: datetime, threshold: int) -> None:
    state, config = step.state, step.config
    r = config.resolved.reflection
    piece = buffered_reflection_slice(state.observations, state.observation_tokens, threshold,
                                      reflection_buffer_activation(r.buffer_activation))
    if piece.line_count == 0:
        return
    if config.resolved.retrieval is not None:  # never half a group
        count = group_safe_line_count(state.observations, piece.line_count)
        piece = replace(piece, line_count=count, text="\n".join(state.observations.split("\n")[:count]))
    start = compression_start_level(r.model.name)
    cycle = _reflection_cycle(step, now, kind="buffer-reflection", level=start,
                              tokens=piece.estimated_tokens, trigger="async-buffer",
                              target=piece.target_tokens,
                              line_count=piece.line_count)
    _buffer_reflection(step, cycle, piece.text, now)


def _buffer_reflection(step: Step, cycle: Cycle, text: str, now: datetime) -> None:
    """Announce a background reflection of `text` (the log's leading lines) and send its job."""
    state = step.state
    step.emit(BufferingStart, BufferingStartData(
        cycle_id=cycle.cycle_id, operation_type="reflection", started_at=now,
        tokens_to_buffer=cycle.tokens, record_id=step.record_id, thread_id=state.thread_id,
        thread_ids=(state.thread_id,), config=step.config.marker_config(state),
    ), now, cycle=cycle)
    job = model_job(step, cycle, _reflector_request(step, text, cycle.level, guidance=None, hints=False),
                    reflector=True, trigger="async-buffer", input_tokens=cycle.tokens)
    if isinstance(job, str):
        failed(step, cycle, "reflection", job, now, 0, background=True)
        return
    step.jobs.append(job)
    step.update(reflection_buffering=cycle)


def reflection_buffer_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    """File a background reflection's answer (or climb its ladder, or record its failure)."""
    done, duration = outcome_time(step, cycle, result)
    step.update(reflection_buffering=None)
    if cycle.generation != step.state.generation:
        failed(step, cycle, "reflection", "superseded: the log was reflected meanwhile", done,
               duration, background=True)
        return
    cycle, decision = _ladder(step, cycle, result)
    if decision.action == "retry":
        failed(step, cycle, "reflection", decision.message or "", done, duration, background=True, rung=True)
        piece_text = "\n".join(step.state.observations.split("\n")[:cycle.line_count])
        retry = cycle.model_copy(update={"cycle_id": step.next_cycle_id(), "level": decision.next_level,
                                         "started_at": done, "ladder_of": cycle.hook_id})
        _buffer_reflection(step, retry, piece_text, done)
        return
    if decision.action == "fail":
        failed(step, cycle, "reflection", decision.message or "", done, duration, background=True)
        return
    i = _accepted(decision)
    text, tokens = cycle.candidates[i], cycle.attempts[i][1]
    found = extract(step, cycle, _accepted_answer(step, cycle, i), text)
    source = "\n".join(step.state.observations.split("\n")[:cycle.line_count])
    grouped_text = _reflection_group(step, cycle, text, source)
    if grouped_text is not text:
        text, tokens = grouped_text, step.config.counter.count(grouped_text)
    step.update(buffered_reflection=BufferedReflection(
        cycle_id=cycle.cycle_id, text=text, tokens=tokens, input_tokens=cycle.tokens,
        line_count=cycle.line_count, suggested_response=cycle.suggested[i]))
    step.emit(BufferingEnd, BufferingEndData(
        cycle_id=cycle.cycle_id, operation_type="reflection", completed_at=done,
        duration_ms=duration, tokens_buffered=cycle.tokens, buffered_tokens=tokens,
        record_id=step.record_id, thread_id=step.state.thread_id, observations=text,
        generation=step.state.generation, **extraction_fields(found),
    ), done, cycle=cycle)


def _activate_reflection(step: Step, now: datetime, trigger: ReflectionTrigger, threshold: int) -> None:
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
            buffer_activation=reflection_buffer_activation(config.resolved.reflection.buffer_activation)):
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
