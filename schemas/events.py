"""Lifecycle events on `<ns>.events`: the `data-om-*` parts of the product, in an envelope.

Every event is `{type, data, eventId, memoryKey, threadId, seq, schemaVersion, eventTime}`.
`type` and the fields of `data` are the documented ones (camelCase, spec §11), so a UI written
for the original reads them unchanged; the envelope makes the log replayable: `eventId` derives
from the memory key and `seq` (the per-memory sequence number), so a re-emitted event after a
crash has the id of the first and consumers drop it.

omstream adds a few optional fields to `data` (marked below): what a read side needs to rebuild
the context window from the log alone (`observedMessageIds`, `activatedMessageIds`, `cursor`,
`generation`, and the hints an activated chunk brings).  Consumers that do not know them ignore
them.  Two omstream events make `<ns>.events` the read side's only source: `om-message-accepted`
(every message the fold accepted, in the order it folded them) and `om-memory-deleted`.  The
worker stamps each event with `inputOffset`, the position of the input record that caused it, so
a reader can wait until its own write has been folded (`inputLast` marks the last event of
that record).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from .base import Count, Timestamp, WireModel
from .envelope import EventEnvelope
from .own_events import (
    InputHeld,
    InputHeldData,
    InputReleased,
    InputReleasedData,
    MemoryDeleted,
    MemoryDeletedData,
    MessageAccepted,
    MessageAcceptedData,
    TemporalGap,
    TemporalGapData,
    WorkingMemoryUpdated,
    WorkingMemoryUpdatedData,
)
from .status import StatusData

__all__ = [
    "EVENT_TYPES",
    "Activation",
    "ActivationData",
    "BufferingEnd",
    "BufferingEndData",
    "BufferingFailed",
    "BufferingFailedData",
    "BufferingStart",
    "BufferingStartData",
    "CycleFailedData",
    "Event",
    "EventEnvelope",
    "InputHeld",
    "InputHeldData",
    "InputReleased",
    "InputReleasedData",
    "MemoryDeleted",
    "MemoryDeletedData",
    "MessageAccepted",
    "MessageAcceptedData",
    "TemporalGap",
    "TemporalGapData",
    "WorkingMemoryUpdated",
    "WorkingMemoryUpdatedData",
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
    "ThreadUpdate",
    "ThreadUpdateData",
    "TriggeredBy",
]

OperationType = Literal["observation", "reflection"]
#: What activated buffered work: the token threshold, `activateAfterIdle`, or a model change.
TriggeredBy = Literal["threshold", "ttl", "provider_change"]


class MarkerConfig(WireModel):
    """`ObservationMarkerConfig`: the thresholds and scope when the marker was written."""

    message_tokens: Count
    """Unobserved message tokens that trigger an observation, in tokens."""
    observation_tokens: Count
    """Observation tokens that trigger a reflection, in tokens."""
    scope: Literal["thread", "resource"]
    """`thread`: one memory per thread; `resource`: one memory shared by a user's threads."""
    activate_after_idle: Count | None = None
    """Idle time after which buffered observations activate, in milliseconds. Absent when idle
    activation is off."""


class ExtractionFailure(WireModel):
    """An extractor that failed in a cycle whose other extractors may have succeeded."""

    slug: str
    """The extractor's slug."""
    error: str
    """Why the extractor failed."""


