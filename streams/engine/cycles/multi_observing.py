"""A resource memory's observation: several threads, one cycle, one job per batch (spec §6.10).

The cycle covers the threads `resource.plan_batches` picks; each batch is one multi-thread
observer job (id `<cycle_id>/<n>`), all sent at once, so the model agent runs them side by side.
The memory holds its later inputs until every batch has answered, then commits the answers in
batch order, never in arrival order: the memory is a function of the log alone, and no thread
of the resource can be observed twice, whatever order its threads' messages arrive in.

Every thread gets its own `data-om-observation-start` / `-end` pair (the shared cycle id,
`threadIds` naming all the cycle's threads); its observations become a `<thread id>` section of
the log, merged by date (`sections.merge_section`).  With retrieval on, that thread's new
observations are one observation group inside its section (spec §12): its range names the
thread's observed messages, its id is drawn from the cycle and the thread, so two threads of one
cycle never share an id.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from omstream.schemas.base import iso
from omstream.schemas.events import (
    ObservationEnd,
    ObservationEndData,
    ObservationFailed,
    ObservationStart,
    ObservationStartData,
    ThreadUpdate,
    ThreadUpdateData,
)
from omstream.schemas.jobs import ChatMessage, JobTrigger, ModelJob, ModelResult

from ..prompting.groups import grouped, strip_groups, thread_cycle
from ..prompting.observation_times import check_messages
from ..prompting.observer_attachments import observer_user_content
from ..prompting.parsing import ObserverOutput, is_degenerate
from ..prompting.prompts import observer_system_prompt, observer_user_prompt
from ..prompting.sections import merge_section, shown_thread_id
from ..prompting.thread_answers import ThreadAnswer, parse_thread_answer
from ..prompting.transcript import AttachmentNumbers, observer_transcript
from ..prompting.truncation import truncate_observations, with_pending_reflection
from ..rules import extraction
from ..rules.extraction import THREAD_TITLE, Extraction, title_change
from ..rules.resource import pending_by_thread, plan_batches, thread_of, thread_tokens
from ..state import Cycle, PendingMessage, ThreadMemory
from ..step import Step
from .extracting import extraction_fields, with_inline
from .jobs import failure, model_job
from .resource_extracting import (
    followup_again,
    followup_id,
    followup_job,
    one_thread_per_call,
    thread_extraction,
    thread_specs,
)
from .status import emit_status

__all__ = ["batch_job_id", "batch_of", "fail_thread", "resource_batch_result", "resource_observer_request",
           "start_resource_observation"]


def batch_job_id(cycle_id: str, batch: int, *, again: bool = False) -> str:
    return f"{cycle_id}/{batch}/again" if again else f"{cycle_id}/{batch}"


def batch_of(cycle: Cycle, job_id: str) -> int | None:
    """Which batch of `cycle` the job `job_id` (or its structured follow-up) is, if the cycle
    waits for it (a batch asked again waits for its second job only)."""
    for n in range(len(cycle.batches)):
        own = batch_job_id(cycle.cycle_id, n, again=n in cycle.regenerated)
        if job_id in (own, followup_id(own, again=n in cycle.followups_again)):
            return n
    return None


def _prior_hints(step: Step, threads: tuple[str, ...], obscure: bool, *, hints: bool, title: bool) -> str:
    lines = []
    for thread in threads:
        meta = step.state.threads.get(thread) or ThreadMemory()
        for name, value in (("current-task", meta.current_task if hints else None),
                            ("suggested-response", meta.suggested_response if hints else None),
                            ("thread-title", meta.title if title else None)):
            if value:
                lines.append(f"- prior {name} of thread {shown_thread_id(thread, obscure)}: {value}")
    return "\n".join(lines)


def resource_observer_request(step: Step, threads: tuple[str, ...]) -> tuple[ChatMessage, ...]:
    """One batch's multi-thread observer request: each thread's transcript in a `<thread id>`
    block (the ids obscured when asked), the resource's whole log as previous observations."""
    state, config = step.state, step.config
    o = config.resolved.observation
    obscure = config.resolved.obscure_thread_ids
    hints = o.current_task_hint or o.suggested_response_hint
    groups = pending_by_thread(state)
    numbers = AttachmentNumbers()  # one numbering for the whole request
    transcript = "\n\n".join(
        f'<thread id="{shown_thread_id(t, obscure)}">\n'
        f"{observer_transcript(groups[t], config.om.time_zone, numbers=numbers)}\n</thread>"
        for t in threads)
    previous = with_pending_reflection(state.observations, o.previous_observer_tokens, state.buffered_reflection)
    known: int | None = state.observation_tokens if previous is state.observations else None
    if "observation-group" in previous:  # the observer reads the log without group tags
        previous, known = strip_groups(previous), None
    shown, truncated = truncate_observations(previous, o.previous_observer_tokens, config.counter.count, known)
    prior = _prior_hints(step, threads, obscure, hints=bool(hints), title=o.thread_title)
    specs = thread_specs(step, threads[0]) if len(threads) == 1 and one_thread_per_call(step) else ()
    if specs:  # one thread per call: its extractors' prior values and sections (resource_extracting)
        meta = step.state.threads.get(threads[0]) or ThreadMemory()
        prior = "\n".join(p for p in (prior, extraction.prior_values(specs, meta.metadata)) if p)
    user = observer_user_prompt(transcript=transcript, previous_observations=shown, truncated=truncated,
                                prior_values=prior) + extraction.inline_reminder(specs)
    messages = [m for t in threads for m in groups[t]]
    content = observer_user_content(user, messages, o.observe_attachments, o.model.name,
                                    capability=config.takes_attachments)
    return (
        ChatMessage(role="system", content=with_inline(observer_system_prompt(
            continuation_hints=bool(hints), instruction=o.instruction, multi_thread=True,
            thread_title=o.thread_title, example=not o.model.constrained), specs)),
        ChatMessage.model_validate({"role": "user", "content": content}),
    )


