"""Where a model result goes: to the cycle waiting for it, then on with the check it held.

A result names its cycle; the cycle is found in one of the memory's three slots (the blocking
cycle in flight, the background observation, the background reflection).  A blocking cycle's
end resumes the check that started it (`check.resume`) from the phase after it.  A result no
cycle waits for is recorded as ignored, except a redelivery of an answer already applied.
"""

from __future__ import annotations

from omstream.schemas.events import ResultIgnored, ResultIgnoredData
from omstream.schemas.jobs import ModelResult, Usage

from ..state import Cycle
from ..step import Step
from .buffering import buffer_result
from .check import resume
from .extracting import with_structured
from .jobs import outcome_time
from .multi_observing import batch_of, resource_batch_result
from .observing import observation_result
from .reflecting import reflection_buffer_result, reflection_result

__all__ = ["blocking_result", "on_result", "spent"]

_RECENT_ANSWERS = 64  # cycles whose answer was applied, to recognise a job answered twice


def on_result(step: Step, result: ModelResult) -> None:
    """Route a model result to the cycle waiting for it; anything else is recorded and ignored."""
    state = step.state
    cycle = state.in_flight
    batch = batch_of(cycle, result.cycle_id) if cycle is not None and cycle.batches else None
    if cycle is not None and batch is not None:
        step.update(answered=(*state.answered, result.cycle_id)[-_RECENT_ANSWERS:])
        if resource_batch_result(step, spent(cycle, result), batch, result):
            resume(step, step.state.clock or result.completed_at, "observe", cycle.step_number)
        return
    for slot, handler in (("in_flight", blocking_result), ("buffering", buffer_result),
                          ("reflection_buffering", reflection_buffer_result)):
        cycle = getattr(state, slot)
        if cycle is not None and cycle.cycle_id == result.cycle_id:
            answered = with_structured(step, spent(cycle, result), result, slot)
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


def spent(cycle: Cycle, result: ModelResult) -> Cycle:
    """`cycle` with the cost of `result` added: what its end hook reports (spec §13: every call
    of the cycle).  The metadata is the latest call's, with the calls' costs summed."""
    if result.usage is None and not result.provider_metadata:
        return cycle
    usage = cycle.usage
    if result.usage is not None:
        usage = result.usage if usage is None else Usage(
            input_tokens=_plus(usage.input_tokens, result.usage.input_tokens),
            output_tokens=_plus(usage.output_tokens, result.usage.output_tokens),
            total_tokens=_plus(usage.total_tokens, result.usage.total_tokens))
    metadata = result.provider_metadata or cycle.provider_metadata
    costs = [((m or {}).get("litellm") or {}).get("cost") for m in (cycle.provider_metadata, result.provider_metadata)]
    if metadata is not None and costs[0] is not None and costs[1] is not None:
        metadata = {**metadata, "litellm": {**metadata["litellm"], "cost": costs[0] + costs[1]}}
    return cycle.model_copy(update={"usage": usage, "provider_metadata": metadata})


def _plus(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def blocking_result(step: Step, cycle: Cycle, result: ModelResult) -> None:
    """End the blocking cycle in flight with `result`, and resume its check when it is over."""
    done, duration = outcome_time(step, cycle, result)
    step.update(in_flight=None)
    if cycle.kind == "reflect":
        if reflection_result(step, cycle, result, done, duration):
            resume(step, done, cycle.phase, cycle.step_number)
    elif cycle.kind == "buffer":  # a buffer the check waited for at blockAfter
        buffer_result(step, cycle, result)
        resume(step, step.state.clock or done, "before-observe", cycle.step_number)
    elif observation_result(step, cycle, result, done, duration):
        resume(step, done, "observe", cycle.step_number)
