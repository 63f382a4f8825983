"""The `data-om-status` marker's windows: where a memory stands against its thresholds.

A UI draws them as two token bars (messages against the observation threshold, observations
against the reflection threshold) with what background work has buffered beside them.  The engine
computes them in one place (`omstream.engine.rules.thresholds.status_windows`); this is their wire shape.
"""

from __future__ import annotations

from typing import Literal

from .base import Count, WireModel

__all__ = [
    "ActiveWindows",
    "BufferStatus",
    "BufferedObservationsWindow",
    "BufferedReflectionWindow",
    "BufferedWindows",
    "StatusData",
    "TokenWindow",
    "Windows",
]

#: idle: nothing buffered; running: a background call is working; complete: ready to activate.
BufferStatus = Literal["idle", "running", "complete"]


class TokenWindow(WireModel):
    tokens: Count
    """Current size, in tokens."""
    threshold: Count
    """The size that triggers the next cycle, in tokens."""


class BufferedObservationsWindow(WireModel):
    chunks: Count = 0
    """Buffered observation chunks waiting for activation."""
    message_tokens: Count = 0
    """Message tokens the chunks cover (at most the unobserved tokens), in tokens."""
    projected_message_removal: Count = 0
    """Message tokens the next activation would remove from the window, in tokens."""
    observation_tokens: Count = 0
    """Size of the buffered observations, in tokens."""
    status: BufferStatus = "idle"
    """`idle`: nothing buffered; `running`: a background observer is working; `complete`: chunks
    wait for activation."""


class BufferedReflectionWindow(WireModel):
    input_observation_tokens: Count = 0
    """Observation tokens the buffered reflection condenses, in tokens."""
    observation_tokens: Count = 0
    """Size of the buffered reflection, in tokens."""
    status: BufferStatus = "idle"
    """`idle`: no reflection buffered; `running`: a background reflector is working; `complete`: a
    reflection waits for activation."""


class ActiveWindows(WireModel):
    messages: TokenWindow
    """Unobserved messages against the observation threshold."""
    observations: TokenWindow
    """Observations against the reflection threshold."""


class BufferedWindows(WireModel):
    observations: BufferedObservationsWindow = BufferedObservationsWindow()
    """Buffered observation chunks."""
    reflection: BufferedReflectionWindow = BufferedReflectionWindow()
    """The buffered reflection."""


class Windows(WireModel):
    active: ActiveWindows
    """What the agent's context holds now."""
    buffered: BufferedWindows = BufferedWindows()
    """Background work waiting for activation."""


class StatusData(WireModel):
    windows: Windows
    """The token windows: active and buffered."""
    record_id: str
    """The memory record (one per generation)."""
    thread_id: str
    """The thread of the step."""
    # Absent when the producer reports no steps (thresholds are then checked per message).
    step_number: Count | None = None
    """The agent's step in the turn, from 0. Absent when the producer reports no steps (thresholds
    are then checked per message)."""
    generation_count: Count
    """The memory's generation: how many reflections it has had."""