# --- synchronous observation and reflection ---------------------------------------------------
class ObservationStartData(WireModel):
    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    started_at: Timestamp
    """When the cycle started, ISO-8601 (event time)."""
    tokens_to_observe: Count
    """What the cycle observes (or, for a reflection, the observations it condenses), in tokens."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    thread_ids: tuple[str, ...]
    """Every thread whose messages the cycle covers (several in resource scope)."""
    config: MarkerConfig
    """The thresholds and scope in force when the event was written."""


class ObservationEndData(WireModel):
    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    completed_at: Timestamp
    """When the cycle ended, ISO-8601 (event time)."""
    duration_ms: Count
    """How long the cycle took, in milliseconds (end minus start)."""
    tokens_observed: Count
    """What the cycle observed (for a reflection: the observations condensed), in tokens."""
    observation_tokens: Count
    """Size of the text this cycle produced (for a reflection: the new observations), in tokens."""
    observations: str | None = None
    """The new observation text (for a reflection: the whole new log). Absent when the cycle
    produced none."""
    current_task: str | None = None
    """The observer's note on what the agent is working on (`<current-task>`). Absent when the
    observer gave none."""
    suggested_response: str | None = None
    """The observer's hint for the agent's next reply (`<suggested-response>`). Absent when the
    observer gave none."""
    extracted_values: dict[str, Any] | None = None
    """Values the extractors found, by extractor slug (any JSON). Absent when no extractor ran."""
    extraction_failures: tuple[ExtractionFailure, ...] | None = None
    """Extractors that failed in this cycle. Absent when none failed."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    # omstream: the messages this cycle covered and the head after it.
    observed_message_ids: tuple[str, ...] = ()
    """omstream: the messages this cycle covered; they leave the context window. Empty for a
    reflection."""
    cursor: str | None = None
    """omstream: the memory's cursor after the cycle, the `createdAt` (ISO-8601) of the newest
    observed message. Absent when nothing is observed yet."""
    generation: Count = 0
    """omstream: the memory's generation (reflections so far) after the cycle."""
    times_corrected: Count | None = None
    """omstream: the Observer's observation lines whose date or time was not one of the observed
    messages' and was corrected to the nearest one. Absent when none was (and for a reflection)."""


class CycleFailedData(WireModel):
    """A failed cycle's fields, declared once: a blocking cycle's (`ObservationFailedData`) and a
    background one's (`BufferingFailedData`) are the same."""

    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    failed_at: Timestamp
    """When the cycle failed, ISO-8601 (event time)."""
    duration_ms: Count
    """How long the cycle took, in milliseconds (end minus start)."""
    tokens_attempted: Count
    """What the failed cycle tried to observe or reflect, in tokens."""
    error: str
    """Why it failed: the error message, `HTTP <status>` or the provider's error (at most 2 000
    characters)."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    observations: str | None = None
    """Partial observation text, when the cycle got that far. Absent otherwise."""


class ObservationFailedData(CycleFailedData):
    pass


# --- async buffering and activation -----------------------------------------------------------
class BufferingStartData(WireModel):
    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    started_at: Timestamp
    """When the cycle started, ISO-8601 (event time)."""
    tokens_to_buffer: Count
    """What the background cycle observes or reflects, in tokens."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    thread_ids: tuple[str, ...]
    """Every thread whose messages the cycle covers (several in resource scope)."""
    config: MarkerConfig
    """The thresholds and scope in force when the event was written."""


class BufferingEndData(WireModel):
    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    completed_at: Timestamp
    """When the cycle ended, ISO-8601 (event time)."""
    duration_ms: Count
    """How long the cycle took, in milliseconds (end minus start)."""
    tokens_buffered: Count
    """What the background cycle observed or reflected, in tokens."""
    buffered_tokens: Count
    """Size of everything buffered now (all chunks, or the buffered reflection), in tokens."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    observations: str | None = None
    """The buffered observation text. Absent when the cycle produced none."""
    extracted_values: dict[str, Any] | None = None
    """Values the extractors found, by extractor slug (any JSON). Absent when no extractor ran."""
    extraction_failures: tuple[ExtractionFailure, ...] | None = None
    """Extractors that failed in this cycle. Absent when none failed."""
    # omstream: the messages the chunk covers (not yet activated), its hints, and the head.
    observed_message_ids: tuple[str, ...] = ()
    """omstream: the messages the chunk covers; they stay in the window until it activates."""
    current_task: str | None = None
    """omstream: the chunk's `<current-task>` hint, applied on activation. Absent when none."""
    suggested_response: str | None = None
    """omstream: the chunk's `<suggested-response>` hint, applied on activation. Absent when none."""
    cursor: str | None = None
    """omstream: the cursor the chunk reaches, `createdAt` (ISO-8601) of its newest message. Absent
    when the chunk covers no message."""
    generation: Count = 0
    """omstream: the memory's generation the chunk was built on."""
    times_corrected: Count | None = None
    """omstream: the Observer's observation lines whose date or time was not one of the buffered
    messages' and was corrected to the nearest one. Absent when none was (and for a reflection)."""


