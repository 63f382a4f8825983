"""Observation (spec §7): the observer's request, the blocking observation, and reading and
committing an observer's answer.

A blocking observation covers every unobserved message and holds the memory's later inputs
until its answer is in; its result tells the check to go on (`check.resume`).  The same
request and answer rules serve the background observations of `buffering`.
"""

from __future__ import annotations

from datetime import datetime

from omstream.schemas.base import iso
from omstream.schemas.events import ObservationEnd, ObservationEndData, ObservationStart, ObservationStartData
from omstream.schemas.jobs import ChatMessage, JobTrigger, ModelResult

from ..prompting.groups import grouped, strip_groups
from ..prompting.observation_times import check_messages
from ..prompting.observations import append_observations
from ..prompting.observer_attachments import observer_user_content
from ..prompting.parsing import ObserverOutput, is_degenerate, parse_observer_output
from ..prompting.prompts import observer_system_prompt, observer_user_prompt
from ..prompting.transcript import observer_transcript
from ..prompting.truncation import truncate_observations, with_pending_reflection
from ..rules import extraction
from ..rules.extraction import Spec
from ..rules.resource import is_resource
from ..state import Cycle, MemoryState, PendingMessage
from ..step import Step
from .extracting import extract, extraction_fields, extractors, retitle, with_inline
from .jobs import failed, model_job
from .multi_observing import start_resource_observation
from .status import emit_status

__all__ = ["BUFFERED_SEPARATOR", "manual_observe", "observation_result", "observe_messages", "observer_request",
           "read_observer", "regenerate", "start_observation"]

BUFFERED_SEPARATOR = "--- BUFFERED (pending activation) ---"


def observer_request(step: Step, messages: tuple[PendingMessage, ...], *,
                     buffered: bool) -> tuple[ChatMessage, ...]:
    """The observer's system and user messages for `messages` (a background observation also
    shows the buffered chunks, so it does not observe them again)."""
    state, config = step.state, step.config
    o = config.resolved.observation
    # Buffered observations ask for the hints too: the chunk keeps them until it activates.
    hints = o.current_task_hint or o.suggested_response_hint
    previous = with_pending_reflection(state.observations, o.previous_observer_tokens, state.buffered_reflection)
    if buffered and state.chunks:
        pending = "\n\n".join(c.observations for c in state.chunks)
        previous = f"{previous}\n\n{BUFFERED_SEPARATOR}\n\n{pending}" if previous else pending
    known = state.observation_tokens if previous is state.observations else None
    if "observation-group" in previous:  # the observer reads the log without group tags
        previous, known = strip_groups(previous), None
    shown, truncated = truncate_observations(previous, o.previous_observer_tokens,
                                             config.counter.count, known)
    specs = extractors(step, "observer")
    user = observer_user_prompt(
        transcript=observer_transcript(messages, config.om.time_zone),
        previous_observations=shown, truncated=truncated,
        current_task=state.current_task if hints else None,
        suggested_response=state.suggested_response if hints else None,
        prior_values=extraction.prior_values(specs, state.metadata, state.title),
    ) + extraction.inline_reminder(specs)
    if buffered:
        user += "\n\nOutput <observations> every time."
    content = observer_user_content(user, messages, o.observe_attachments, o.model.name,
                                    capability=config.takes_attachments)
    return (
        ChatMessage(role="system", content=with_inline(observer_system_prompt(
            continuation_hints=bool(hints), instruction=o.instruction, example=not o.model.constrained), specs)),
        # Validated as the wire reads it: forwarded attachments are litellm's content parts.
        ChatMessage.model_validate({"role": "user", "content": content}),
    )


def start_observation(step: Step, now: datetime, step_number: int | None, *, trigger: JobTrigger) -> None:
    """A blocking observation of every unobserved message (in resource scope, of the threads
    `resource.plan_batches` picks)."""
    if is_resource(step.config):
        start_resource_observation(step, now, step_number, trigger=trigger)
        return
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
    ), now, cycle=cycle)
    job = model_job(step, cycle, observer_request(step, messages, buffered=False), reflector=False,
                    trigger=trigger, input_tokens=tokens)
    if isinstance(job, str):
        failed(step, cycle, "observation", job, now, 0)
        emit_status(step, now, step_number)
        return
    step.jobs.append(job)
    step.update(in_flight=cycle)


