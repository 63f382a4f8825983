"""The per-memory state record the fold produces and the table stores."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

__all__ = ["Cycle", "MemoryState", "PendingMessage"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PendingMessage(_Frozen):
    """An unobserved message, with what the observer transcript and the counters need."""

    id: str
    role: str
    created_at: datetime
    text: str
    tokens: int


class Cycle(_Frozen):
    """A model call in flight: what it covers and when (event time) it started.

    A blocking cycle belongs to the check that started it (a step, or a message when no steps
    are reported): `phase` says where that check resumes when the cycle ends, and the check's
    `data-om-status` is emitted only then, after the cycle's own events, as the original does.
    """

    cycle_id: str
    kind: str  # observe | reflect
    message_ids: tuple[str, ...]
    tokens: int
    started_at: datetime
    generation: int
    phase: str = "observe"  # before-observe | observe | after-observe
    step_number: int | None = None
    trigger: str = "turn-sync"  # manual | turn-sync | async-buffer
    level: int = 0  # reflection compression level
    max_level: int = 0
    guidance: str | None = None
    best: str | None = None  # smallest acceptable reflection so far (normative choice 4)
    best_suggested_response: str | None = None


class MemoryState(_Frozen):
    memory_key: str
    thread_id: str
    resource_id: str | None = None
    seq: int = 0
    generation: int = 0
    observations: str = ""
    observation_tokens: int = 0
    cursor: datetime | None = None
    pending: tuple[PendingMessage, ...] = ()
    seen: dict[str, str] = {}
    in_flight: Cycle | None = None
    held: tuple[dict, ...] = ()  # inputs that arrived while a blocking cycle was in flight
    parked: tuple[dict, ...] = ()  # steps and turn ends waiting for the message they follow
    current_task: str | None = None
    suggested_response: str | None = None
    steps_reported: bool = False
    clock: datetime | None = None
    cycles_completed: int = 0
    # Observation tokens at which a threshold reflection gave up (failed, or could not get below
    # the threshold): it is not retried until the observations change (spec §6.7, §8.3).
    reflection_suppressed_at: int | None = None
    # Input positions already folded into this state (topic -> offset), written by the edge in
    # the same table value, so a redelivered input after a crash is recognised and skipped.
    offsets: dict[str, int] = {}

    @property
    def pending_ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.pending)
