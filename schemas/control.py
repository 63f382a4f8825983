"""Records on `<ns>.control`: agent-loop markers and commands to a memory.

Markers (`step-started`, `turn-ended`) tell the fold where the agent is; commands ask it to do
something outside the token thresholds: observe or reflect now, override the thresholds of one
memory, patch a thread's title, delete a thread or a resource.  Every record is keyed by the
memory key like the messages, so one partition applies them in one order with the messages.

Control records and messages travel on different topics, so Kafka does not order them against
each other.  A step names the newest message the agent had (`afterMessageId`); the fold holds the
step until that message has been folded, which restores the agent's own order.

`requestId` is the producer's idempotency key: a command re-sent with the same id (after a
timeout, say) is applied once.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

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
]


class ControlRecord(WireModel):
    """What every control record carries besides its `type`."""

    schema_version: int = SCHEMA_VERSION
    thread_id: NonEmptyStr
    resource_id: str | None = None
    at: Timestamp
    request_id: NonEmptyStr | None = None


class StepStarted(ControlRecord):
    """The agent starts step `stepNumber` of a turn; thresholds are checked here."""

    type: Literal["step-started"] = "step-started"
    step_number: Count
    model: str | None = None
    after_message_id: str | None = None


class TurnEnded(ControlRecord):
    """The agent's turn is over (the point where idle buffering may start)."""

    type: Literal["turn-ended"] = "turn-ended"
    after_message_id: str | None = None


class ObserveRequested(ControlRecord):
    """Observe the unobserved messages now, whatever their token count (manual `observe()`)."""

    type: Literal["observe-requested"] = "observe-requested"


class ReflectRequested(ControlRecord):
    """Reflect the observations now (manual `reflect()`), optionally guided by `prompt`."""

    type: Literal["reflect-requested"] = "reflect-requested"
    prompt: str | None = None


class ObservationOverrides(WireModel):
    message_tokens: int | None = Field(default=None, gt=0)


class ReflectionOverrides(WireModel):
    observation_tokens: int | None = Field(default=None, gt=0)


class ConfigOverrides(WireModel):
    """The only per-memory overrides the original reads (spec §2, "Per-record overrides")."""

    observation: ObservationOverrides | None = None
    reflection: ReflectionOverrides | None = None


class ConfigOverridden(ControlRecord):
    """Deep-merge `overrides` into this memory's overrides (`updateRecordConfig()`)."""

    type: Literal["config-overridden"] = "config-overridden"
    overrides: ConfigOverrides


class ThreadPatched(ControlRecord):
    """Set a thread's title, or pin it so observer cycles stop retitling the thread."""

    type: Literal["thread-patched"] = "thread-patched"
    title: str | None = None
    title_pinned: bool | None = None


class ThreadDeleted(ControlRecord):
    """Forget the thread: its memory state and its part of the projections."""

    type: Literal["thread-deleted"] = "thread-deleted"


class ResourceDeleted(ControlRecord):
    """Forget every thread of a resource; `threadId` is optional here, `resourceId` is required."""

    type: Literal["resource-deleted"] = "resource-deleted"
    thread_id: NonEmptyStr | None = None
    resource_id: NonEmptyStr


#: Any record of `<ns>.control`, told apart by `type`.
Control = Annotated[
    Union[
        StepStarted,
        TurnEnded,
        ObserveRequested,
        ReflectRequested,
        ConfigOverridden,
        ThreadPatched,
        ThreadDeleted,
        ResourceDeleted,
    ],
    Field(discriminator="type"),
]