def start_resource_observation(step: Step, now: datetime, step_number: int | None, *,
                               trigger: JobTrigger) -> None:
    """A blocking observation of the threads the rule picks (every thread for `om observe`)."""
    state, config = step.state, step.config
    batches = plan_batches(state, config.message_threshold(state),
                           config.resolved.observation.max_tokens_per_batch,
                           everything=trigger == "manual")
    if one_thread_per_call(step):
        batches = tuple((t,) for batch in batches for t in batch)
    threads = tuple(t for batch in batches for t in batch)
    if not threads:  # nothing unobserved: a cycle without a job would never end
        emit_status(step, now, step_number)
        return
    groups = pending_by_thread(state)
    covered = tuple(m.id for t in threads for m in groups[t])
    tokens = sum(thread_tokens(groups[t]) for t in threads)
    cycle = Cycle(cycle_id=step.next_cycle_id(), kind="observe", message_ids=covered, tokens=tokens,
                  started_at=now, generation=state.generation, phase="observe", step_number=step_number,
                  trigger=trigger, batches=batches, batch_answers=(None,) * len(batches),
                  batch_mains=(None,) * len(batches), batch_followups=(None,) * len(batches))
    for thread in threads:
        step.emit(ObservationStart, ObservationStartData(
            cycle_id=cycle.cycle_id, operation_type="observation", started_at=now,
            tokens_to_observe=thread_tokens(groups[thread]), record_id=step.record_id,
            thread_id=thread, thread_ids=threads, config=config.marker_config(state),
        ), now, thread_id=thread, cycle=cycle)
    jobs = []
    for n in range(len(batches)):
        job = _batch_job(step, cycle, n)
        if isinstance(job, str):
            for thread in threads:
                fail_thread(step, cycle, thread, job, now, 0)
            emit_status(step, now, step_number)
            return
        jobs.append(job)
    step.jobs.extend(jobs)
    step.update(in_flight=cycle)


def _batch_job(step: Step, cycle: Cycle, batch: int) -> ModelJob | str:
    """Batch `batch`'s job (asked again: another sample of the same request, spec §7.7)."""
    again = batch in cycle.regenerated
    groups = pending_by_thread(step.state)
    threads = cycle.batches[batch]
    return model_job(step, cycle.model_copy(update={
        "cycle_id": batch_job_id(cycle.cycle_id, batch, again=again), "level": int(again)}),
        resource_observer_request(step, threads), reflector=False, trigger=cycle.trigger,
        input_tokens=sum(thread_tokens(groups[t]) for t in threads), kind="observe")


def _regenerate(step: Step, cycle: Cycle, batch: int, result: ModelResult) -> bool:
    """A looping answer is asked for once more (spec §7.7); True if it was."""
    if not result.ok or batch in cycle.regenerated or not is_degenerate(result.output or ""):
        return False
    again = cycle.model_copy(update={"regenerated": (*cycle.regenerated, batch)})
    job = _batch_job(step, again, batch)
    if isinstance(job, str):
        return False
    step.jobs.append(job)
    step.update(in_flight=again)
    return True


