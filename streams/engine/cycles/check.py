"""The threshold check: what one step (or message) of a memory sets off (spec §6, §11).

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
check then resumes where it stopped (`resume`, called by `results`), so `data-om-status` reports
the settled windows, after the cycle's own events.  Background cycles (buffer,
buffer-reflection) never hold anything: their results land in state (`chunks`,
`buffered_reflection`) and wait for an activation.

Each phase lives in the module named for it: `activating`, `observing`, `buffering`,
`reflecting`, `status`; the numbers they decide with are `thresholds`'.
"""

from __future__ import annotations

from datetime import datetime

from ..rules.thresholds import requires_blocking_observation
from ..state import Phase
from ..step import Step
from .activating import activate
from .buffering import maybe_buffer
from .observing import start_observation
from .reflecting import maybe_reflect
from .status import emit_status

__all__ = ["check", "resume"]


def check(step: Step, now: datetime, step_number: int | None, actor_model: str | None) -> None:
    """One step's (or message's) preparation; ends with `data-om-status` unless a cycle blocks."""
    if step_number in (0, None):
        activate(step, now, checked=True, actor_model=actor_model)
        if maybe_reflect(step, now, "before-observe", step_number, actor_model):
            return
    resume(step, now, "before-observe", step_number)


def resume(step: Step, now: datetime, after: Phase, step_number: int | None) -> None:
    """Continue a check after its phase `after` (at once, or when a blocking cycle ended)."""
    if after == "before-observe" and _observe_phase(step, now, step_number):
        return
    if after in ("before-observe", "observe") and step.observations_changed:
        if maybe_reflect(step, now, "after-observe", step_number, None):
            return
    emit_status(step, now, step_number)


def _observe_phase(step: Step, now: datetime, step_number: int | None) -> bool:
    """Activation, the blocking observation and buffering; True when a cycle now blocks."""
    config = step.config
    threshold = config.message_threshold(step.state)
    buffering = config.resolved.async_buffering
    if buffering and step.pending_tokens >= threshold:
        activate(step, now, checked=False, actor_model=None)
    # Without buffering blockAfter is None and the threshold blocks; with it, blockAfter is set.
    if requires_blocking_observation(step.pending_tokens, threshold=threshold,
                                     block_after=config.resolved.observation.block_after):
        if buffering and step.state.buffering is not None:
            # The safety net: wait for the chunk in flight, then decide again.
            step.update(in_flight=step.state.buffering.model_copy(
                update={"phase": "before-observe", "step_number": step_number}))
            return True
        start_observation(step, now, step_number, trigger="turn-sync")
        return True
    if buffering:
        maybe_buffer(step, now)
    return False
