"""`cycleDeadline`: the backstop for a blocking cycle whose answer never comes.

The model agents answer every job, with a failure at their own deadline, but a lost record must
not hold the memory for good.  The fold asks `is_overdue` with the log time of each input it
would hold, and `expire_overdue` ends the cycle as failed.  Both read the log's time only, so a
refold decides the same.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from omstream.schemas.jobs import ModelResult

from ..state import Cycle
from ..step import EngineConfig, Step
from .check import resume
from .extracting import structured_failed
from .multi_observing import batch_job_id, resource_batch_result
from .reflecting import reflection_gave_up
from .results import blocking_result

__all__ = ["expire_overdue", "is_overdue"]


def is_overdue(since: datetime | None, at: datetime | None, config: EngineConfig) -> bool:
    """Whether more than `cycleDeadline` of log time passed from `since` to `at` (never, when
    either is unknown: `om simulate` has no log and settles every job anyway)."""
    if since is None or at is None:
        return False
    return at - since > config.cycle_deadline


def expire_overdue(step: Step) -> bool:
    """End the blocking cycle in flight as failed (the caller found it overdue); True if it did.

    A result arriving later finds no cycle waiting and is recorded as ignored
    (`results.on_result`).  A reflection gives up rather than climb its ladder: there is no
    answer to judge.
    """
    cycle = step.state.in_flight
    deadline_ms = step.config.om.cycle_deadline_ms
    if cycle is None:
        return False
    error = f"deadline: no model answer within cycleDeadline ({deadline_ms:g} ms) of the cycle's start"
    if cycle.answer is not None:  # the answer is in; only the structured follow-up is missing
        step.structured = structured_failed(step, cycle, error)
        blocking_result(step, cycle.model_copy(update={"answer": None}), cycle.answer)
        step.structured = None
        return True
    if cycle.batches:
        _expire_batches(step, cycle, error, deadline_ms)
        return True
    if cycle.kind == "reflect":
        done = step.now(cycle.started_at + timedelta(milliseconds=deadline_ms))
        step.update(in_flight=None)
        reflection_gave_up(step, cycle, error, done, round(deadline_ms))
        resume(step, done, cycle.phase, cycle.step_number)
        return True
    blocking_result(step, cycle, ModelResult(
        kind=cycle.kind, cycle_id=cycle.cycle_id, memory_key=step.state.memory_key,
        thread_id=step.state.thread_id, request_hash="deadline", ok=False, error=error,
        error_code="deadline", model=cycle.model or "unknown", attempts=0,
        started_at=cycle.started_at, completed_at=cycle.started_at + timedelta(milliseconds=deadline_ms)))
    return True


def _expire_batches(step: Step, cycle: Cycle, error: str, deadline_ms: float) -> None:
    """A resource memory's observation: the batches still unanswered fail, each of their
    threads with its own failure event; the answered ones commit."""
    committed = False
    for n, answer in enumerate(cycle.batch_answers):
        if answer is not None:
            continue
        current = step.state.in_flight
        assert current is not None
        # An answer waiting for its structured follow-up commits with its extractors failed.
        followup = bool(current.batch_mains) and current.batch_mains[n] is not None
        committed = resource_batch_result(step, current, n, ModelResult(
            kind="extract" if followup else "observe", cycle_id=batch_job_id(cycle.cycle_id, n),
            memory_key=step.state.memory_key,
            thread_id=step.thread_id, request_hash="deadline", ok=False, error=error,
            error_code="deadline", model=cycle.model or "unknown", attempts=0, started_at=cycle.started_at,
            completed_at=cycle.started_at + timedelta(milliseconds=deadline_ms)))
    if committed:
        resume(step, step.state.clock or cycle.started_at, "observe", cycle.step_number)