class BufferingFailedData(CycleFailedData):
    pass


class ActivationData(WireModel):
    cycle_id: str
    """The cycle's id; the start, end or failed, and activation events of one cycle share it."""
    operation_type: OperationType
    """What the cycle does: `observation` (messages to observations) or `reflection` (observations
    condensed)."""
    activated_at: Timestamp
    """When the buffered work became active, ISO-8601 (event time)."""
    chunks_activated: Count
    """Chunks activated by this event (1 for an observation chunk)."""
    tokens_activated: Count
    """Message tokens the activated chunks cover (for a reflection: the observations it condensed),
    in tokens."""
    observation_tokens: Count
    """Size of the activated observations (for a reflection: the new log), in tokens."""
    messages_activated: Count
    """Messages that left the context window (0 for a reflection)."""
    record_id: str
    """The memory record (one per generation) the cycle works on."""
    thread_id: str
    """The thread whose step or command started the cycle."""
    generation_count: Count
    """The memory's generation after activation (a reflection starts a new one)."""
    config: MarkerConfig
    """The thresholds and scope in force when the event was written."""
    observations: str | None = None
    """The activated observation text (for a reflection: the whole new log). Absent when empty."""
    triggered_by: TriggeredBy | None = None
    """What activated it: `threshold` (message tokens), `ttl` (`activateAfterIdle` elapsed) or
    `provider_change` (the agent's model changed). Absent when not recorded."""
    last_activity_at: Count | None = None
    """With `ttl`: the last activity before the idle period, in unix milliseconds. Absent
    otherwise."""
    ttl_expired_ms: Count | None = None
    """With `ttl`: how long past `activateAfterIdle` the memory was idle, in milliseconds. Absent
    otherwise."""
    previous_model: str | None = None
    """With `provider_change`: the agent's model before. Absent otherwise."""
    current_model: str | None = None
    """With `provider_change`: the agent's model now. Absent otherwise."""
    # omstream: the messages now covered by observations, the hints, and the cursor after it.
    activated_message_ids: tuple[str, ...] = ()
    """omstream: the messages now covered by observations; they leave the context window. Empty for
    a reflection."""
    current_task: str | None = None
    """omstream: the `<current-task>` hint the chunk brings. Absent when none."""
    suggested_response: str | None = None
    """omstream: the `<suggested-response>` hint the chunk brings. Absent when none."""
    cursor: str | None = None
    """omstream: the cursor after activation, `createdAt` (ISO-8601) of the newest observed
    message. Absent for a reflection."""

    @property
    def generation(self) -> int:
        """The generation after activation (`generationCount`), named as on the other events."""
        return self.generation_count


class ThreadUpdateData(WireModel):
    cycle_id: str
    """The observer cycle that chose the title."""
    thread_id: str
    """The retitled thread."""
    old_title: str | None = None
    """The title before. Absent when the thread had none."""
    new_title: str
    """The thread's new title."""
    timestamp: Timestamp
    """When the title changed, ISO-8601 (event time)."""


class ResultIgnoredData(WireModel):
    cycle_id: str
    """The cycle the ignored result was for."""
    kind: str
    """The job kind of the result (`observe`, `reflect`, `buffer`, ...)."""
    reason: str
    """Why it was ignored (for example `late`: the memory moved on; `duplicate`: already applied)."""


