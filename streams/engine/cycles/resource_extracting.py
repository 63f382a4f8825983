"""Extractors of a resource memory's observation (spec §6.10, §9): one thread per observer call.

With an extractor configured (`observation.extract`, or working memory), a resource memory's
observation makes single-thread calls, one per thread the rule picks, as the original makes
sequential single-thread calls when an extractor is structured.  omstream does it for inline
extractors too: their `<slug>` sections are written after `</observations>`, so in a call about
several threads nothing would say whose value a section is.  The calls are sent together and
committed in thread order, as batches are (`multi_observing`), so the memory stays a function
of the log; the original's calls run one after another, each seeing the previous thread's new
observations among the previous ones, which these do not.

Values are the thread's (its `ThreadMemory.metadata`, at each extractor's key path, and the end
event's `extractedValues` for that thread); the working-memory document is the resource's, one
for all its threads (`MemoryState.working_memory`), as the user's durable facts are.  A
structured extractor's follow-up is one `extract` job per thread (`<batch job id>/extract`),
sent when the thread's answer is in.
"""

from __future__ import annotations

from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult

from ..prompting.parsing import parse_observer_output
from ..prompting.transcript import observer_transcript
from ..rules import extraction
from ..rules.extraction import THREAD_TITLE, Extraction, Spec
from ..rules.resource import pending_by_thread, thread_tokens
from ..state import Cycle, ThreadMemory
from ..step import Step
from .jobs import model_job

__all__ = ["followup_again", "followup_id", "followup_job", "one_thread_per_call", "thread_extraction",
           "thread_specs"]


def thread_specs(step: Step, thread: str) -> tuple[Spec, ...]:
    """`thread`'s observer extractors; the title is not one of them here: a resource memory's
    threads propose theirs inside their `<thread>` sections (`thread_answers`)."""
    state = step.state
    specs = extraction.specs(step.config.om, "observer", {
        "source": "observer", "threadId": thread, "resourceId": state.resource_id,
        "workingMemory": state.working_memory})
    return tuple(s for s in specs if s.slug != THREAD_TITLE)


def one_thread_per_call(step: Step) -> bool:
    """Whether the observation runs one call per thread (an extractor is configured)."""
    o = step.config.om.observation
    return bool(o.extract) or o.manage_working_memory


def followup_id(job_id: str, *, again: bool = False) -> str:
    return f"{job_id}/extract/again" if again else f"{job_id}/extract"


def followup_job(step: Step, cycle: Cycle, job_id: str, thread: str, answer: ModelResult, *,
                 again: bool = False) -> ModelJob | None:
    """The structured follow-up of `thread`'s answer (`again`: asked once more, for JSON alone),
    or None when there is none to ask (no structured extractor, a failed or empty answer, or no
    model may take it)."""
    specs = thread_specs(step, thread)
    if not answer.ok or not any(s.mode == "structured" for s in specs):
        return None
    parsed = parse_observer_output(extraction.without_sections(answer.output or "", specs))
    if parsed.degenerate or not parsed.observations:
        return None
    messages = pending_by_thread(step.state).get(thread, ())
    meta = step.state.threads.get(thread) or ThreadMemory()
    system, user, settings = extraction.structured_request(
        specs, source="observer", observations=parsed.observations,
        transcript=observer_transcript(messages, step.config.om.time_zone), metadata=meta.metadata)
    if again:
        user += extraction.JSON_ONLY
    job = model_job(step, cycle.model_copy(update={"cycle_id": followup_id(job_id, again=again)}),
                    (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)),
                    reflector=False, trigger=cycle.trigger, input_tokens=thread_tokens(messages),
                    kind="extract", extra_settings=settings)
    return None if isinstance(job, str) else job


def followup_again(step: Step, thread: str, followup: ModelResult) -> bool:
    """Whether a follow-up that answered is to be asked once more (spec §9.3: no JSON object, or
    `{}` when an extractor asks for a retry on an empty object)."""
    return followup.ok and extraction.retry_reason(followup.output, thread_specs(step, thread)) is not None


def thread_extraction(step: Step, thread: str, answer: ModelResult, followup: ModelResult | None,
                      observations: str) -> Extraction:
    """`thread`'s values from its answer (inline) and follow-up (structured), stored in its
    metadata (the working memory in the resource's document)."""
    specs = thread_specs(step, thread)
    if not specs:
        return Extraction()
    state = step.state
    meta = state.threads.get(thread) or ThreadMemory()
    structured = Extraction()
    if followup is not None:
        structured = extraction.read_structured(
            followup.output if followup.ok else None, None if followup.ok else followup.error or "model call failed",
            specs)
    found = extraction.settle(
        specs, extraction.inline_values(answer.output or "", specs), structured,
        context={"source": "observer", "threadId": thread, "resourceId": state.resource_id},
        metadata=meta.metadata, raw_observations=observations)
    if found.values:
        meta = meta.model_copy(update={"metadata": extraction.store(meta.metadata, specs, found.values)})
        step.update(threads={**state.threads, thread: meta})
    if extraction.WORKING_MEMORY in found.values:
        step.update(working_memory=found.values[extraction.WORKING_MEMORY])
    return found
