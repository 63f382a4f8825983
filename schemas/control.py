"""Records on the input log `<ns>.log`: agent-loop markers and commands to a memory.

Markers (`step-started`, `turn-ended`) tell the fold where the agent is; commands ask it to do
something outside the token thresholds: observe or reflect now, override the thresholds of one
memory, patch a thread's title, delete a thread or a resource.  Every record is keyed by the
memory key like the messages, so one partition applies them in one order with the messages.

Control records, messages and model results are records of one log, keyed by the memory key, so
the fold applies them in the order they were written.  A step may name the newest message the
agent had (`afterMessageId`), for the reader; the fold does not wait for it (in one ordered log a
message not folded before its step was refused or never sent).

`requestId` is the producer's idempotency key: a command re-sent with the same id (after a
timeout, say) is applied once.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = [
    "ConfigOverridden",
    "ConfigOverrides",
    "Control",
    "ControlRecord",
    "ObservationOverrides",
    "ObserveRequested",
    "ReflectRequested",
    "ReflectionOverrides",
    "ResourceDeleted",
    "StepStarted",
    "ThreadDeleted",
    "ThreadPatched",
    "TurnEnded",
    "WorkingMemorySet",
]


class ControlRecord(WireModel):
    """What every control record carries besides its `type`."""

    schema_version: int = SCHEMA_VERSION
    """The wire-format version the producer wrote; newer records go to the dead-letter topic.
    Absent means the current version."""
    thread_id: NonEmptyStr
    """The thread the record is about."""
    resource_id: str | None = None
    """The thread's owner (user). Absent for thread-scoped memories that do not name one."""
    at: Timestamp
    """When the producer wrote the record, ISO-8601 with a time zone; the fold's clock."""
    request_id: NonEmptyStr | None = None
    """The producer's idempotency key: a record re-sent with the same id is applied once. Absent
    when the producer does not deduplicate."""


class StepStarted(ControlRecord):
    """The agent starts step `stepNumber` of a turn; thresholds are checked here."""

    type: Literal["step-started"] = "step-started"
    """Record kind: always `step-started`."""
    step_number: Count
    """The step's number in the turn, from 0 (step 0 may activate buffered observations)."""
    model: str | None = None
    """The agent's model for this step (`openai/gpt-4o`); a change activates buffered
    observations. Absent when the producer does not say."""
    after_message_id: str | None = None
    """The newest message the agent had when the step began (informational: the log's order is
    the fold's). Absent when the step follows no particular message."""


class TurnEnded(ControlRecord):
    """The agent's turn is over (the point where idle buffering may start)."""

    type: Literal["turn-ended"] = "turn-ended"
    """Record kind: always `turn-ended`."""
    after_message_id: str | None = None
    """The last message of the turn (informational). Absent when not known."""


class ObserveRequested(ControlRecord):
    """Observe the unobserved messages now, whatever their token count (manual `observe()`)."""

    type: Literal["observe-requested"] = "observe-requested"
    """Record kind: always `observe-requested`."""


class ReflectRequested(ControlRecord):
    """Reflect the observations now (manual `reflect()`), optionally guided by `prompt`."""

    type: Literal["reflect-requested"] = "reflect-requested"
    """Record kind: always `reflect-requested`."""
    prompt: str | None = None
    """Extra guidance for the reflector. Absent for a plain reflection."""


class ObservationOverrides(WireModel):
    """Observation thresholds of one memory."""

    message_tokens: int | None = Field(default=None, gt=0)
    """Unobserved message tokens that trigger an observation, in tokens. Absent keeps the
    current value."""


class ReflectionOverrides(WireModel):
    """Reflection thresholds of one memory."""

    observation_tokens: int | None = Field(default=None, gt=0)
    """Observation tokens that trigger a reflection, in tokens. Absent keeps the current value."""


class ConfigOverrides(WireModel):
    """The only per-memory overrides the original reads (spec §2, "Per-record overrides")."""

    observation: ObservationOverrides | None = None
    """Overrides of the observation thresholds. Absent leaves them as they are."""
    reflection: ReflectionOverrides | None = None
    """Overrides of the reflection thresholds. Absent leaves them as they are."""


class ConfigOverridden(ControlRecord):
    """Deep-merge `overrides` into this memory's overrides (`updateRecordConfig()`)."""

    type: Literal["config-overridden"] = "config-overridden"
    """Record kind: always `config-overridden`."""
    overrides: ConfigOverrides
    """The thresholds to change, deep-merged into the memory's earlier overrides."""


class ThreadPatched(ControlRecord):
    """Set a thread's title, or pin it so observer cycles stop retitling the thread."""

    type: Literal["thread-patched"] = "thread-patched"
    """Record kind: always `thread-patched`."""
    title: str | None = None
    """The thread's new title. Absent leaves the title as it is."""
    title_pinned: bool | None = None
    """True stops observer cycles from retitling the thread, false lets them again. Absent leaves
    it as it is."""


class ThreadDeleted(ControlRecord):
    """Forget the thread: its memory state and its part of the projections."""

    type: Literal["thread-deleted"] = "thread-deleted"
    """Record kind: always `thread-deleted`."""


class ResourceDeleted(ControlRecord):
    """Forget every thread of a resource; `threadId` is optional here, `resourceId` is required."""

    type: Literal["resource-deleted"] = "resource-deleted"
    """Record kind: always `resource-deleted`."""
    # Optional on this record only: pydantic's redeclared field keeps its place on the wire, which
    # mypy cannot express (it sees an inherited `str` widened); a reader of any ControlRecord's
    # thread_id must allow None for this one.
    thread_id: NonEmptyStr | None = None  # type: ignore[assignment]
    """A thread of the resource, used only to route the record. Absent when none is named."""
    resource_id: NonEmptyStr
    """The resource (user) whose threads are all forgotten."""


class WorkingMemorySet(ControlRecord):
    """The agent's new working-memory document (its `updateWorkingMemory` / `setWorkingMemory`
    tool): the whole document, replacing the one the memory keeps.  Refused unless the memory
    keeps one for the agent (`workingMemory.enabled`, `workingMemory.agentManaged`)."""

    type: Literal["working-memory-set"] = "working-memory-set"
    """Record kind: always `working-memory-set`."""
    working_memory: str | dict[str, Any]
    """The document: markdown (after `workingMemory.template`), or a JSON object when
    `workingMemory.schema` is set."""


#: Any agent-loop marker or command of `<ns>.log`, told apart by `type`.
Control = Annotated[
    StepStarted
        | TurnEnded
        | ObserveRequested
        | ReflectRequested
        | ConfigOverridden
        | ThreadPatched
        | ThreadDeleted
        | ResourceDeleted
        | WorkingMemorySet,
    Field(discriminator="type"),
]
