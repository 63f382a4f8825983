"""The envelope every record of `<ns>.events` carries: its id, memory, thread, `seq` and times."""

from __future__ import annotations

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = ["EventEnvelope"]


class EventEnvelope(WireModel):
    event_id: NonEmptyStr
    """The event's id, derived from `memoryKey` and `seq`: an event re-sent after a crash has the
    same id, so consumers drop it."""
    memory_key: NonEmptyStr
    """The memory the event belongs to (`thread:<threadId>` or `resource:<resourceId>`); the record
    key."""
    thread_id: str | None = None
    """The thread the event is about. Absent for events about a whole resource memory."""
    seq: Count
    """The event's position in its memory's log, increasing with every event; a consumer applies
    each `seq` once."""
    schema_version: int = SCHEMA_VERSION
    """The wire-format version of the event. Absent means the current version."""
    event_time: Timestamp
    """When it happened, ISO-8601: the time of the input that caused it (event time, not wall
    clock)."""
    input_offset: Count | None = None
    """omstream: the offset in `<ns>.log` of the input record whose fold emitted the event; the
    partition is the event's own (both topics are keyed by the memory key and have the same
    partition count). Readers use it to wait for their own writes. Absent outside the worker
    (`om simulate`)."""
    input_last: bool | None = None
    """omstream: true on the last event the input record at `inputOffset` caused, so a reader
    knows that record's output is complete. Absent on the others and outside the worker."""
