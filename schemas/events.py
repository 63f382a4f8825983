"""Lifecycle events on `<ns>.events`: the `data-om-*` parts of the product, in an envelope.

Every event is `{type, data, eventId, memoryKey, threadId, seq, schemaVersion, eventTime}`.
`type` and the fields of `data` are the documented ones (camelCase, spec §11), so a UI written
for the original reads them unchanged; the envelope makes the log replayable: `eventId` derives
from the memory key and `seq` (the per-memory sequence number), so a re-emitted event after a
crash has the id of the first and consumers drop it.

omstream adds a few optional fields to `data` (marked below): what a read side needs to rebuild
the context window from the log alone (`observedMessageIds`, `activatedMessageIds`, `cursor`,
`generation`, and the hints an activated chunk brings).  Consumers that do not know them ignore
them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args

from pydantic import Field

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = [
    "EVENT_TYPES",
    "Activation",
    "ActivationData",
    "ActiveWindows",
    "BufferStatus",
    "BufferedObservationsWindow",
    "BufferedReflectionWindow",
    "BufferedWindows",
    "BufferingEnd",
    "BufferingEndData",
    "BufferingFailed",
    "BufferingFailedData",
    "BufferingStart",
    "BufferingStartData",
    "Event",
    "EventEnvelope",
    "MemoryDeleted",
    "MemoryDeletedData",
    "TemporalGap",
    "TemporalGapData",
    "ExtractionFailure",
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
    "ThreadUpdate",
    "ThreadUpdateData",
    "TokenWindow",
    "TriggeredBy",
    "Windows",
]

OperationType = Literal["observation", "reflection"]
#: idle: nothing buffered; running: a background call is working; complete: ready to activate.
BufferStatus = Literal["idle", "running", "complete"]
#: What activated buffered work: the token threshold, `activateAfterIdle`, or a model change.
TriggeredBy = Literal["threshold", "ttl", "provider_change"]


class MarkerConfig(WireModel):
    """`ObservationMarkerConfig`: the thresholds and scope when the marker was written."""

    message_tokens: Count
    observation_tokens: Count
    scope: Literal["thread", "resource"]
    activate_after_idle: Count | None = None  # milliseconds


class ExtractionFailure(WireModel):
    """An extractor that failed in a cycle whose other extractors may have succeeded."""

    slug: str
    error: str


class EventEnvelope(WireModel):
    event_id: NonEmptyStr
    memory_key: NonEmptyStr
    thread_id: str | None = None
    seq: Count
    schema_version: int = SCHEMA_VERSION
    event_time: Timestamp


# --- data-om-status ---------------------------------------------------------------------------
class TokenWindow(WireModel):
    tokens: Count
    threshold: Count


class BufferedObservationsWindow(WireModel):
    chunks: Count = 0
    message_tokens: Count = 0
    projected_message_removal: Count = 0
    observation_tokens: Count = 0
    status: BufferStatus = "idle"


class BufferedReflectionWindow(WireModel):
    input_observation_tokens: Count = 0
    observation_tokens: Count = 0
    status: BufferStatus = "idle"


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
    # Absent when the producer reports no steps (thresholds are then checked per message).
    step_number: Count | None = None
    generation_count: Count


# --- synchronous observation and reflection ---------------------------------------------------
class ObservationStartData(WireModel):
    cycle_id: str
    operation_type: OperationType
    started_at: Timestamp
    tokens_to_observe: Count
    record_id: str
    thread_id: str
    thread_ids: tuple[str, ...]
    config: MarkerConfig


class ObservationEndData(WireModel):
    cycle_id: str
    operation_type: OperationType
    completed_at: Timestamp
    duration_ms: Count
    tokens_observed: Count
    observation_tokens: Count
    observations: str | None = None
    current_task: str | None = None
    suggested_response: str | None = None
    extracted_values: dict[str, Any] | None = None
    extraction_failures: tuple[ExtractionFailure, ...] | None = None
    record_id: str
    thread_id: str
    # omstream: the messages this cycle covered and the head after it.
    observed_message_ids: tuple[str, ...] = ()
    cursor: str | None = None
    generation: Count = 0


class ObservationFailedData(WireModel):
    cycle_id: str
    operation_type: OperationType
    failed_at: Timestamp
    duration_ms: Count
    tokens_attempted: Count
    error: str
    record_id: str
    thread_id: str
    observations: str | None = None


# --- async buffering and activation -----------------------------------------------------------
class BufferingStartData(WireModel):
    cycle_id: str
    operation_type: OperationType
    started_at: Timestamp
    tokens_to_buffer: Count
    record_id: str
    thread_id: str
    thread_ids: tuple[str, ...]
    config: MarkerConfig


class BufferingEndData(WireModel):
    cycle_id: str
    operation_type: OperationType
    completed_at: Timestamp
    duration_ms: Count
    tokens_buffered: Count
    buffered_tokens: Count
    record_id: str
    thread_id: str
    observations: str | None = None
    extracted_values: dict[str, Any] | None = None
    extraction_failures: tuple[ExtractionFailure, ...] | None = None
    # omstream: the messages the chunk covers (not yet activated), its hints, and the head.
    observed_message_ids: tuple[str, ...] = ()
    current_task: str | None = None
    suggested_response: str | None = None
    cursor: str | None = None
    generation: Count = 0


class BufferingFailedData(WireModel):
    cycle_id: str
    operation_type: OperationType
    failed_at: Timestamp
    duration_ms: Count
    tokens_attempted: Count
    error: str
    record_id: str
    thread_id: str
    observations: str | None = None


class ActivationData(WireModel):
    cycle_id: str
    operation_type: OperationType
    activated_at: Timestamp
    chunks_activated: Count
    tokens_activated: Count
    observation_tokens: Count
    messages_activated: Count
    record_id: str
    thread_id: str
    generation_count: Count
    config: MarkerConfig
    observations: str | None = None
    triggered_by: TriggeredBy | None = None
    last_activity_at: Count | None = None  # unix milliseconds
    ttl_expired_ms: Count | None = None
    previous_model: str | None = None
    current_model: str | None = None
    # omstream: the messages now covered by observations, the hints, and the cursor after it.
    activated_message_ids: tuple[str, ...] = ()
    current_task: str | None = None
    suggested_response: str | None = None
    cursor: str | None = None

    @property
    def generation(self) -> int:
        """The generation after activation (`generationCount`), named as on the other events."""
        return self.generation_count


class ThreadUpdateData(WireModel):
    cycle_id: str
    thread_id: str
    old_title: str | None = None
    new_title: str
    timestamp: Timestamp


class ResultIgnoredData(WireModel):
    cycle_id: str
    kind: str
    reason: str


# --- the events -------------------------------------------------------------------------------
class Status(EventEnvelope):
    """Once per step, before generation: both windows and any buffered work."""

    type: Literal["data-om-status"] = "data-om-status"
    data: StatusData


class ObservationStart(EventEnvelope):
    """The observer or reflector starts a blocking cycle."""

    type: Literal["data-om-observation-start"] = "data-om-observation-start"
    data: ObservationStartData


class ObservationEnd(EventEnvelope):
    """A blocking observation or reflection committed."""

    type: Literal["data-om-observation-end"] = "data-om-observation-end"
    data: ObservationEndData


class ObservationFailed(EventEnvelope):
    """A blocking cycle failed; its messages stay unobserved for the next cycle."""

    type: Literal["data-om-observation-failed"] = "data-om-observation-failed"
    data: ObservationFailedData


class BufferingStart(EventEnvelope):
    """A background observation or reflection starts."""

    type: Literal["data-om-buffering-start"] = "data-om-buffering-start"
    data: BufferingStartData


class BufferingEnd(EventEnvelope):
    """A background cycle stored its result; it waits for activation."""

    type: Literal["data-om-buffering-end"] = "data-om-buffering-end"
    data: BufferingEndData


class BufferingFailed(EventEnvelope):
    """A background cycle failed; the threshold path will observe synchronously."""

    type: Literal["data-om-buffering-failed"] = "data-om-buffering-failed"
    data: BufferingFailedData


class Activation(EventEnvelope):
    """Buffered observations (one event per chunk) or a buffered reflection became active."""

    type: Literal["data-om-activation"] = "data-om-activation"
    data: ActivationData


class ThreadUpdate(EventEnvelope):
    """An observer cycle retitled the thread."""

    type: Literal["data-om-thread-update"] = "data-om-thread-update"
    data: ThreadUpdateData


class ResultIgnored(EventEnvelope):
    """A model result that arrived for a head that no longer waits for it (late or duplicate)."""

    type: Literal["om-result-ignored"] = "om-result-ignored"
    data: ResultIgnoredData


class TemporalGapData(WireModel):
    """A reminder inserted before a user message that follows a long silence (spec §14)."""

    marker_id: str
    precedes_message_id: str
    gap_text: str
    gap_ms: Count
    timestamp: str  # "01/15/2026, 2:30 PM PST"
    timestamp_ms: Count
    contents: str  # "<gapText> — <timestamp>", what the agent sees inside <system-reminder>


class TemporalGap(EventEnvelope):
    """`temporalMarkers`: clients render it inline; the context window shows it to the agent."""

    type: Literal["om-temporal-gap"] = "om-temporal-gap"
    data: TemporalGapData


class MemoryDeletedData(WireModel):
    reason: Literal["thread-deleted", "resource-deleted"]
    generation_count: Count


class MemoryDeleted(EventEnvelope):
    """The memory was deleted on request; projections drop it (an omstream event)."""

    type: Literal["om-memory-deleted"] = "om-memory-deleted"
    data: MemoryDeletedData


#: Any record of `<ns>.events`, told apart by `type`.
Event = Annotated[
    Union[
        Status,
        ObservationStart,
        ObservationEnd,
        ObservationFailed,
        BufferingStart,
        BufferingEnd,
        BufferingFailed,
        Activation,
        ThreadUpdate,
        ResultIgnored,
        MemoryDeleted,
        TemporalGap,
    ],
    Field(discriminator="type"),
]

#: Event class by wire `type`.
EVENT_TYPES: dict[str, type[EventEnvelope]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(Event)[0])
}
