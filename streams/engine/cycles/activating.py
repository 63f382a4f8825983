"""Activation of buffered chunks (spec §6.4): the check's side of it.

Whether to activate and how many chunks are `activation`'s pure decisions; this module asks them
with the memory's numbers, moves the chosen chunks into the observation log (instant, no model
call) and writes one `data-om-activation` marker per chunk.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from omstream.schemas.base import iso
from omstream.schemas.events import Activation, ActivationData

from ..prompting.observations import CHUNK_SEPARATOR
from ..rules.activation import (
    ActivationTrigger,
    Chunk,
    activation_trigger,
    force_max_activation,
    plan_activation,
    resolve_activation_ttl,
    to_epoch_ms,
)
from ..state import BufferedChunk, MemoryState
from ..step import Step
from .observing import observe_messages

__all__ = ["activate"]


def activate(step: Step, now: datetime, *, checked: bool, actor_model: str | None) -> None:
    """Move the leading buffered chunks into the log; instant, no model call.

    `checked` (at step 0): first ask whether to activate at all, on the threshold, the idle
    time or a provider change; otherwise the threshold pipeline has decided already.
    """
    state, config = step.state, step.config
    if not state.chunks:
        return
    o = config.resolved.observation
    threshold = config.message_threshold(state)
    ttl = resolve_activation_ttl(o.activate_after_idle, actor_model)
    trigger: ActivationTrigger | None = "threshold"
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
    cursor = _swap_in(step, chosen)
    details: dict[str, Any] = {}
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
            activated_message_ids=chunk.message_ids, cursor=iso(cursor),
            current_task=chunk.current_task, suggested_response=chunk.suggested_response, **details,
        ), now)
    # The newest activated chunk's hints become the memory's, as a blocking observation's do
    # (the original clears them here, spec §6.4 step 8; the documentation keeps them).
    newest = chosen[-1]
    step.update(current_task=newest.current_task, suggested_response=newest.suggested_response, buffer_boundary=0,
                cycles_completed=step.state.cycles_completed + len(chosen),
                pending_message_tokens=plan.remaining_tokens)


def _persisted_pending(state: MemoryState) -> int:
    """`currentPending` of spec §6.4 step 5: the record's pending count as the previous step
    left it, or, when it is 0, the message tokens of all buffered chunks."""
    return state.pending_message_tokens or sum(c.message_tokens for c in state.chunks)


def _swap_in(step: Step, chosen: tuple[BufferedChunk, ...]) -> datetime:
    """Spec §3.4: one boundary stamped with the last chunk's cursor, then the chunks' texts
    separated by blank lines; the log's token count grows by the chunks' own counts.  The
    cursor after the swap."""
    step.update(chunks=step.state.chunks[len(chosen):])
    return observe_messages(
        step, tuple(mid for c in chosen for mid in c.message_ids),
        CHUNK_SEPARATOR.join(c.observations for c in chosen), chosen[-1].last_observed_at,
        added_tokens=sum(c.tokens for c in chosen))
