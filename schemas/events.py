"""Lifecycle events on `<ns>.events`: the `data-om-*` parts of the product, in an envelope.

Every event is `{type, data, eventId, memoryKey, threadId, seq, schemaVersion, eventTime}`.
`type` and the fields of `data` are the documented ones (camelCase); the envelope makes the log
replayable: `eventId` derives from the memory key and `seq` (the per-memory sequence number), so
a re-emitted event after a crash has the id of the first and consumers drop it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from .base import SCHEMA_VERSION, WireModel

__all__ = [
    "BufferedObservationsWindow",
    "BufferedReflectionWindow",
    "Event",
    "EventEnvelope",
    "MarkerConfig",
    "ObservationEnd",
    "ObservationEndData",
    "ObservationFailed",
    "ObservationFailedData",
    "ObservationStart",
    "ObservationStartData",
    "OperationType",
    "ResultIgnored",
    "ResultIgnoredData",
    "Status",
    "StatusData",
    "TokenWindow",
]

OperationType = Literal["observation", "reflection"]


class MarkerConfig(WireModel):
    message_tokens: int
    observation_tokens: int
    scope: Literal["thread", "resource"]
    activate_after_idle: int | None = None


class EventEnvelope(WireModel):
    event_id: str
    memory_key: str
    thread_id: str | None = None
    seq: int
    schema_version: int = SCHEMA_VERSION
    event_time: datetime


class TokenWindow(WireModel):
    tokens: int
    threshold: int


class BufferedObservationsWindow(WireModel):
    chunks: int = 0
    message_tokens: int = 0
    projected_message_removal: int = 0
    observation_tokens: int = 0
    status: Literal["idle", "running", "complete"] = "idle"


class BufferedReflectionWindow(WireModel):
    input_observation_tokens: int = 0
    observation_tokens: int = 0
    status: Literal["idle", "running", "complete"] = "idle"


class ActiveWindows(WireModel):
    messages: TokenWindow
    observations: TokenWindow


class BufferedWindows(WireModel):
    observations: BufferedObservationsWindow = BufferedObservationsWindow()
    reflection: BufferedReflectionWindow = BufferedReflectionWindow()


class Windows(WireModel):
    active: ActiveWindows
    buffered: BufferedWindows = BufferedWindows()


class StatusData(WireModel):
    windows: Windows
    record_id: str
    thread_id: str
    step_number: int | None = None
    generation_count: int


class ObservationStartData(WireModel):
    cycle_id: str
    operation_type: OperationType
    started_at: datetime
    tokens_to_observe: int
    record_id: str
    thread_id: str
    thread_ids: tuple[str, ...]
    config: MarkerConfig


class ObservationEndData(WireModel):
    cycle_id: str
    operation_type: OperationType
    completed_at: datetime
    duration_ms: int
    tokens_observed: int
    observation_tokens: int
    observations: str | None = None
    current_task: str | None = None
    suggested_response: str | None = None
    extracted_values: dict[str, Any] | None = None
    extraction_failures: tuple[dict[str, str], ...] | None = None
    record_id: str
    thread_id: str
    # Projection fields (omstream): enough to rebuild the context window from the log alone.
    observed_message_ids: tuple[str, ...] = ()
    cursor: str | None = None
    generation: int = 0


class ObservationFailedData(WireModel):
    cycle_id: str
    operation_type: OperationType
    failed_at: datetime
    duration_ms: int
    tokens_attempted: int
    error: str
    record_id: str
    thread_id: str
    observations: str | None = None


class Status(EventEnvelope):
    type: Literal["data-om-status"] = "data-om-status"
    data: StatusData


class ObservationStart(EventEnvelope):
    type: Literal["data-om-observation-start"] = "data-om-observation-start"
    data: ObservationStartData


class ObservationEnd(EventEnvelope):
    type: Literal["data-om-observation-end"] = "data-om-observation-end"
    data: ObservationEndData


class ObservationFailed(EventEnvelope):
    type: Literal["data-om-observation-failed"] = "data-om-observation-failed"
    data: ObservationFailedData


class ResultIgnoredData(WireModel):
    cycle_id: str
    kind: str
    reason: str


class ResultIgnored(EventEnvelope):
    """A model result that arrived for a head that no longer waits for it (late or duplicate)."""

    type: Literal["om-result-ignored"] = "om-result-ignored"
    data: ResultIgnoredData


Event = Annotated[
    Union[Status, ObservationStart, ObservationEnd, ObservationFailed, ResultIgnored],
    Field(discriminator="type"),
]