# --- the events -------------------------------------------------------------------------------
class Status(EventEnvelope):
    """Once per step, before generation: both windows and any buffered work."""

    type: Literal["data-om-status"] = "data-om-status"
    """Event kind: always `data-om-status`."""
    data: StatusData
    """The event's fields (spec §11; omstream's additions are optional)."""


class ObservationStart(EventEnvelope):
    """The observer or reflector starts a blocking cycle."""

    type: Literal["data-om-observation-start"] = "data-om-observation-start"
    """Event kind: always `data-om-observation-start`."""
    data: ObservationStartData
    """The event's fields (spec §11; omstream's additions are optional)."""


class ObservationEnd(EventEnvelope):
    """A blocking observation or reflection committed."""

    type: Literal["data-om-observation-end"] = "data-om-observation-end"
    """Event kind: always `data-om-observation-end`."""
    data: ObservationEndData
    """The event's fields (spec §11; omstream's additions are optional)."""


class ObservationFailed(EventEnvelope):
    """A blocking cycle failed; its messages stay unobserved for the next cycle."""

    type: Literal["data-om-observation-failed"] = "data-om-observation-failed"
    """Event kind: always `data-om-observation-failed`."""
    data: ObservationFailedData
    """The event's fields (spec §11; omstream's additions are optional)."""


class BufferingStart(EventEnvelope):
    """A background observation or reflection starts."""

    type: Literal["data-om-buffering-start"] = "data-om-buffering-start"
    """Event kind: always `data-om-buffering-start`."""
    data: BufferingStartData
    """The event's fields (spec §11; omstream's additions are optional)."""


class BufferingEnd(EventEnvelope):
    """A background cycle stored its result; it waits for activation."""

    type: Literal["data-om-buffering-end"] = "data-om-buffering-end"
    """Event kind: always `data-om-buffering-end`."""
    data: BufferingEndData
    """The event's fields (spec §11; omstream's additions are optional)."""


class BufferingFailed(EventEnvelope):
    """A background cycle failed; the threshold path will observe synchronously."""

    type: Literal["data-om-buffering-failed"] = "data-om-buffering-failed"
    """Event kind: always `data-om-buffering-failed`."""
    data: BufferingFailedData
    """The event's fields (spec §11; omstream's additions are optional)."""


class Activation(EventEnvelope):
    """Buffered observations (one event per chunk) or a buffered reflection became active."""

    type: Literal["data-om-activation"] = "data-om-activation"
    """Event kind: always `data-om-activation`."""
    data: ActivationData
    """The event's fields (spec §11; omstream's additions are optional)."""


class ThreadUpdate(EventEnvelope):
    """An observer cycle retitled the thread."""

    type: Literal["data-om-thread-update"] = "data-om-thread-update"
    """Event kind: always `data-om-thread-update`."""
    data: ThreadUpdateData
    """The event's fields (spec §11; omstream's additions are optional)."""


class ResultIgnored(EventEnvelope):
    """A model result that arrived for a head that no longer waits for it (late or duplicate)."""

    type: Literal["om-result-ignored"] = "om-result-ignored"
    """Event kind: always `om-result-ignored`."""
    data: ResultIgnoredData
    """The event's fields (spec §11; omstream's additions are optional)."""


#: Any record of `<ns>.events`, told apart by `type`.
Event = Annotated[
    Status
        | ObservationStart
        | ObservationEnd
        | ObservationFailed
        | BufferingStart
        | BufferingEnd
        | BufferingFailed
        | Activation
        | ThreadUpdate
        | ResultIgnored
        | MemoryDeleted
        | TemporalGap
        | MessageAccepted
        | InputHeld
        | InputReleased
        | WorkingMemoryUpdated,
    Field(discriminator="type"),
]

#: Event class by wire `type`.
EVENT_TYPES: dict[str, type[EventEnvelope]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(Event)[0])
}
