"""`data-om-status`: the windows a check reports when it settles (spec §6.1).

Every number of the marker comes from `thresholds.status_windows`, the function the threshold
tests pin; this module only reads its inputs off the memory and writes the marker.
"""

from __future__ import annotations

from datetime import datetime

from omstream.schemas.events import Status
from omstream.schemas.status import (
    ActiveWindows,
    BufferedObservationsWindow,
    BufferedReflectionWindow,
    BufferedWindows,
    StatusData,
    TokenWindow,
    Windows,
)

from ..rules.thresholds import StatusWindows, status_windows
from ..state import MemoryState
from ..step import EngineConfig, Step

__all__ = ["emit_status", "windows_of"]


def windows_of(state: MemoryState, config: EngineConfig, pending_tokens: int) -> StatusWindows:
    """The memory's windows now, with `pending_tokens` unobserved message tokens."""
    o = config.resolved.observation
    return status_windows(
        pending_tokens=pending_tokens,
        observation_tokens=state.observation_tokens,
        message_tokens=config.base_message_tokens(state),
        reflection_tokens=config.base_reflection_tokens(state),
        share_token_budget=config.resolved.share_token_budget,
        buffer_tokens=o.buffer_tokens,
        buffer_activation=o.buffer_activation,
        block_after=o.block_after,
        chunk_message_tokens=[c.message_tokens for c in state.chunks],
        last_buffered_at_tokens=state.buffer_boundary,
        buffering_in_flight=state.buffering is not None,
    )


def emit_status(step: Step, now: datetime, step_number: int | None) -> None:
    """The check's `data-om-status`, then what was promised for after it (`Step`)."""
    state = step.state
    pending = step.pending_tokens
    w = windows_of(state, step.config, pending)
    buffered = BufferedObservationsWindow(
        chunks=len(state.chunks),
        message_tokens=w.buffered_message_tokens,
        projected_message_removal=w.projected_message_removal,
        observation_tokens=sum(c.tokens for c in state.chunks),
        status="running" if state.buffering else "complete" if state.chunks else "idle",
    )
    reflection = state.buffered_reflection
    buffered_reflection = BufferedReflectionWindow(
        input_observation_tokens=reflection.input_tokens if reflection else 0,
        observation_tokens=reflection.tokens if reflection else 0,
        status="running" if state.reflection_buffering else "complete" if reflection else "idle",
    )
    windows = Windows(
        active=ActiveWindows(
            messages=TokenWindow(tokens=pending, threshold=w.threshold),
            observations=TokenWindow(tokens=state.observation_tokens, threshold=w.reflection_threshold),
        ),
        buffered=BufferedWindows(observations=buffered, reflection=buffered_reflection),
    )
    step.emit(Status, StatusData(
        windows=windows, record_id=step.record_id, thread_id=step.thread_id,
        step_number=step_number, generation_count=state.generation,
    ), now)
    # The processor persists the count it reported: the next activation plans against it.
    step.update(pending_message_tokens=pending)
    step.flush_after_status()