def resource_batch_result(step: Step, cycle: Cycle, batch: int, result: ModelResult) -> bool:
    """Record one batch's answer; once all are in, commit them (True: the check goes on)."""
    answers, mains = list(cycle.batch_answers), list(cycle.batch_mains)
    if result.kind == "extract":  # the follow-up of an answer kept in `batch_mains`
        main = mains[batch]
        if main is None:
            return False
        if batch not in cycle.followups_again and followup_again(step, cycle.batches[batch][0], result):
            again = cycle.model_copy(update={"followups_again": (*cycle.followups_again, batch)})
            job = followup_job(step, again, main.cycle_id, cycle.batches[batch][0], main, again=True)
            if job is not None:
                step.jobs.append(job)
                step.update(in_flight=again)
                return False
        answers[batch], mains[batch] = main, None
        followups = list(cycle.batch_followups)
        followups[batch] = result
        cycle = cycle.model_copy(update={"batch_followups": tuple(followups)})
    elif answers[batch] is not None or mains[batch] is not None:
        return False  # a redelivered answer: the first one counts
    elif _regenerate(step, cycle, batch, result):
        return False
    elif job := followup_job(step, cycle, result.cycle_id, cycle.batches[batch][0], result):
        mains[batch] = result
        step.jobs.append(job)
        step.update(in_flight=cycle.model_copy(update={"batch_mains": tuple(mains)}))
        return False
    else:
        answers[batch] = result
    cycle = cycle.model_copy(update={"batch_answers": tuple(answers), "batch_mains": tuple(mains)})
    if any(a is None for a in answers):
        step.update(in_flight=cycle)
        return False
    step.update(in_flight=None)
    # The batches ran side by side: the cycle took as long as its slowest call.
    duration = max(max(0, round((a.completed_at - a.started_at).total_seconds() * 1000))
                   for a in answers if a is not None)
    done = step.now(cycle.started_at + timedelta(milliseconds=duration))
    read = []
    for n, threads in enumerate(cycle.batches):
        answered = answers[n]
        assert answered is not None
        followup = cycle.batch_followups[n] if cycle.batch_followups else None
        read.append((threads, _batch_answers(step, cycle, threads, answered, followup)))
    # Every thread's end event reports the whole cycle's new observations, as the original's
    # resource strategy does (its `cycleObservationTokens`: the answers' text, before grouping).
    cycle_tokens = sum(step.config.counter.count(told.output.observations)
                       for _, each in read if not isinstance(each, str) for _, told, _, _ in each)
    committed, ends = False, []
    for threads, each in read:
        if isinstance(each, str):
            for thread in threads:
                fail_thread(step, cycle, thread, each, done, duration)
            continue
        for thread, told, found, corrected in each:
            end = _commit_thread(step, cycle, thread, told, found, done, duration, corrected=corrected,
                                 cycle_tokens=cycle_tokens)
            if end is not None:
                ends.append((thread, *end))
        step.observations_changed = committed = True
    # As the original's resource strategy: the threads' title changes once all are committed,
    # then their end events.
    for thread, _, values in ends:
        _retitle(step, cycle, thread, values, done)
    for thread, data, _ in ends:
        step.emit(ObservationEnd, data, done, thread_id=thread, cycle=cycle)
    if committed:
        step.update(cycles_completed=step.state.cycles_completed + 1, pending_message_tokens=0)
    else:
        emit_status(step, done, cycle.step_number)
    return committed


def _read(step: Step, threads: tuple[str, ...], result: ModelResult) -> dict[str, ThreadAnswer] | str:
    if not result.ok:
        return result.error or "model call failed"
    obscure = step.config.resolved.obscure_thread_ids
    shown = tuple(shown_thread_id(t, obscure) for t in threads)
    specs = thread_specs(step, threads[0]) if len(threads) == 1 else ()
    return parse_thread_answer(extraction.without_sections(result.output or "", specs), shown,
                               step.state.observations)


def _batch_answers(step: Step, cycle: Cycle, threads: tuple[str, ...], result: ModelResult,
                   followup: ModelResult | None) -> list[tuple[str, ThreadAnswer, Extraction, int]] | str:
    """One batch's answer, thread by thread: (thread, its answer with its dates checked, its
    extractors' values, the lines corrected); the error when the batch failed (its messages wait)."""
    parsed = _read(step, threads, result)
    if isinstance(parsed, str):
        return parsed
    obscure = step.config.resolved.obscure_thread_ids
    out = []
    for thread in threads:
        answer = parsed.get(shown_thread_id(thread, obscure)) or ThreadAnswer(ObserverOutput(""))
        # Each thread's dates and times held to that thread's own messages.
        checked = check_messages(answer.output.observations, _thread_messages(step, cycle, thread),
                                 step.config.om.time_zone)
        answer = replace(answer, output=replace(answer.output, observations=checked.text))
        found = (thread_extraction(step, thread, result, followup, answer.output.observations)
                 if len(threads) == 1 else Extraction())
        out.append((thread, answer, found, checked.count))
    return out