def read_observer(result: ModelResult, state: MemoryState, specs: tuple[Spec, ...] = ()) -> ObserverOutput | str:
    """The parsed answer, or why it cannot be used (the messages then stay for the next cycle).

    Lines that only repeat an observation already in the log (or in a buffered chunk) are
    dropped: a small model tends to write the previous observations out again.  An answer that
    is nothing but such repeats is kept as it is, as before: failing it would retry the cycle
    at every later step, and a small model mostly repeats itself again."""
    if not result.ok:
        return result.error or "model call failed"
    previous = "\n".join([state.observations, *(c.observations for c in state.chunks)])
    answer = extraction.without_sections(result.output or "", specs)
    parsed = parse_observer_output(answer, previous)
    if not parsed.observations and not parsed.degenerate:
        parsed = parse_observer_output(answer)
    if parsed.degenerate:
        return "Observer produced degenerate output"
    if not parsed.observations:
        return "Observer returned no observations"
    return parsed


def regenerate(step: Step, cycle: Cycle, result: ModelResult) -> bool:
    """A degenerate (looping) answer is asked for once more (spec §7.7); True if it was."""
    if not result.ok or cycle.level > 0 or not is_degenerate(result.output or ""):
        return False
    again = cycle.model_copy(update={"level": 1})
    messages = tuple(m for m in step.state.pending if m.id in set(cycle.message_ids))
    job = model_job(step, again, observer_request(step, messages, buffered=cycle.kind == "buffer"),
                    reflector=False, trigger=cycle.trigger, input_tokens=cycle.tokens)
    if isinstance(job, str):
        return False
    step.jobs.append(job)
    step.update(**{"in_flight" if cycle.kind == "observe" else "buffering": again})
    return True


def observation_result(step: Step, cycle: Cycle, result: ModelResult, done: datetime, duration: int) -> bool:
    """Apply a blocking observation's answer; True when it was committed and the check it held
    goes on after its observe phase (otherwise the messages wait and the status is reported,
    or the answer is asked for again)."""
    if regenerate(step, cycle, result):
        return False
    parsed = read_observer(result, step.state, extractors(step, "observer"))
    if isinstance(parsed, str):
        failed(step, cycle, "observation", parsed, done, duration)
        emit_status(step, done, cycle.step_number)
        return False
    _commit_observation(step, cycle, parsed, done, duration, result.output or "")
    return True


def observe_messages(step: Step, message_ids: tuple[str, ...], text: str, cursor: datetime,
                     *, added_tokens: int | None = None) -> datetime:
    """Append `text` after one boundary line and retire the messages it covers (both paths);
    the memory's cursor after it (it never goes back).

    Spec §3.4: a blocking observation recounts the whole log; an activation adds its chunks'
    own token counts (`added_tokens`), the boundary line costing nothing.
    """
    state, config = step.state, step.config
    covered = set(message_ids)
    joined = append_observations(state.observations, text, iso(cursor))
    tokens = config.counter.count(joined) if added_tokens is None else state.observation_tokens + added_tokens
    moved = cursor if state.cursor is None or cursor > state.cursor else state.cursor
    step.update(
        observations=joined,
        observation_tokens=tokens,
        cursor=moved,
        pending=tuple(m for m in state.pending if m.id not in covered),
        # A chunk whose messages are observed some other way is superseded.
        chunks=tuple(c for c in state.chunks if not covered & set(c.message_ids)),
    )
    step.observations_changed = True
    return moved


def _commit_observation(step: Step, cycle: Cycle, parsed: ObserverOutput, done: datetime,
                        duration: int, raw: str) -> None:
    covered = set(cycle.message_ids)
    observed = [m for m in step.state.pending if m.id in covered]
    # Dates and times held to the observed messages before anything reads the observations.
    checked = check_messages(parsed.observations, observed, step.config.om.time_zone)
    found = extract(step, cycle, raw, checked.text)
    state, config = step.state, step.config
    text = grouped(config.resolved.retrieval is not None, state.memory_key, cycle.cycle_id, observed,
                   checked.text)
    cursor = observe_messages(step, cycle.message_ids, text, max(m.created_at for m in observed))
    step.update(current_task=parsed.current_task, suggested_response=parsed.suggested_response,
                cycles_completed=state.cycles_completed + 1, buffer_boundary=0,
                pending_message_tokens=0)
    step.emit(ObservationEnd, ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_observed=cycle.tokens,
        observation_tokens=config.counter.count(text), observations=text,
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        record_id=step.record_id, thread_id=state.thread_id,
        observed_message_ids=cycle.message_ids, cursor=iso(cursor), generation=state.generation,
        times_corrected=checked.count or None, **extraction_fields(found),
    ), done, cycle=cycle)
    retitle(step, cycle, found, done)


def manual_observe(step: Step, now: datetime) -> None:
    """`om observe`: every unobserved message, now, whatever the thresholds say."""
    if not step.state.pending:
        emit_status(step, now, None)
        return
    start_observation(step, now, None, trigger="manual")
