"""omstream's own events about a memory, beside the documented `data-om-*` lifecycle ones
(`schemas.events` gathers them all in `Event`): a temporal-gap reminder, a deletion, an accepted
message, the agent's working-memory write, and inputs held behind a cycle and released."""

from __future__ import annotations

from typing import Any, Literal

from .base import Count, WireModel
from .envelope import EventEnvelope
from .messages import Message

__all__ = ["InputHeld", "InputHeldData", "InputReleased", "InputReleasedData", "MemoryDeleted", "MemoryDeletedData",
           "MessageAccepted", "MessageAcceptedData", "TemporalGap", "TemporalGapData", "WorkingMemoryUpdated",
           "WorkingMemoryUpdatedData"]


class TemporalGapData(WireModel):
    """A reminder inserted before a user message that follows a long silence (spec §14)."""

    marker_id: str
    """The reminder's message id in the context window (`__temporal_gap_<messageId>`)."""
    precedes_message_id: str
    """The user message that follows the silence."""
    gap_text: str
    """The silence in words (`3 hours later`)."""
    gap_ms: Count
    """The silence, in milliseconds."""
    timestamp: str
    """The time of the following message as shown to the agent (`01/15/2026, 2:30 PM PST`)."""
    timestamp_ms: Count
    """The time of the following message, in unix milliseconds; the reminder sorts 1 ms before it."""
    contents: str
    """What the agent reads inside `<system-reminder>`: `<gapText> — <timestamp>`."""


class TemporalGap(EventEnvelope):
    """`temporalMarkers`: clients render it inline; the context window shows it to the agent."""

    type: Literal["om-temporal-gap"] = "om-temporal-gap"
    """Event kind: always `om-temporal-gap`."""
    data: TemporalGapData
    """The event's fields (spec §11; omstream's additions are optional)."""


class MemoryDeletedData(WireModel):
    reason: Literal["thread-deleted", "resource-deleted"]
    """What deleted it: `thread-deleted` or `resource-deleted` command."""
    generation_count: Count
    """The memory's generation when it was deleted."""
    observations: str | None = None
    """Resource scope, one thread deleted (`threadId`): the observations the resource keeps, that
    thread's sections removed; the other threads' views take this text.  Absent when the whole
    memory is gone."""


class MemoryDeleted(EventEnvelope):
    """The memory was deleted on request; projections drop it (an omstream event)."""

    type: Literal["om-memory-deleted"] = "om-memory-deleted"
    """Event kind: always `om-memory-deleted`."""
    data: MemoryDeletedData
    """The event's fields (spec §11; omstream's additions are optional)."""


class MessageAcceptedData(WireModel):
    """A message the fold accepted into the memory (not a duplicate, not refused)."""

    message: Message
    """omstream: the message as the fold folded it, in its wire form; `tokens` is the count the
    fold used (with its counter's name)."""


class MessageAccepted(EventEnvelope):
    """A message joined the memory; the read side shows it until an observation covers it (an
    omstream event: projections read messages from here, never from the input log)."""

    type: Literal["om-message-accepted"] = "om-message-accepted"
    """Event kind: always `om-message-accepted`."""
    data: MessageAcceptedData
    """The event's fields (an omstream addition)."""


class WorkingMemoryUpdatedData(WireModel):
    """The agent wrote the working-memory document (`working-memory-set`)."""

    working_memory: str | dict[str, Any]
    """The whole document as it is now."""
    request_id: str | None = None
    """The command's `requestId`, when it had one."""


class WorkingMemoryUpdated(EventEnvelope):
    """The memory's working-memory document, as the agent wrote it (an omstream event; the
    Observer's updates come in `extractedValues["working-memory"]` of its end events)."""

    type: Literal["om-working-memory-updated"] = "om-working-memory-updated"
    """Event kind: always `om-working-memory-updated`."""
    data: WorkingMemoryUpdatedData
    """The event's fields (an omstream addition)."""


class InputHeldData(WireModel):
    """The memory holds its inputs behind a cycle in flight (at `blockAfter`, or during a
    blocking observation or reflection): they are applied, in order, when it ends."""

    cycle_id: str | None = None
    """The cycle the held inputs wait for. Absent when the state does not say (a state written by
    an older build)."""
    held: Count
    """How many inputs the memory holds now, this one included."""
    input_type: str | None = None
    """The held input's kind (`message`, `step-started`, a command's type). Absent when the event
    marks inputs held again behind the next cycle, right after a release."""
    message_id: str | None = None
    """The held message's id. Absent for other inputs."""


class InputHeld(EventEnvelope):
    """An input the memory holds until a cycle ends (an omstream event; with `?after=` the read
    side learns from it that the position it waits for is held)."""

    type: Literal["om-input-held"] = "om-input-held"
    """Event kind: always `om-input-held`."""
    data: InputHeldData
    """The event's fields (an omstream addition)."""


class InputReleasedData(WireModel):
    """The cycle the held inputs waited for ended: they are applied now (their own events follow)."""

    cycle_id: str | None = None
    """The cycle that ended. Absent when the state does not say (a state written by an older build)."""
    released: Count
    """How many inputs the memory held until now."""


class InputReleased(EventEnvelope):
    """The memory applies the inputs it held (an omstream event)."""

    type: Literal["om-input-released"] = "om-input-released"
    """Event kind: always `om-input-released`."""
    data: InputReleasedData
    """The event's fields (an omstream addition)."""