def fail_thread(step: Step, cycle: Cycle, thread: str, error: str, done: datetime, duration: int) -> None:
    """One thread's `data-om-observation-failed`: its messages stay for the next cycle."""
    covered = set(cycle.message_ids)
    tokens = thread_tokens(tuple(m for m in step.state.pending
                                 if m.id in covered and thread_of(m, step.state) == thread))
    data = failure(step, cycle.model_copy(update={"tokens": tokens}), "observation", error, done,
                   duration, background=False)
    step.emit(ObservationFailed, data.model_copy(update={"thread_id": thread}), done, thread_id=thread, cycle=cycle)


def _thread_messages(step: Step, cycle: Cycle, thread: str) -> tuple[PendingMessage, ...]:
    """The cycle's messages of `thread` still unobserved."""
    state = step.state
    covered = set(cycle.message_ids)
    return tuple(m for m in state.pending if m.id in covered and thread_of(m, state) == thread)


def _thread_text(step: Step, cycle: Cycle, thread: str, observations: str) -> str:
    """A thread's new observations as its section of the log takes them (grouped with retrieval)."""
    return grouped(step.config.resolved.retrieval is not None, step.state.memory_key,
                   thread_cycle(cycle.cycle_id, thread), _thread_messages(step, cycle, thread), observations)


def _commit_thread(step: Step, cycle: Cycle, thread: str, answer: ThreadAnswer, found: Extraction,
                   done: datetime, duration: int, *, corrected: int = 0,
                   cycle_tokens: int = 0) -> tuple[ObservationEndData, dict[str, Any]] | None:
    """Merge one thread's observations into the log and retire the messages they cover; the
    thread's end event and its extractors' values, for the caller to emit.  A thread the answer
    left out is observed with no new text (spec §7.5): its messages leave the window all the
    same, as the original's do."""
    state, config = step.state, step.config
    parsed = answer.output
    mine = _thread_messages(step, cycle, thread)
    if not mine:
        return None
    newest = max(m.created_at for m in mine)
    text = _thread_text(step, cycle, thread, parsed.observations)
    observations = state.observations
    if text:
        shown = shown_thread_id(thread, config.resolved.obscure_thread_ids)
        observations = merge_section(observations, shown, text, iso(newest))
    cursor = newest if state.cursor is None or newest > state.cursor else state.cursor
    ids = {m.id for m in mine}
    meta = state.threads.get(thread) or ThreadMemory()
    meta = meta.model_copy(update={"last_observed_at": newest, "current_task": parsed.current_task,
                                   "suggested_response": parsed.suggested_response})
    step.update(observations=observations,
                observation_tokens=config.counter.count(observations) if text else state.observation_tokens,
                cursor=cursor, pending=tuple(m for m in state.pending if m.id not in ids),
                threads={**state.threads, thread: meta})
    values = dict(found.values)
    if answer.title and config.resolved.observation.thread_title:
        values[THREAD_TITLE] = answer.title
    return ObservationEndData(
        cycle_id=cycle.cycle_id, operation_type="observation", completed_at=done,
        duration_ms=duration, tokens_observed=thread_tokens(mine),
        observation_tokens=cycle_tokens, observations=text or None,
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        record_id=step.record_id, thread_id=thread,
        observed_message_ids=tuple(m.id for m in mine), cursor=iso(cursor), generation=state.generation,
        times_corrected=corrected or None, **extraction_fields(Extraction(values, found.failures)),
    ), values


def _retitle(step: Step, cycle: Cycle, thread: str, values: dict[str, Any] | None, done: datetime) -> None:
    """`data-om-thread-update` when the thread's proposed title may replace its title (§9.2)."""
    meta = step.state.threads.get(thread) or ThreadMemory()
    title = title_change(values or {}, meta.title, meta.title_pinned)
    if title is None:
        return
    step.update(threads={**step.state.threads, thread: meta.model_copy(update={"title": title})})
    step.emit(ThreadUpdate, ThreadUpdateData(cycle_id=cycle.cycle_id, thread_id=thread, old_title=meta.title,
                                             new_title=title, timestamp=done), done, thread_id=thread)
