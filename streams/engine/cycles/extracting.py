"""The cycle side of extraction (spec §9): which extractors a cycle runs, their structured
follow-up job, and what a committed cycle stores and reports.

What an extractor is, how its sections are read and its values validated lives in `extraction`;
this module applies that to a cycle: the extractors' instructions in the system prompt, the
follow-up that holds the cycle until its values are in, the thread's metadata and title.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from omstream.schemas.events import ExtractionFailure, ThreadUpdate, ThreadUpdateData
from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult

from ..prompting.parsing import parse_observer_output
from ..prompting.transcript import observer_transcript
from ..rules import extraction
from ..rules.extraction import Extraction, Spec
from ..state import Cycle
from ..step import Step
from .jobs import model_job

__all__ = ["extract", "extraction_fields", "extractors", "retitle", "source", "structured_failed",
           "with_inline", "with_structured"]


def source(cycle: Cycle) -> extraction.Source:
    """Whose answer the cycle's extractors read."""
    return "reflector" if cycle.kind in ("reflect", "buffer-reflection") else "observer"


def extractors(step: Step, reader: extraction.Source) -> tuple[Spec, ...]:
    """The extractors run on `reader`'s answers for this memory, in run order."""
    state = step.state
    return extraction.specs(step.config.om, reader, {
        "source": reader, "threadId": state.thread_id, "resourceId": state.resource_id,
        "workingMemory": state.working_memory})


def with_inline(system: str, specs: tuple[Spec, ...]) -> str:
    """The system prompt, asking for the inline extractors' sections when there are any (a
    prompt without extractors stays byte for byte what it was)."""
    section = extraction.inline_instructions(specs)
    return f"{system}\n\n{section}" if section else system


def with_structured(step: Step, cycle: Cycle, result: ModelResult,
                    slot: str) -> tuple[Cycle, ModelResult] | None:
    """The cycle and main answer to apply now, or None while a structured follow-up runs.

    A main answer with structured extractors to run is kept on the cycle, which stays where it
    is (a blocking one keeps holding the memory's inputs), and an `extract` job is emitted; its
    result brings the main answer back with the values (`step.structured`)."""
    if cycle.answer is not None:
        if result.kind != "extract":
            return None  # the main answer delivered again while its follow-up runs
        main = cycle.answer
        specs = extractors(step, source(cycle))
        if result.ok and not cycle.extract_retried and extraction.retry_reason(result.output, specs):
            job = _extract_job(step, cycle, main, specs, again=True)
            if job is not None:
                step.jobs.append(job)
                step.update(**{slot: cycle.model_copy(update={"extract_retried": True})})
                return None
        step.structured = extraction.read_structured(
            result.output if result.ok else None, None if result.ok else result.error or "model call failed",
            specs)
        spent = result.completed_at - result.started_at  # the cycle lasted both calls
        return (cycle.model_copy(update={"answer": None, "extract_retried": False}),
                main.model_copy(update={"completed_at": main.completed_at + spent}))
    if result.kind == "extract":
        return None  # a follow-up for an answer already applied (a redelivery)
    specs = extractors(step, source(cycle))
    if not result.ok or not any(s.mode == "structured" for s in specs):
        return cycle, result
    job = _extract_job(step, cycle, result, specs)
    if job is None:
        return cycle, result
    step.jobs.append(job)
    step.update(**{slot: cycle.model_copy(update={"answer": result})})
    return None


def _extract_job(step: Step, cycle: Cycle, result: ModelResult, specs: tuple[Spec, ...], *,
                 again: bool = False) -> ModelJob | None:
    """The structured follow-up of an answer (`again`: asked once more, for JSON alone), or
    None when the answer will not be committed anyway (it loops or holds no observations) or
    no model may take the job."""
    reader = source(cycle)
    parsed = parse_observer_output(extraction.without_sections(result.output or "", specs))
    if parsed.degenerate or not parsed.observations:
        return None
    transcript = ""
    if reader == "observer":
        covered = set(cycle.message_ids)
        transcript = observer_transcript((m for m in step.state.pending if m.id in covered),
                                         step.config.om.time_zone)
    system, user, settings = extraction.structured_request(
        specs, source=reader, observations=parsed.observations, transcript=transcript,
        metadata=step.state.metadata)
    if again:
        user += extraction.JSON_ONLY
    messages = (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))
    job = model_job(step, cycle, messages, reflector=reader == "reflector", trigger=cycle.trigger,
                    input_tokens=cycle.tokens, kind="extract", extra_settings=settings)
    return None if isinstance(job, str) else job


def structured_failed(step: Step, cycle: Cycle, error: str) -> Extraction:
    """Every structured extractor of the cycle failed with `error`."""
    return Extraction(failures={s.slug: error for s in extractors(step, source(cycle))
                                if s.mode == "structured"})


def extract(step: Step, cycle: Cycle, raw: str, observations: str) -> Extraction:
    """The committed cycle's values and failures (inline ones from `raw`, structured ones from
    the follow-up), stored in the thread's OM metadata."""
    structured, step.structured = step.structured or Extraction(), None
    reader = source(cycle)
    specs = extractors(step, reader)
    if not specs:
        return Extraction()
    state = step.state
    found = extraction.settle(
        specs, extraction.inline_values(raw, specs), structured,
        context={"source": reader, "threadId": state.thread_id, "resourceId": state.resource_id},
        metadata=state.metadata, raw_observations=observations)
    if found.values:
        step.update(metadata=extraction.store(state.metadata, specs, found.values))
    if extraction.WORKING_MEMORY in found.values:
        step.update(working_memory=found.values[extraction.WORKING_MEMORY])
    return found


def extraction_fields(found: Extraction) -> dict[str, Any]:
    """The end event's `extractedValues` / `extractionFailures` (absent when empty)."""
    return {"extracted_values": found.values or None,
            "extraction_failures": tuple(ExtractionFailure(slug=slug, error=error)
                                         for slug, error in found.failures.items()) or None}


def retitle(step: Step, cycle: Cycle, found: Extraction, at: datetime) -> None:
    """`data-om-thread-update` when the cycle's `thread-title` may replace the title."""
    state = step.state
    title = extraction.title_change(found.values, state.title, state.title_pinned)
    if title is None:
        return
    step.update(title=title)
    step.emit(ThreadUpdate, ThreadUpdateData(
        cycle_id=cycle.cycle_id, thread_id=state.thread_id, old_title=state.title,
        new_title=title, timestamp=at), at)
